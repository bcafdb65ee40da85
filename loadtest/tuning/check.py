"""Hold the tuner against brute force: measure the whole grid, then let the tuner search the same numbers.

The tuner's trials are answered from the grid's measurements, so both see exactly the same
figures; the check passes when the tuner's best reaches `target` (95%) of the grid's best
feasible objective within `budget_fraction` (25%) of the grid's trials.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loadtest.tuning.measure import Measurement, Measurer, TableMeasurer
from loadtest.tuning.search import search
from loadtest.tuning.space import SearchSpace

MIN_GRID, MAX_GRID = 24, 48


class CheckError(ValueError):
    """The space does not make a meaningful check (too small or too large a grid)."""


@dataclass
class CheckResult:
    grid: list[Measurement]
    tuner: list[Measurement]
    budget: int
    target: float
    robustness: dict[str, Any]
    stopped: str

    @property
    def grid_best(self) -> Measurement | None:
        feasible = [m for m in self.grid if m.feasible]
        return max(feasible, key=lambda m: m.objective) if feasible else None

    @property
    def tuner_best(self) -> Measurement | None:
        feasible = [m for m in self.tuner if m.feasible]
        return max(feasible, key=lambda m: m.objective) if feasible else None

    @property
    def ratio(self) -> float:
        if not self.grid_best or not self.tuner_best:
            return 0.0
        return self.tuner_best.objective / self.grid_best.objective

    @property
    def passed(self) -> bool:
        return self.ratio >= self.target and len(self.tuner) <= self.budget

    def as_dict(self) -> dict[str, Any]:
        return {
            "grid_best": round(self.grid_best.objective, 3) if self.grid_best else None,
            "grid_best_config": self.grid_best.config.key if self.grid_best else None,
            "grid_trials": len(self.grid),
            "tuner_best": round(self.tuner_best.objective, 3) if self.tuner_best else None,
            "tuner_best_config": self.tuner_best.config.key if self.tuner_best else None,
            "tuner_trials": len(self.tuner),
            "tuner_budget": self.budget,
            "ratio": round(self.ratio, 4),
            "target": self.target,
            "passed": self.passed,
            "tuner_stopped": self.stopped,
            "tuner_order": [m.config.key for m in self.tuner],
            "robustness": self.robustness,
            "grid": [m.as_dict() for m in self.grid],
        }


def check_grid_size(space: SearchSpace) -> int:
    size = len(space.grid())
    if not MIN_GRID <= size <= MAX_GRID:
        raise CheckError(
            f"the space has {size} configurations; the check wants {MIN_GRID}-{MAX_GRID} "
            "(change --workers, --batch-sizes, --batch-times-ms, --intra or the variants)"
        )
    return size


def run_check(
    space: SearchSpace,
    measurer: Measurer,
    *,
    budget_fraction: float = 0.25,
    target: float = 0.95,
    patience: int = 4,
    seed: int = 0,
    sampler: str = "tpe",
    robustness_seeds: int = 10,
    on_grid_measurement=None,
) -> CheckResult:
    """Measure every config with `measurer`, then run the tuner on those measurements."""
    grid = []
    for config in space.grid():
        grid.append(measurer.measure(config))
        if on_grid_measurement:
            on_grid_measurement(grid[-1])
    budget = max(1, math.floor(budget_fraction * len(grid)))
    table = TableMeasurer(grid)
    main = search(space, table, budget=budget, patience=patience, seed=seed, sampler=sampler)
    best = max((m.objective for m in grid if m.feasible), default=0.0)
    robustness: dict[str, Any] = {
        "seeds": robustness_seeds,
        "note": "runs reaching the target with other sampler seeds, "
        "on the same measurements and budget: the tuner, TPE without the known-good start, random search",
    }
    for label, options in (
        ("tuner", {"sampler": sampler}),
        ("tpe_without_known_good", {"start_from_known": False}),
        ("random_search", {"start_from_known": False, "sampler": "random"}),
    ):
        reached = 0
        for other in range(seed + 1, seed + 1 + robustness_seeds):
            run = search(space, TableMeasurer(grid), budget=budget, patience=patience, seed=other, **options)
            reached += bool(best) and run.best is not None and run.best.objective >= target * best
        robustness[label] = reached
    return CheckResult(grid, main.measurements, budget, target, robustness, main.stopped)


def check_markdown(result: CheckResult, *, cpu_count: int | None, load_before: float, minutes: float, day: str) -> str:
    """The check in a few lines, for reports/tune-check.md and docs/benchmarks.md."""
    lines = [
        f"Measured by `make tune-check` on {cpu_count} CPU cores (load average {load_before:.2f} at the start), "
        f"{day}: {len(result.grid)} configs in {minutes:.0f} min.",
        "",
    ]
    lines += ["| | config | req/s per core | req/s at capacity | p95 ms | cores | trials |", "|---|---|--:|--:|--:|--:|--:|"]
    for label, best, trials in (
        ("grid (every config)", result.grid_best, len(result.grid)),
        ("tuner", result.tuner_best, f"{len(result.tuner)} of {result.budget} allowed"),
    ):
        if best is None:
            lines.append(f"| {label} | none feasible | | | | | {trials} |")
        else:
            lines.append(
                f"| {label} | `{best.config.key}` | {best.objective:.0f} | {best.capacity_rps:.0f} | "
                f"{best.p95_ms:g} | {best.cpu_cores:.2f} | {trials} |"
            )
    robust = result.robustness
    lines += [
        "",
        f"The tuner reached **{result.ratio:.1%}** of the grid's best (target {result.target:.0%}) with "
        f"{len(result.tuner)} trials: check {'passed' if result.passed else '**failed**'}. On the same measurements "
        f"with {robust['seeds']} other sampler seeds, the target was reached by the tuner {robust['tuner']} times, "
        f"by TPE without the known-good start {robust['tpe_without_known_good']} times, "
        f"by random search {robust['random_search']} times.",
    ]
    return "\n".join(lines) + "\n"


def plot_check(result: CheckResult, path: Path) -> None:
    """Every grid config's objective, sorted; the ones the tuner measured marked, the 95% line drawn."""
    from slipway.plots import pyplot, save_png

    plt = pyplot()

    ordered = sorted(result.grid, key=lambda m: m.objective, reverse=True)
    picked = {m.config.key for m in result.tuner}
    figure, axis = plt.subplots(figsize=(max(8, len(ordered) * 0.28), 5))
    colours = ["tab:orange" if m.config.key in picked else ("tab:blue" if m.feasible else "tab:gray") for m in ordered]
    axis.bar(range(len(ordered)), [m.objective for m in ordered], color=colours)
    axis.set_xticks(range(len(ordered)), [m.config.key for m in ordered], rotation=90, fontsize=6)
    if result.grid_best:
        axis.axhline(
            result.target * result.grid_best.objective,
            color="tab:red",
            linestyle="--",
            label=f"{result.target:.0%} of the grid's best",
        )
    axis.set_ylabel("req/s per server CPU core (0: infeasible)")
    axis.set_title(
        f"grid ({len(result.grid)} configs) vs tuner ({len(result.tuner)} measured, orange): {result.ratio:.1%} of the best"
    )
    axis.legend(fontsize=8)
    save_png(figure, path, dpi=110)
