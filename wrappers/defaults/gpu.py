"""On a GPU provider, the kernels' settings model-settings.json left unset, chosen at load by timing this model here.

Where runs get a session per bucket (`wrappers.running.bucket_sessions`), two CUDA settings are chosen by measurement,
each between candidates timed side by side on sessions of their own that meet one shape each:

- cudnn_conv_algo_search: EXHAUSTIVE (cuDNN times every kernel for a shape once) against HEURISTIC (it picks one
  from its rules), at the largest bucket, where the kernels' speed matters most;
- cuda.enable_cuda_graph: each bucket's run captured once and replayed with one launch, against a launch per
  operator, at the smallest bucket, where launching is most of a run's time. A graph that cannot be captured
  (operators left on the CPU, say) is not a candidate.

Each choice is logged with its numbers, shown in the model's V2 metadata and published in `slipway_setting`
(cudnn_conv_algo_search as ONNX Runtime's own code: 0 EXHAUSTIVE, 1 HEURISTIC, 2 DEFAULT). Explicit settings win.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from engine.runner import SessionRunner
from engine.session import create_session
from engine.tensor_specs import TensorSpec
from slipway.runtime_settings import RuntimeSettings
from wrappers import process_state
from wrappers.defaults.choice import DEFAULT, EXPLICIT, MEASURED, Choice
from wrappers.running.bucket_sessions import BucketRunner, build, per_bucket, runs_on_cuda
from wrappers.running.warm_up import zeros

logger = logging.getLogger(__name__)

SESSION_PER_BUCKET = "session_per_bucket"
CUDA_GRAPHS = "cuda_graphs"
CUDNN_SEARCH = "cudnn_conv_algo_search"
SEARCH_MODES = ("EXHAUSTIVE", "HEURISTIC", "DEFAULT")  # ONNX Runtime's codes 0, 1, 2
SEARCH_CANDIDATES = ("EXHAUSTIVE", "HEURISTIC")
TIMED_RUNS = 30  # per candidate, after its warm-up runs; the median decides
TIMED_SECONDS = 0.5  # at most, per candidate
WARM_RUNS = 3  # a graph is captured after ONNX Runtime's first regular runs


@dataclass(frozen=True)
class BucketPlan:
    """The runner for a padded model on a GPU, the settings it was built with and each choice made for it."""

    runner: BucketRunner
    settings: RuntimeSettings
    choices: dict[str, Choice]


Timer = Callable[[RuntimeSettings, int], float]


def session_timer(model_path: Path, inputs: list[TensorSpec], output_names: list[str]) -> Timer:
    """`time(settings, rows)`: the median seconds of a run of `rows` rows of zeros on a fresh session built as
    `settings` say, after its warm-up runs."""

    def time_runs(settings: RuntimeSettings, rows: int) -> float:
        runner = SessionRunner(create_session(model_path, settings), io_binding=settings.io_binding)
        feeds = {spec.name: zeros(spec, rows) for spec in inputs}
        for _ in range(WARM_RUNS):
            runner.run(output_names, feeds)
        timings: list[float] = []
        deadline = time.perf_counter() + TIMED_SECONDS
        while len(timings) < TIMED_RUNS and (len(timings) < 3 or time.perf_counter() < deadline):
            started = time.perf_counter()
            runner.run(output_names, feeds)
            timings.append(time.perf_counter() - started)
        return sorted(timings)[len(timings) // 2]

    return time_runs


def _with_cuda(config: RuntimeSettings, **update: object) -> RuntimeSettings:
    return config.model_copy(update={"cuda": config.cuda.model_copy(update=update)})


def choose_kernels(
    config: RuntimeSettings, buckets: Sequence[int], timer: Timer, *, model: str
) -> tuple[RuntimeSettings, dict[str, Choice]]:
    """The settings with cudnn_conv_algo_search and cuda.enable_cuda_graph chosen where unset, and each choice."""
    choices: dict[str, Choice] = {}
    if CUDNN_SEARCH in config.cuda.model_fields_set:
        choices[CUDNN_SEARCH] = Choice(CUDNN_SEARCH, config.cuda.cudnn_conv_algo_search, EXPLICIT, "set in model-settings.json")
    else:
        largest = max(buckets)
        timed = _timed(
            {mode: _with_cuda(config, cudnn_conv_algo_search=mode, enable_cuda_graph=False) for mode in SEARCH_CANDIDATES},
            largest,
            timer,
            model=model,
            setting=CUDNN_SEARCH,
        )
        best = min(timed, key=lambda mode: timed[mode]) if timed else SEARCH_CANDIDATES[0]
        numbers = ", ".join(f"{mode} {1000 * seconds:.3f} ms" for mode, seconds in timed.items())
        choices[CUDNN_SEARCH] = Choice(
            CUDNN_SEARCH,
            best,
            MEASURED if timed else DEFAULT,
            f"a run of {largest} rows took {numbers}" if timed else "no candidate ran",
        )
        config = _with_cuda(config, cudnn_conv_algo_search=best)
    if config.cuda.enable_cuda_graph is not None:
        choices[CUDA_GRAPHS] = Choice(
            CUDA_GRAPHS, int(config.cuda.enable_cuda_graph), EXPLICIT, "cuda.enable_cuda_graph set in model-settings.json"
        )
        return config, choices
    smallest = min(buckets)
    timed_graphs = _timed(
        {flag: _with_cuda(config, enable_cuda_graph=bool(flag)) for flag in (1, 0)},
        smallest,
        timer,
        model=model,
        setting=CUDA_GRAPHS,
    )
    graphs = 1 if timed_graphs and min(timed_graphs, key=lambda flag: timed_graphs[flag]) == 1 else 0
    numbers = ", ".join(
        f"{'with' if flag else 'without'} a CUDA graph {1000 * seconds:.3f} ms" for flag, seconds in timed_graphs.items()
    )
    reason = (
        f"a run of {smallest} row(s) took {numbers}"
        if 1 in timed_graphs
        else f"no graph could be captured here ({numbers or 'no candidate ran'})"
    )
    choices[CUDA_GRAPHS] = Choice(CUDA_GRAPHS, graphs, MEASURED if timed_graphs else DEFAULT, reason)
    return _with_cuda(config, enable_cuda_graph=bool(graphs)), choices


def _timed(candidates: dict, rows: int, timer: Timer, *, model: str, setting: str) -> dict:
    """Each candidate's seconds per run (one that fails to build or run is left out, with a warning)."""
    timed = {}
    for key, settings in candidates.items():
        try:
            timed[key] = timer(settings, rows)
        except Exception as err:  # ONNX Runtime raises its own types: a graph it cannot capture, say
            logger.warning(
                "%s: %s candidate %s could not run (%s): left out", model, setting, key, " ".join(str(err).split())[:300]
            )
    return timed


def plan_buckets(
    model_path: Path,
    config: RuntimeSettings,
    buckets: Sequence[int],
    providers: Sequence[str],
    inputs: list[TensorSpec],
    output_names: list[str],
    *,
    model: str,
    version: str | None,
    timer: Timer | None = None,
) -> BucketPlan | None:
    """A session per bucket (`bucket_sessions.per_bucket`; `providers`: the ones the session uses), built with the
    kernels' settings chosen here on CUDA; None where runs keep one session. `timer`: how candidates are timed
    (None: `session_timer` on zeros)."""
    if not per_bucket(config, buckets, providers):
        return None
    on_cuda = runs_on_cuda(providers)
    choices = {
        SESSION_PER_BUCKET: Choice(
            SESSION_PER_BUCKET,
            1,
            EXPLICIT if config.session_per_bucket else DEFAULT,
            "set in model-settings.json"
            if config.session_per_bucket
            else f"runs are padded to {list(buckets)} rows on CUDA, whose convolutions re-plan at every change of shape "
            "between runs: each bucket gets a session that meets one shape",
        )
    }
    if on_cuda:
        config, kernel_choices = choose_kernels(
            config, buckets, timer or session_timer(model_path, inputs, output_names), model=model
        )
        choices.update(kernel_choices)
    runner = build(model_path, config, buckets, copies=config.inference_threads if on_cuda else 1)
    for choice in choices.values():
        logger.info("%s: %s %s (%s): %s", model, choice.setting, choice.value, choice.source, choice.reason)
    process_state.current().metrics.publish_settings(
        model, version, {name: (_gauge_value(choice.value), choice.source) for name, choice in choices.items()}
    )
    return BucketPlan(runner, config, choices)


def _gauge_value(value: int | float | str) -> float:
    return float(SEARCH_MODES.index(value)) if isinstance(value, str) else float(value)
