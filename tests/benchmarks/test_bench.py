"""The benchmarks' own machinery, run for real at a tiny scale: servers, load, reports; the GPU script's CPU path."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
from tritonclient.grpc import service_pb2

from benchmarks.gpu_served import POINTS, measure_served, served_configs
from benchmarks.load import grpc_answer, grpc_request
from benchmarks.models import BenchModel, server_folder
from benchmarks.report import markdown, plot
from benchmarks.run import IMPLEMENTATIONS, PLAIN, SLIPWAY_LATENCY, TRANSPORT, BenchConfig, _steps, bench_model, figures
from slipway.artifact import MODEL_FILE, load_input_example
from slipway.local_server import LocalServer
from tests.conftest import run_module

pytestmark = pytest.mark.slow


def test_a_tiny_bench_measures_both_runtimes_and_reports_them(digits_artifact, tmp_path):
    row = load_input_example(digits_artifact)[0]["image"][:1]
    model = BenchModel("digits", digits_artifact / MODEL_FILE, "image", row, "test artifact")
    config = BenchConfig(
        models=["digits"],
        protocols=["grpc", "rest", "grpc-shm", "rest-binary"],
        concurrency=[2],
        seconds=0.4,
        rounds=1,
        warmup_s=0.2,
        raw_seconds=0.1,
    )
    steps, shared_before = [], set(Path("/dev/shm").glob("psm_*"))
    result = bench_model(model, config, lambda: steps.append(1), work_dir=tmp_path / "servers")
    # raw sweeps before and after, side by side, servers started, then the loads: gRPC 4 (digits also with its
    # latency settings, and the bare transport), REST 3, shared memory 1, binary REST 1
    assert len(steps) == 2 * 3 * 3 + 1 + 1 + 4 + 3 + 1 + 1  # sweeps: 3 ways to spin x 3 batch sizes
    assert result["raw_two_single_threaded_callers_rows_per_s"] > 0
    for raw in result["raw"]:  # the limit is each setting's mean of the sweeps before and after the loads
        assert raw["rows_per_s"] == pytest.approx(sum(raw["rows_per_s_before_after"]) / 2, abs=0.01)
    runtimes = ("plain", "slipway", SLIPWAY_LATENCY)
    assert {(p["runtime"], p["protocol"]) for p in result["points"]} == {
        (runtime, protocol) for runtime in runtimes for protocol in ("grpc", "rest")
    } | {("slipway", "grpc-shm"), ("slipway", "rest-binary"), (TRANSPORT, "grpc")}
    (transport,) = [point for point in result["points"] if point["runtime"] == TRANSPORT]
    assert "x_raw_limit" not in transport and transport["hold_ms"] >= 0  # it serves nothing, held to the served rate
    for point in result["points"]:
        assert point["requests"] > 0 and point["errors"] == 0 and point["server_cpu_ms_per_request"] > 0
        split = point["server_cpu_ms_per_request_by_thread"]  # where the server's CPU went, by thread
        assert set(split) == {"event_loop", "inference", "other"} and split["event_loop"] > 0
        assert sum(split.values()) == pytest.approx(point["server_cpu_ms_per_request"], abs=0.01)
        assert point["client_cpu_ms_per_request"] > 0 and 0 <= point["machine_idle_pct"] <= 100
        assert 0 <= point["machine_steal_pct"] <= 100 - point["machine_idle_pct"]  # stolen time is busy time
        if point is not transport:
            assert point["x_raw_limit"] == pytest.approx(point["rows_per_s"] / result["raw_limit_rows_per_s"], abs=1e-3)
    payload = {
        "models": {"digits": result},
        "cpu_count": 2,
        "load_average": {"before": [1.0]},
        "created_at": "today",
        "wakeup_round_trip_us": {"before": {"same_cpu": 3.8, "across_cpus": 64.5}},
    }
    payload["figures"] = figures(payload["models"])
    assert payload["figures"] == []  # the figures compare concurrency 1 and 8, not measured here
    table = markdown(payload, "Serving throughput")
    assert "a thread woken across CPUs and back in 64.5 µs, 3.8 µs on one CPU" in table.splitlines()[0]
    assert "| digits | slipway | grpc | 2 |" in table and "| digits | slipway | grpc-shm | 2 |" in table
    assert "raw `session.run`" in table and f"| digits | {TRANSPORT} | grpc | 2 |" in table
    assert set(Path("/dev/shm").glob("psm_*")) <= shared_before, "the load left shared-memory objects behind"
    plot(payload, tmp_path / "bench.png")
    assert (tmp_path / "bench.png").read_bytes()[:4] == b"\x89PNG"


def test_the_baseline_is_plain_mlserver_start_serving_what_onnx_runtime_answers(digits_artifact, tmp_path):
    """The plain runtime runs under `mlserver start`, as MLServer's own users run it: the launcher's changes
    must not count on both sides of a ratio."""
    row = load_input_example(digits_artifact)[0]["image"][:2]
    model = BenchModel("digits", digits_artifact / MODEL_FILE, "image", row, "test artifact")
    folder = server_folder(tmp_path, model, PLAIN, IMPLEMENTATIONS[PLAIN], None)
    with LocalServer(folder, launcher=False) as server:
        command = Path(f"/proc/{server.pid}/cmdline").read_bytes().split(b"\0")
        answer = grpc_answer(server.grpc_target, grpc_request("digits", {"image": row}))
    assert command[1:4] == [b"-m", b"mlserver.cli.main", b"start"], command
    response = service_pb2.ModelInferResponse.FromString(answer)
    expected = ort.InferenceSession(str(model.onnx_path)).run(None, {"image": row})[0]
    np.testing.assert_allclose(np.frombuffer(response.raw_output_contents[0], np.float32).reshape(2, 10), expected, atol=1e-6)


def test_figures_compare_against_the_raw_limit_and_the_plain_runtime_round_by_round():
    def point(runtime, protocol, concurrency, rps, p50, x, rounds_rps, rounds_p50):
        return {
            "runtime": runtime,
            "protocol": protocol,
            "concurrency": concurrency,
            "requests_per_s": rps,
            "p50_ms": p50,
            "x_raw_limit": x,
            "rounds_rows_per_s": rounds_rps,
            "rounds_p50_ms": rounds_p50,
            "rounds_x_raw_limit": [round(r / 100, 3) for r in rounds_rps],
        }

    models = {
        "mobilenetv2": {
            "points": [
                point("slipway", "grpc", 8, 92, 80, 0.92, [88, 92, 95], [80] * 3),
                point("slipway", "rest", 8, 25, 300, 0.25, [25] * 3, [300] * 3),
            ]
        },
        "digits": {
            "points": [
                point("plain", "grpc", 8, 1000, 5, 0, [1000, 900, 1100], [5] * 3),
                point("slipway", "grpc", 8, 1400, 4, 0, [1400, 1350, 1320], [4] * 3),
                point("plain", "grpc", 1, 500, 1.0, 0, [500] * 3, [1.0, 0.8, 1.2]),
                point("slipway", "grpc", 1, 600, 1.1, 0, [600] * 3, [1.1, 1.0, 1.2]),
                point(SLIPWAY_LATENCY, "grpc", 1, 700, 0.9, 0, [700] * 3, [0.9, 0.8, 1.0]),
                point(SLIPWAY_LATENCY, "grpc", 8, 1200, 4, 0, [1200, 1350, 1100], [4] * 3),
            ]
        },
    }
    got = {f["figure"]: (f["value"], f["met"], f["rounds"]) for f in figures(models)}
    assert got == {
        "mobilenetv2 grpc c8: served images/s / raw limit": (0.92, True, [0.88, 0.92, 0.95]),
        "mobilenetv2 rest c8: served images/s / raw limit": (0.25, False, [0.25] * 3),
        # paired round by round: the runtimes' loads alternate, so round i of each met the same machine
        "digits grpc c8: requests/s / plain runtime's": (1.4, True, [1.4, 1.5, 1.2]),
        "digits grpc c1: p50 latency / plain runtime's": (1.1, False, [1.1, 1.25, 1.0]),
        "digits grpc c1: p50 latency / plain runtime's (latency settings)": (0.9, True, [0.9, 1.0, 0.833]),
        # the latency settings must meet the throughput figure too, not only the latency one
        "digits grpc c8: requests/s / plain runtime's (latency settings)": (1.2, False, [1.2, 1.5, 1.0]),
    }
    table = markdown({"cpu_count": 2, "load_average": {"before": [0.1]}, "models": {}, "figures": figures(models)}, "t")
    assert "| digits grpc c8: requests/s / plain runtime's | 1.40 | 1.40 / 1.50 / 1.20 | >= 1.3 | yes |" in table
    # each figure's own direction, whatever its name says: a throughput figure of the latency settings is ">="
    assert (
        "| digits grpc c8: requests/s / plain runtime's (latency settings) | 1.20 | 1.20 / 1.50 / 1.00 | >= 1.3 | **no** |"
    ) in table
    assert "| digits grpc c1: p50 latency / plain runtime's | 1.10 | 1.10 / 1.25 / 1.00 | <= 1.0 | **no** |" in table


def test_the_progress_bar_counts_every_load_of_every_runtime():
    config = BenchConfig(protocols=["grpc", "grpc-shm"], concurrency=[1, 8], rounds=3)
    raw_steps = 2 * 3 * 3 + 1 + 1  # raw sweeps before and after (3 ways to spin x 3 batch sizes), side by side, servers started
    shared_memory = 6  # the wrappers runtime alone
    # over gRPC: both runtimes, the bare transport, and digits with its latency settings
    assert _steps(config) == (raw_steps + 4 * 6 + shared_memory) + (raw_steps + 3 * 6 + shared_memory)


def test_the_gpu_bench_runs_its_cpu_rows_and_says_why_the_others_are_missing(digits_artifact, reports_env, tmp_path):
    env = {**reports_env, "SLIPWAY_REPORTS_DIR": str(tmp_path / "reports"), "SLIPWAY_BUILD_DIR": str(tmp_path / "build")}
    run_module(
        "benchmarks",
        "gpu",
        "--model",
        str(digits_artifact / MODEL_FILE),
        "--seconds",
        "0.1",
        "--batch-sizes",
        "1",
        "2",
        "--no-docs",
        "--allow-no-gpu",
        env=env,
    )
    name = "gpu" if shutil.which("nvidia-smi") else "gpu-cpu-only"  # a GPU machine's record is not overwritten here
    report = json.loads((tmp_path / "reports" / f"{name}.json").read_text())
    rows = {(r["provider"], r["precision"], r.get("io_binding"), r.get("batch")): r for r in report["rows"]}
    for io_binding in ("off", "on"):
        for batch in (1, 2):
            for precision in ("fp32", "int8"):
                row = rows[("CPUExecutionProvider", precision, io_binding, batch)]
                assert row["status"] == "measured" and row["rows_per_s"] > 0, row
                assert 0 <= row["top1_agreement"] <= 1 and np.isfinite(row["max_abs_diff"]), row
            fp32 = rows[("CPUExecutionProvider", "fp32", io_binding, batch)]
            assert fp32["max_abs_diff"] < 1e-4 and fp32["top1_agreement"] == 1.0, fp32  # the reference itself
    fp16 = [r for r in report["rows"] if r["provider"] == "CPUExecutionProvider" and r["precision"] == "fp16"]
    assert all(r["status"] == "measured" for r in fp16) or fp16[0]["reason"].startswith("onnxconverter_common")
    if "CUDAExecutionProvider" not in ort.get_available_providers():
        gpu_rows = [r for r in report["rows"] if r["provider"] != "CPUExecutionProvider"]
        assert len(gpu_rows) == 8 and all(r["status"] == "unavailable" and "GPU=1" in r["reason"] for r in gpu_rows)
    assert (tmp_path / "reports" / f"{name}.png").is_file() and (tmp_path / "reports" / f"{name}.md").is_file()
    int8 = next((tmp_path / "build" / "bench" / "gpu").glob("*/model.int8.onnx"))
    assert np.isfinite(ort.InferenceSession(str(int8)).run(None, {"image": np.zeros((1, 8, 8, 1), np.float32)})[0]).all()


def test_the_served_measurements_check_the_answer_and_load_every_point(digits_artifact, tmp_path):
    """What `make bench-gpu` serves on CUDA, served here on the CPU provider (the graph setting then only pads)."""
    row = load_input_example(digits_artifact)[0]["image"][:1].astype(np.float32)
    model = BenchModel("digits", digits_artifact / MODEL_FILE, "image", row, "test artifact")
    expected = ort.InferenceSession(str(model.onnx_path), providers=["CPUExecutionProvider"]).run(None, {"image": row})[0]
    for name, settings in served_configs("CPUExecutionProvider").items():
        steps = []
        served = measure_served(model, name, settings, expected, seconds=0.3, work_dir=tmp_path, on_step=steps.append)
        assert served["providers_used"] == "['CPUExecutionProvider']" and served["settings"] == settings
        assert served["max_abs_diff"] < 1e-5
        slots = {entry["thread"] for entry in served["warm_up_first_run_ms"]}  # every run slot warmed up itself
        assert slots >= {f"ort-digits_{index}" for index in range(settings.get("inference_threads", 1))}, served
        assert [(point["concurrency"], point["rows_per_request"]) for point in served["points"]] == list(POINTS)
        assert all(point["requests"] > 0 and point["errors"] == 0 for point in served["points"]) and len(steps) == len(POINTS)
