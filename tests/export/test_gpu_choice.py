"""`--target gpu`: int8 as S8S8, and the variant to deploy on GPUs chosen by a GPU's timing, not the CPU's."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from export.selection import (
    Candidate,
    GpuFigure,
    NoGpuMeasurement,
    NoVariantWithinBudget,
    choose_for_gpu,
    gpu_figures,
)
from slipway.paths import PROJECT_ROOT
from slipway.precision import read_numerics
from tests.conftest import run_module
from tests.export.test_import_onnx import QUICK, conv_model, images, save

H200 = json.loads((PROJECT_ROOT / "reports" / "gpu.json").read_text())  # `make bench-gpu` on an H200, committed
no_gpu_build = pytest.mark.skipif(
    "CUDAExecutionProvider" in ort.get_available_providers(), reason="this onnxruntime times the variants on its GPU instead"
)


def row(provider, precision, batch, p50_ms, rows_per_s, status="measured", **extra):
    return {
        "provider": provider,
        "precision": precision,
        "batch": batch,
        "p50_ms": p50_ms,
        "rows_per_s": rows_per_s,
        "status": status,
        **extra,
    }


# CPU timing as export measures it here: int8 (U8S8 on a CPU) fastest, fp16 slowest.
CANDIDATES = [
    Candidate("fp32", True, 0.040, 40_000, "fp32"),
    Candidate("int8", True, 0.025, 90_000, "int8"),
    Candidate("fp16", True, 0.090, 20_000, "fp16"),
    Candidate("slim", True, 0.020, 80_000, "fp32"),
]


def test_the_h200_measurement_ranks_fp16_first_for_latency_and_throughput():
    latency = gpu_figures(H200, "latency")
    assert latency["fp16"] == GpuFigure(0.507, "CUDAExecutionProvider + CUDA graph", 1)
    assert latency["int8"].value == 3.147 and latency["fp32"].value == 0.517  # CPU rows and fallen-back TensorRT left out
    assert gpu_figures(H200, "throughput")["fp16"] == GpuFigure(8733.21, "CUDAExecutionProvider + CUDA graph", 32)
    name, reason = choose_for_gpu(CANDIDATES, latency, "latency", "NVIDIA H200, reports/gpu.json")
    assert name == "fp16"  # though the CPU timed it slowest
    assert reason.startswith(
        "fp16: fp16 has the lowest GPU p50 latency (0.507 ms at batch 1, CUDAExecutionProvider + "
        "CUDA graph, NVIDIA H200, reports/gpu.json) of the accepted precisions (fp16, fp32, int8)"
    )


def test_within_the_winning_precision_this_run_s_timing_picks_the_variant():
    without_fp16 = [c for c in CANDIDATES if c.name != "fp16"] + [Candidate("fp16", False, 0.09, 20_000, "fp16")]
    name, reason = choose_for_gpu(without_fp16, gpu_figures(H200, "latency"), "latency", "H200")
    assert name == "slim"  # fp32 wins on the GPU; slim is the fp32 variant with least work
    assert "fastest fp32 variant in this run's timing" in reason and "rejected: fp16" in reason


def test_the_measurement_decides_so_int8_wins_where_tensorrt_measured_it_fastest():
    tensorrt = {
        "gpu": "NVIDIA L4",
        "rows": [
            row("CPUExecutionProvider", "int8", 1, 0.1, 10_000),  # a CPU row never counts
            row("CUDAExecutionProvider", "fp32", 1, 1.0, 1000),
            row("CUDAExecutionProvider", "fp16", 1, 0.8, 1250),
            row("TensorrtExecutionProvider", "int8", 1, 0.3, 3300),
            row("TensorrtExecutionProvider", "fp16", 1, None, None, status="fell back: no TensorRT"),
        ],
    }
    name, reason = choose_for_gpu(CANDIDATES, gpu_figures(tensorrt, "latency"), "latency", "NVIDIA L4, l4.json")
    assert name == "int8" and "TensorrtExecutionProvider" in reason


def test_a_measurement_without_the_accepted_precisions_is_one_line_saying_what_to_measure():
    with pytest.raises(
        NoGpuMeasurement,
        match="measured fp16 on a GPU, none of the accepted variants' precisions "
        r"\(fp32, int8\): run `make bench-gpu`",
    ):
        choose_for_gpu(
            [c for c in CANDIDATES if c.precision != "fp16"],
            {"fp16": GpuFigure(0.5, "CUDAExecutionProvider", 1)},
            "latency",
            "x.json",
        )
    with pytest.raises(NoVariantWithinBudget):
        choose_for_gpu([Candidate("fp16", False, 1, 1, "fp16")], gpu_figures(H200, "latency"), "latency", "x.json")


@no_gpu_build
def test_import_for_gpu_makes_s8s8_and_chooses_by_the_gpu_report(tmp_path, reports_env):
    model = save(conv_model(), tmp_path / "tiny.onnx")
    np.savez(tmp_path / "cal.npz", image=images(64))
    report = tmp_path / "gpu.json"
    report.write_text(
        json.dumps(
            {
                "gpu": "NVIDIA L4",
                "rows": [
                    row("CUDAExecutionProvider", "fp32", 1, 1.0, 1000),
                    row("CUDAExecutionProvider", "fp16", 1, 0.7, 1400),
                    row("CUDAExecutionProvider", "int8", 1, 2.0, 500),
                ],
            }
        )
    )
    out = tmp_path / "out"
    run_module(
        "export",
        "import",
        str(model),
        "--name",
        "tiny",
        "--calibration",
        str(tmp_path / "cal.npz"),
        "--target",
        "gpu",
        "--gpu-report",
        str(report),
        "--accuracy-budget",
        "100",
        "--out",
        str(out),
        "--report",
        "export-gpu",
        *QUICK,
        env=reports_env,
    )
    written = json.loads((Path(reports_env["SLIPWAY_REPORTS_DIR"]) / "export-gpu.json").read_text())
    assert written["chosen"]["name"] == "fp16" and f"NVIDIA L4, {report})" in written["chosen"]["reason"]
    assert written["calibration"]["target"] == "gpu"
    int8 = read_numerics(out / "int8")
    assert (int8.precision, int8.int8_format, int8.source) == ("int8", "S8S8", "variant.json")
    assert read_numerics(out / "fp16").precision == "fp16"


@no_gpu_build
def test_import_for_gpu_without_a_gpu_or_its_measurement_stops_before_any_work(tmp_path, reports_env):
    model = save(conv_model(), tmp_path / "tiny.onnx")
    out = tmp_path / "out"
    result = run_module(
        "export",
        "import",
        str(model),
        "--name",
        "tiny",
        "--target",
        "gpu",
        "--variants",
        "fp32,fp16",
        "--gpu-report",
        str(tmp_path / "missing.json"),
        "--out",
        str(out),
        *QUICK,
        env=reports_env,
        check=False,
    )
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert result.returncode == 2 and len(errors) == 1, result.stderr
    assert "--target gpu chooses by a GPU's timing, and this machine has none" in errors[0]
    assert "make bench-gpu" in errors[0] and not out.exists()
