"""Search the space with Optuna's TPE, starting from what is known to work, stopping when it stops paying.

Every measurement is expensive (a server start and a step load), so the search counts
distinct configs measured, not Optuna trials: a config suggested twice is answered from
the first measurement. Infeasible configs (no step within the SLO) score 0 and are marked
to TPE through its constraints, so it learns to stay away from them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from loadtest.tuning.measure import Measurement, Measurer
from loadtest.tuning.space import SearchSpace, ServingConfig, buckets_text, parse_buckets

SAMPLERS = ("tpe", "random")


@dataclass
class SearchResult:
    """The measurements in the order they were taken, and why the search stopped."""

    measurements: list[Measurement] = field(default_factory=list)
    suggestions: int = 0
    stopped: str = ""

    @property
    def best(self) -> Measurement | None:
        feasible = [m for m in self.measurements if m.feasible]
        return max(feasible, key=lambda m: m.objective) if feasible else None


def suggest_config(trial, space: SearchSpace) -> ServingConfig:
    """Optuna's define-by-run choice of one config (the batching window only when batching is on; a CUDA graph only
    on the cuda provider with buckets). GPU dimensions with one choice are not asked, so a CPU space's trials
    are the same as before they existed."""

    def pick(name: str, choices: list):
        return choices[0] if len(choices) == 1 else trial.suggest_categorical(name, choices)

    size = trial.suggest_categorical("max_batch_size", space.max_batch_size)
    window = trial.suggest_categorical("max_batch_time_ms", space.max_batch_time_ms) if size > 1 else 0
    provider = pick("provider", list(space.providers))
    buckets = parse_buckets(pick("batch_buckets", [buckets_text(b) for b in space.batch_buckets]))
    graph = pick("cuda_graph", space.cuda_graphs) if provider == "cuda" and buckets else False
    return ServingConfig(
        provider=provider,
        batch_buckets=buckets,
        cuda_graph=graph,
        frontends=pick("frontends", space.frontends),
        variant=trial.suggest_categorical("variant", list(space.variants)),
        parallel_workers=trial.suggest_categorical("parallel_workers", space.parallel_workers),
        max_batch_size=size,
        max_batch_time_ms=window,
        intra_op_threads=trial.suggest_categorical("intra_op_threads", space.intra_op_threads),
        inter_op_threads=trial.suggest_categorical("inter_op_threads", space.inter_op_threads),
        inference_threads=trial.suggest_categorical("inference_threads", space.inference_threads),
        max_batch_rows=trial.suggest_categorical("max_batch_rows", space.max_batch_rows),
    )


def search(
    space: SearchSpace,
    measurer: Measurer,
    *,
    budget: int,
    patience: int = 4,
    seed: int = 0,
    start_from_known: bool = True,
    sampler: str = "tpe",
    startup_trials: int = 2,
    on_measurement: Callable[[Measurement], None] | None = None,
) -> SearchResult:
    """Measure at most `budget` distinct configs; stop after `patience` of them bring no improvement."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    if sampler not in SAMPLERS:
        raise ValueError(f"unknown sampler {sampler!r}; choose one of {', '.join(SAMPLERS)}")
    # Independent TPE: on these few categorical dimensions it beat the multivariate variant
    # (and random search) on synthetic landscapes with a known optimum.
    chosen = (
        optuna.samplers.TPESampler(seed=seed, n_startup_trials=startup_trials)
        if sampler == "tpe"
        else optuna.samplers.RandomSampler(seed=seed)
    )
    study = optuna.create_study(direction="maximize", sampler=chosen)
    if start_from_known:
        for config in space.known_good():
            study.enqueue_trial(config.params(), skip_if_exists=True)

    grid_size = len(space.grid())
    budget = min(budget, grid_size)
    result = SearchResult()
    seen: dict[str, Measurement] = {}
    state = {"best": float("-inf"), "since": 0}

    def objective(trial) -> float:
        config = suggest_config(trial, space)
        result.suggestions += 1
        measurement = seen.get(config.key)
        if measurement is None:
            measurement = seen[config.key] = measurer.measure(config)
            result.measurements.append(measurement)
            if on_measurement:
                on_measurement(measurement)
            if measurement.feasible and measurement.objective > state["best"] * 1.0001:
                state["best"], state["since"] = measurement.objective, 0
            else:
                state["since"] += 1
        trial.set_constraint("slo", 0.0 if measurement.feasible else max(measurement.violation, 1e-3))
        trial.set_user_attr("key", config.key)
        if len(seen) >= budget:
            result.stopped = f"measured {len(seen)} configs (the budget)"
            trial.study.stop()
        elif state["since"] >= patience:
            result.stopped = f"{patience} configs in a row brought no improvement"
            trial.study.stop()
        return measurement.objective

    # Suggestions that repeat a measured config cost nothing; still, bound them.
    study.optimize(objective, n_trials=max(budget * 10, 50), gc_after_trial=False)
    if not result.stopped:
        result.stopped = f"the sampler kept repeating measured configs ({result.suggestions} suggestions)"
    return result
