"""Issue 31's goals as `bench-peers` judges them: against the best other server at each point, on per-round ratios."""

from __future__ import annotations

import pytest

from benchmarks.peers.goals import goals
from benchmarks.peers.report import markdown
from tests.benchmarks.test_peers import _payload


def _point(runtime: str, concurrency: int, rows: list[float], p50: list[float], cpu: list[float], **extra) -> dict:
    middle = sorted(range(len(rows)), key=lambda index: rows[index])[len(rows) // 2]  # the median round, as the harness
    return {
        "runtime": runtime,
        "protocol": "grpc",
        "concurrency": concurrency,
        "rows_per_s": rows[middle],
        "p50_ms": p50[middle],
        "server_cpu_ms_per_request": cpu[middle],
        "rounds_rows_per_s": rows,
        "rounds_p50_ms": p50,
        "rounds_server_cpu_ms_per_request": cpu,
        **extra,
    }


def _by_goal(found: list[dict]) -> dict[tuple[str, int, str], dict]:
    return {(goal["model"], goal["concurrency"], goal["goal"].split(",")[0]): goal for goal in found}


def test_each_goal_is_judged_against_the_best_other_server_paired_round_by_round():
    points = [
        _point("slipway", 8, [100, 120, 90], [80, 70, 90], [10, 10, 11]),
        _point("kserve", 8, [95, 130, 80], [85, 62, 100], [12, 11, 13]),  # the best other by its median round: 95
        _point("plain", 8, [50, 60, 40], [160, 140, 200], [40, 40, 40]),
        _point("slipway", 1, [100, 100, 100], [9.0, 9.5, 10.0], [14, 15, 14]),
        _point("kserve", 1, [120, 120, 120], [8.0, 8.5, 9.5], [15, 15, 15]),
    ]
    found = _by_goal(goals({"m": {"points": points, "raw_limit_rows_per_s": 200.0}}))
    throughput = found[("m", 8, "rows/s")]
    assert (throughput["against"], throughput["ours"], throughput["theirs"]) == ("kserve", 100, 95)
    assert throughput["rounds"] == pytest.approx([100 / 95, 120 / 130, 90 / 80], abs=1e-3)
    assert throughput["paired"] == pytest.approx(100 / 95, abs=1e-3) and throughput["met"]
    latency = found[("m", 1, "p50 latency")]  # 9.0/8.0, 9.5/8.5, 10/9.5: median 1.118 > 1.10
    assert latency["against"] == "kserve" and latency["paired"] == pytest.approx(1.118, abs=1e-3)
    assert not latency["met"] and latency["comparison"] == "<=" and latency["target"] == 1.1
    cpu = found[("m", 1, "server CPU per request")]
    assert cpu["paired"] == pytest.approx(14 / 15, abs=1e-3) and cpu["met"]
    assert ("m", 8, "p50 latency") not in found and ("m", 1, "rows/s") not in found  # each goal at its own point


def test_the_raw_goal_is_mobilenet_over_grpc_at_8_against_raw_s_turn_in_the_same_round():
    ours = _point("slipway", 8, [140, 130, 150], [50, 50, 50], [12, 12, 12], raw_rounds_rows_per_s=[150, 160, 160])
    found = goals(
        {"mobilenetv2": {"points": [ours, _point("kserve", 8, [100] * 3, [60] * 3, [15] * 3)], "raw_limit_rows_per_s": 200.0}}
    )
    (raw,) = [goal for goal in found if goal["against"] == "raw"]
    assert raw["rounds"] == pytest.approx([140 / 150, 130 / 160, 150 / 160], abs=1e-3)
    assert raw["paired"] == pytest.approx(140 / 150, abs=1e-3) and raw["met"]  # 0.93 >= 0.85 in the same rounds
    assert raw["ratio"] == 0.7 and "fastest raw sweep: 0.70x" in raw["goal"]  # the run's fastest sweep, shown beside
    assert not any(goal["against"] == "raw" for goal in goals({"digits": {"points": [ours], "raw_limit_rows_per_s": 1.0}}))


def test_the_raw_goal_shows_the_point_s_cpu_bound_and_slipway_s_share_of_it_paired_by_round():
    ours = _point("slipway", 8, [140, 130, 150], [50] * 3, [12] * 3, raw_rounds_rows_per_s=[180, 170, 190])
    bound = {"protocol": "grpc", "concurrency": 8, "x_raw_same_round": 0.81, "rounds_rows_per_s": [150, 140, 150]}
    other_bound = {**bound, "concurrency": 1, "x_raw_same_round": 0.5}
    (raw,) = [
        goal
        for goal in goals(
            {
                "mobilenetv2": {
                    "points": [ours, _point("kserve", 8, [100] * 3, [60] * 3, [15] * 3)],
                    "raw_limit_rows_per_s": 200.0,
                    "cpu_bounds": [other_bound, bound],
                }
            }
        )
        if goal["against"] == "raw"
    ]
    assert not raw["met"] and raw["paired"] == pytest.approx(140 / 180, abs=1e-3)  # under 0.85: not met
    # the bound is under the target too; Slipway's share of it: 140/150, 130/140, 150/150 -> median 0.933
    assert "the point's CPU bound: 0.81x raw, Slipway at 0.93 of it" in raw["goal"]


def test_a_point_with_no_other_server_has_no_goal_and_the_table_lists_every_goal():
    assert goals({"m": {"points": [_point("slipway", 1, [1, 2], [1, 2], [1, 2])], "raw_limit_rows_per_s": 9.0}}) == []
    payload = _payload({"plain": "measured", "slipway": "measured", "kserve": "measured", "pytriton": "measured"})
    model = payload["models"]["digits"]
    shown = {"requests_per_s": 500.0, "x_raw_limit": 0.05, "p99_ms": 4.0}
    model["points"] = [
        _point(name, 1, [500, 480], [p50, p50], [1.25, 1.25], **shown)
        for name, p50 in (("plain", 2.0), ("slipway", 1.9), ("kserve", 1.5), ("pytriton", 4.0))
    ]
    payload["goals"] = goals(payload["models"])
    table = markdown(payload)
    assert "Issue 31's goals for Slipway's defaults in this run: 1 of 2 met" in table
    assert (
        "| digits | grpc | 1 | p50 latency, within 10% of the best other server's | 1.9 | KServe 0.21.0: 1.5 | 1.27 "
        "| 1.27 (1.27 / 1.27) | <= 1.1 | **no** |"
    ) in table
