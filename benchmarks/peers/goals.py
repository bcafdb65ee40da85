"""Issue 31's goals, judged on one `bench-peers` run: Slipway's defaults against the best other server at each point.

Each goal compares Slipway with the best of the other servers measured at the same point (the plain MLServer
runtime, KServe, PyTriton): the median rounds' figures, and the same ratio paired round by round (the servers take
turns within a round, so a paired ratio cancels the host's drift between rounds). A goal is met where the paired
median meets it: on a host whose speed moves by a third within minutes, the ratio of two medians taken minutes
apart measures the host as much as the servers. The MobileNetV2 goal is judged against raw `session.run`'s turn in
the same round, for the same reason; its ratio to the run's fastest raw sweep is shown beside it, and so is the
point's CPU bound (`benchmarks.peers.harness.cpu_bound`): where the bound itself is under the target, only a server
that runs ONNX Runtime on less CPU per row than raw's fastest setting could meet it in that run.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass

from benchmarks.load import GRPC
from benchmarks.run import SLIPWAY

THROUGHPUT_AT, LATENCY_AT = 8, 1
LATENCY_SLACK = 1.10  # p50 within 10% of the best other server's
RAW_SHARE = 0.85  # MobileNetV2 over gRPC at concurrency 8, of raw ONNX Runtime's best batch
RAW_MODEL = "mobilenetv2"


@dataclass(frozen=True)
class Goal:
    """One goal at one point: Slipway's figure, the best other server's, their ratio by median rounds and paired."""

    goal: str
    model: str
    protocol: str
    concurrency: int
    ours: float
    theirs: float
    against: str  # the server compared with ("raw" for the raw ONNX Runtime goal)
    ratio: float  # ours / theirs, of the median rounds
    paired: float  # the median of the per-round ratios: what `met` is judged on
    rounds: list[float]
    comparison: str  # ">=" or "<="
    target: float
    met: bool


def goals(models: dict) -> list[dict]:
    """Every goal at every point Slipway and at least one other server were measured at."""
    found: list[Goal] = []
    for model, result in models.items():
        points = {(p["runtime"], p["protocol"], p["concurrency"]): p for p in result["points"]}
        for (runtime, protocol, concurrency), ours in sorted(points.items()):
            if runtime != SLIPWAY:
                continue
            others = {
                name: point
                for (name, proto, conc), point in points.items()
                if name != SLIPWAY and (proto, conc) == (protocol, concurrency)
            }
            if not others:
                continue
            where = (model, protocol, concurrency)
            if concurrency == THROUGHPUT_AT:
                found.append(
                    _against_best(where, "rows/s, at least the best other server's", ours, others, "rows_per_s", ">=", 1.0)
                )
            if concurrency == LATENCY_AT:
                found.append(
                    _against_best(
                        where, "p50 latency, within 10% of the best other server's", ours, others, "p50_ms", "<=", LATENCY_SLACK
                    )
                )
            found.append(
                _against_best(
                    where,
                    "server CPU per request, at most the best other server's",
                    ours,
                    others,
                    "server_cpu_ms_per_request",
                    "<=",
                    1.0,
                )
            )
            if (model, protocol, concurrency) == (RAW_MODEL, GRPC, THROUGHPUT_AT) and "raw_rounds_rows_per_s" in ours:
                bound = next((b for b in result.get("cpu_bounds", []) if (b["protocol"], b["concurrency"]) == where[1:]), None)
                found.append(_against_raw(where, ours, result["raw_limit_rows_per_s"], bound))
    return [asdict(goal) for goal in found]


def _against_best(
    where: tuple[str, str, int], goal: str, ours: dict, others: dict[str, dict], key: str, comparison: str, target: float
) -> Goal:
    higher_is_better = comparison == ">="
    pick = max if higher_is_better else min
    best_name = pick(others, key=lambda name: others[name][key])
    best = others[best_name]
    rounds_key = f"rounds_{key}"
    paired = [mine / theirs for mine, theirs in zip(ours[rounds_key], best[rounds_key], strict=True)]
    value = statistics.median(paired)
    return Goal(
        goal,
        *where,
        ours=ours[key],
        theirs=best[key],
        against=best_name,
        ratio=round(ours[key] / best[key], 3),
        paired=round(value, 3),
        rounds=[round(r, 3) for r in paired],
        comparison=comparison,
        target=target,
        met=value >= target if higher_is_better else value <= target,
    )


def _against_raw(where: tuple[str, str, int], ours: dict, limit: float, bound: dict | None) -> Goal:
    paired = [mine / raw for mine, raw in zip(ours["rounds_rows_per_s"], ours["raw_rounds_rows_per_s"], strict=True)]
    value = statistics.median(paired)
    beside = f"the run's fastest raw sweep: {ours['rows_per_s'] / limit:.2f}x"
    if bound:
        of_bound = statistics.median(
            mine / most for mine, most in zip(ours["rounds_rows_per_s"], bound["rounds_rows_per_s"], strict=True)
        )
        beside += f"; the point's CPU bound: {bound['x_raw_same_round']:.2f}x raw, Slipway at {of_bound:.2f} of it"
    return Goal(
        f"rows/s, at least {RAW_SHARE:g}x raw ONNX Runtime's best batch (in the same round; {beside})",
        *where,
        ours=ours["rows_per_s"],
        theirs=limit,
        against="raw",
        ratio=round(ours["rows_per_s"] / limit, 3),
        paired=round(value, 3),
        rounds=[round(r, 3) for r in paired],
        comparison=">=",
        target=RAW_SHARE,
        met=value >= RAW_SHARE,
    )
