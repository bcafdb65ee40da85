"""`make bench-peers`: its rules (settings, answer checks, turn order, the process tree's CPU, the report), and one
tiny real run against raw ONNX Runtime, the plain runtime and Slipway's, with KServe and PyTriton skipped (CI never
installs them: minutes of downloads)."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import numpy as np
import pytest
from pydantic import ValidationError

from benchmarks.cli import main as benchmarks_main
from benchmarks.load import CHILD_PROCESSES, CpuSnapshot
from benchmarks.peers import envs
from benchmarks.peers.harness import (
    MEASURED,
    PEERS,
    PeersConfig,
    answers_match,
    bench_model,
    bench_payload,
    best_of_sweeps,
    cpu_bound,
    not_run,
    peer_pythons,
    round_order,
    wrong_answers,
)
from benchmarks.peers.report import markdown
from slipway.cli import run


@pytest.mark.parametrize(
    "settings, wrong",
    [
        ({"rounds": 1}, "rounds"),
        ({"seconds": 0}, "seconds"),
        ({"skip": ["triton"]}, "cannot skip ['triton']"),
        ({"protocols": ["grpc-shm"]}, "protocols ['grpc-shm']"),
        ({"concurrency": [0]}, "concurrency"),
        ({"threads": 4}, "threads"),
    ],
)
def test_settings_refuse_what_cannot_be_measured(settings, wrong):
    with pytest.raises(ValidationError, match=wrong.replace("[", r"\[").replace("]", r"\]")):
        PeersConfig(**settings)


def test_a_bad_option_is_one_line_and_measures_nothing(capsys):
    assert run(benchmarks_main, ["peers", "--rounds", "1", "--no-docs"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "rounds" in err and "greater than or equal to 2" in err


def test_answers_must_match_raw_onnx_runtime_s():
    want = {"probabilities": np.array([[0.1, 0.9]], dtype=np.float32)}
    assert answers_match(want, {"probabilities": want["probabilities"] + 1e-7}) is None
    assert "differs from raw ONNX Runtime's by up to 0.5" in answers_match(want, {"probabilities": np.array([[0.6, 0.4]])})
    assert "shape [2]" in answers_match(want, {"probabilities": np.array([0.1, 0.9])})
    assert "no output 'probabilities'" in answers_match(want, {"output_0": want["probabilities"]})


def test_the_raw_limit_keeps_each_setting_s_faster_sweep():
    before = [{"batch": 1, "rows_per_s": 70.0, "cpu_ms_per_row": 13.0}, {"batch": 8, "rows_per_s": 20.0, "cpu_ms_per_row": 9.0}]
    after = [{"batch": 1, "rows_per_s": 25.0, "cpu_ms_per_row": 30.0}, {"batch": 8, "rows_per_s": 60.0, "cpu_ms_per_row": 8.0}]
    assert best_of_sweeps(before, after) == [
        {"batch": 1, "rows_per_s": 70.0, "cpu_ms_per_row": 13.0, "rows_per_s_before_after": [70.0, 25.0]},
        {"batch": 8, "rows_per_s": 60.0, "cpu_ms_per_row": 8.0, "rows_per_s_before_after": [20.0, 60.0]},
    ]


def test_the_cpu_bound_is_the_cpus_over_what_a_row_costs_raw_gRPC_alone_and_the_client_in_each_round():
    transport = [
        {"rows_per_s": 900.0, "server_cpu_ms_per_request": 0.5, "client_cpu_ms_per_request": 0.5},
        {"rows_per_s": 1000.0, "server_cpu_ms_per_request": 1.0, "client_cpu_ms_per_request": 1.0},
    ]
    raw = [(200.0, 10.0), (100.0, 18.0)]  # each round's raw rows/s and CPU ms per row
    result = cpu_bound(raw, transport, cpus=2)
    assert result["rounds_rows_per_s"] == [181.82, 100.0]  # 2000 / (10 + 0.5 + 0.5), 2000 / (18 + 1 + 1)
    assert result["rows_per_s"] == pytest.approx(140.91)  # the median of two
    assert result["x_raw_same_round"] == pytest.approx((181.82 / 200 + 1.0) / 2, abs=1e-3)
    assert result["transport"] is transport[1]  # the transport's median round, with its CPU
    with pytest.raises(ValueError):  # a round without the transport's turn is a bug, not a smaller median
        cpu_bound(raw, transport[:1], cpus=2)


def test_each_round_starts_one_server_further_on():
    servers = ["plain", "slipway", "kserve", "pytriton"]
    orders = [round_order(servers, index) for index in range(4)]
    assert all(sorted(order) == sorted(servers) for order in orders)
    assert [order[0] for order in orders] == servers and round_order(servers, 4) == servers
    assert round_order([], 3) == []
    held = [round_order(servers, index, after_slipway="transport") for index in range(4)]  # held to Slipway's p50
    assert all(order[order.index("slipway") + 1] == "transport" and len(order) == 5 for order in held)


def test_a_server_s_cpu_counts_the_processes_under_it():
    """A parent that idles while its child burns CPU: the child's seconds are the tree's."""
    burn = "import time\nend = time.process_time() + 1.5\nwhile time.process_time() < end: pass\n"
    parent = subprocess.Popen([sys.executable, "-c", f"import subprocess, sys; subprocess.run([sys.executable, '-c', {burn!r}])"])
    try:
        time.sleep(0.3)  # the child is running, and will be for a second or more of CPU
        before = CpuSnapshot.take(parent.pid, process_tree=True)
        only_parent = CpuSnapshot.take(parent.pid)
        time.sleep(0.8)
        tree, _, _ = CpuSnapshot.take(parent.pid, process_tree=True).since(before)
        alone, _, _ = CpuSnapshot.take(parent.pid).since(only_parent)
    finally:
        parent.wait(timeout=30)
    assert tree[CHILD_PROCESSES] > 0.1 and CHILD_PROCESSES not in alone
    assert sum(tree.values()) > sum(alone.values()) + 0.1


def test_a_peer_env_is_reused_while_its_requirements_stay(tmp_path):
    python = envs.venv_python(envs.KSERVE, tmp_path)
    python.parent.mkdir(parents=True)
    python.write_text("")
    (python.parent.parent / envs.STAMP).write_text("\n".join(envs.requirements(envs.KSERVE)) + "\n")
    said: list[str] = []
    assert envs.ensure_env(envs.KSERVE, root=tmp_path, on_line=said.append) == python and said == []
    assert envs.requirements(envs.KSERVE)[0] == "kserve==0.21.0"
    assert envs.requirements(envs.PYTRITON)[0] == "nvidia-pytriton==0.7.0"


def _payload(statuses: dict[str, str]) -> dict:
    point = {
        "protocol": "grpc",
        "concurrency": 1,
        "requests_per_s": 500.0,
        "rows_per_s": 500.0,
        "x_raw_limit": 0.05,
        "x_raw_same_round": 0.045,
        "p50_ms": 1.9,
        "p99_ms": 4.2,
        "server_cpu_ms_per_request": 1.25,
        "rounds_rows_per_s": [480.0, 500.0],
    }
    bound = {
        "protocol": "grpc",
        "concurrency": 1,
        "rows_per_s": 1600.0,
        "x_raw_limit": 0.16,
        "x_raw_same_round": 0.15,
        "rounds_rows_per_s": [1500.0, 1700.0],
        "transport": {"server_cpu_ms_per_request": 0.7},
    }
    model = {
        "raw": [{"batch": 32, "rows_per_s": 10000.0, "cpu_ms_per_row": 0.03}],
        "raw_limit_rows_per_s": 10000.0,
        "servers": statuses,
        "points": [{**point, "runtime": name} for name, status in statuses.items() if status == MEASURED],
        "cpu_bounds": [bound],
    }
    return {
        "config": PeersConfig().model_dump(mode="json"),
        "versions": {"kserve": "0.21.0", "nvidia-pytriton": "0.7.0"},
        "peers": {peer: statuses[peer] for peer in PEERS},
        "load_average": {"before": [1.5]},
        "cpu_count": 2,
        "created_at": "today",
        "models": {"digits": model},
    }


def test_the_table_has_every_server_measured_or_not_run_with_its_reason():
    statuses = {
        "plain": MEASURED,
        "slipway": MEASURED,
        "kserve": not_run("could not start: exited | code 1"),
        "pytriton": not_run("wrong answer, not timed: grpc: output 'x' differs"),
    }
    payload = _payload(statuses)
    table = markdown(payload)
    assert "load average 1.5 at the start" in table.splitlines()[0]
    assert "| digits | Slipway's runtime | grpc | 1 | 500.0 | 500.0 | 0.050 | 0.045 | 1.90 | 4.20 | 1.25 | 480 / 500 |" in table
    assert "| digits | KServe 0.21.0 | not run: could not start: exited \\| code 1 |" in table
    assert "| digits | PyTriton 0.7.0 | not run: wrong answer" in table
    assert (
        "| digits | CPU bound: raw CPU per row + gRPC transport alone at Slipway's rate + client, per request | grpc | 1 | "
        "| 1600.0 | 0.160 | 0.150 | | | 0.7 (the transport alone) | 1500 / 1700 |"
    ) in table
    assert "Not run in this run: KServe 0.21.0: not run: could not start" in table
    assert wrong_answers(payload) == ["digits: pytriton: not run: wrong answer, not timed: grpc: output 'x' differs"]


@pytest.mark.slow
def test_a_tiny_run_measures_the_runtimes_and_reports_the_skipped_peers(digits_artifact, tmp_path):
    from benchmarks.models import BenchModel
    from benchmarks.report import plot
    from slipway.artifact import MODEL_FILE, load_input_example
    from slipway.reports import write_report

    row = load_input_example(digits_artifact)[0]["image"][:1]
    model = BenchModel("digits", digits_artifact / MODEL_FILE, "image", row, "test artifact")
    config = PeersConfig(models=("digits",), concurrency=(1,), seconds=1.0, rounds=2, warmup_s=0.2, raw_seconds=0.1, skip=PEERS)
    pythons = peer_pythons(config, on_line=lambda line: pytest.fail(f"nothing may be installed: {line}"))
    result = bench_model(model, config, pythons, work_dir=tmp_path / "servers")
    payload = bench_payload(
        config, {"digits": result}, {peer: not_run(str(pythons[peer])) for peer in PEERS}, time.time(), (0.5,), None
    )
    path = write_report("bench-peers", payload, reports_dir=tmp_path)
    written = json.loads(path.read_text())
    statuses = written["models"]["digits"]["servers"]
    assert statuses == {
        "plain": MEASURED,
        "slipway": MEASURED,
        "kserve": "not run: skipped (--skip kserve)",
        "pytriton": "not run: skipped (--skip pytriton)",
    }
    assert written["peers"] == {peer: f"not run: skipped (--skip {peer})" for peer in PEERS}
    points = written["models"]["digits"]["points"]
    assert {(p["runtime"], p["protocol"]) for p in points} == {(r, p) for r in ("plain", "slipway") for p in ("grpc", "rest")}
    limit = written["models"]["digits"]["raw_limit_rows_per_s"]
    for point in points:
        assert point["requests"] > 0 and point["errors"] == 0 and len(point["rounds_rows_per_s"]) == 2
        assert point["x_raw_limit"] == pytest.approx(point["rows_per_s"] / limit, abs=1e-3)
        same_round = point["raw_rounds_rows_per_s"]  # raw's own turn in each of the point's rounds
        assert len(same_round) == 2 and min(same_round) > 0
        ratios = sorted(rows / raw for rows, raw in zip(point["rounds_rows_per_s"], same_round, strict=True))
        assert point["x_raw_same_round"] == pytest.approx(sum(ratios) / 2, abs=1e-3)  # the median of two
        split = point["server_cpu_ms_per_request_by_thread"]  # the process tree's: MLServer starts no children here
        assert CHILD_PROCESSES in split and point["server_cpu_ms_per_request"] > 0
        assert len(point["rounds_machine_steal_pct"]) == 2 and min(point["rounds_machine_steal_pct"]) >= 0
    (bound,) = written["models"]["digits"]["cpu_bounds"]  # the one gRPC point's
    assert (bound["protocol"], bound["concurrency"], len(bound["rounds_rows_per_s"])) == ("grpc", 1, 2)
    transport = bound["transport"]
    assert transport["requests"] > 0 and transport["errors"] == 0 and transport["hold_ms"] >= 0
    assert transport["server_cpu_ms_per_request"] > 0 and transport["client_cpu_ms_per_request"] > 0
    for point in points:
        if point["protocol"] == "grpc":  # at concurrency 1 latency bounds the servers, far under the CPU bound
            assert point["rows_per_s"] < bound["rows_per_s"]
    judged = {(goal["protocol"], goal["goal"].split(",")[0]): goal for goal in written["goals"]}  # against plain only
    assert set(judged) == {(p, g) for p in ("grpc", "rest") for g in ("p50 latency", "server CPU per request")}
    assert all(goal["against"] == "plain" and len(goal["rounds"]) == 2 for goal in judged.values())
    table = markdown({**written, "created_at": "today"})
    assert "Issue 31's goals for Slipway's defaults in this run" in table
    assert "| digits | CPU bound: raw CPU per row" in table
    assert "| digits | KServe 0.21.0 | not run: skipped (--skip kserve) |" in table
    assert "| digits | PyTriton 0.7.0 | not run: skipped (--skip pytriton) |" in table
    assert "| digits | Slipway's runtime (MLServer" in table and wrong_answers(written) == []
    plot(written, tmp_path / "bench-peers.png")
    assert (tmp_path / "bench-peers.png").read_bytes()[:4] == b"\x89PNG"
