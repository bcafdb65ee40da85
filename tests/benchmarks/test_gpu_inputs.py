"""`make bench-gpu`'s input comparison, on what runs without a GPU: the plan, the two models of the same images,
the ratios and table of the report, the refusal without a CUDA GPU, and one real served pass on the CPU provider."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from benchmarks.__main__ import main as benchmarks_main
from benchmarks.gpu import markdown, require_gpu, with_cuda_ratios
from benchmarks.gpu_served import (
    FRONTENDS_CONFIG,
    INPUT_CONFIG,
    frontends_plan,
    input_models,
    input_plan,
    measure_inputs,
    served_configs,
)
from benchmarks.models import BenchModel
from slipway.cli import UserError
from tests.graphs import onnx_model


@pytest.fixture(scope="module")
def image_model(tmp_path_factory) -> BenchModel:
    """scores = Flatten(image) @ W over a 6x5x3 NHWC image, with one row in the bench's -1..1 range."""
    weight = np.random.default_rng(0).normal(size=(90, 4)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Flatten", ["image"], ["flat"]), helper.make_node("MatMul", ["flat", "W"], ["scores"])], "image",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["N", 6, 5, 3])],
        [helper.make_tensor_value_info("scores", TensorProto.FLOAT, ["N", 4])], [numpy_helper.from_array(weight, "W")])
    path = tmp_path_factory.mktemp("bench-model") / "image.onnx"
    onnx.save(onnx_model(graph), path)
    row = np.random.default_rng(1).uniform(-1, 1, (1, 6, 5, 3)).astype(np.float32)
    return BenchModel("image", path, "image", row, "test graph")


def test_the_input_comparison_is_fp32_then_uint8_at_concurrency_32_with_single_rows():
    assert input_plan() == [("fp32", 32, 1), ("uint8", 32, 1)]
    assert INPUT_CONFIG in served_configs("CUDAExecutionProvider")


def test_both_inputs_carry_the_same_image_and_uint8_a_quarter_of_the_bytes(image_model, tmp_path):
    models = input_models(image_model, tmp_path)
    floats, pixels = models["fp32"].row, models["uint8"].row
    assert pixels.dtype == np.uint8 and floats.dtype == np.float32 and 4 * pixels.nbytes == floats.nbytes
    np.testing.assert_allclose(floats, image_model.row, atol=1 / 255 + 1e-6)  # the bench row, rounded to a pixel
    run = {kind: ort.InferenceSession(str(m.onnx_path), providers=["CPUExecutionProvider"]).run(None, {"image": m.row})[0]
           for kind, m in models.items()}
    np.testing.assert_allclose(run["uint8"], run["fp32"], rtol=1e-5, atol=1e-5)


def _point(rows_per_s: float, **more) -> dict:
    return {"concurrency": 32, "rows_per_request": 1, "rows_per_s": rows_per_s, "p50_ms": 30.0, "p99_ms": 90.5,
            "server_cpu_ms_per_request": 1.7, "errors": 0, **more}


def test_the_report_gives_each_input_its_share_of_the_cuda_limit_with_p99_beside_it():
    served = with_cuda_ratios({
        "status": "measured", "cuda_limit_rows_per_s": 8000.0,
        "configs": [{"name": "cuda-graph", "settings": {}, "providers_used": "[]", "max_abs_diff": 0.0,
                     "points": [_point(900.0)]}],
        "inputs": {"status": "measured", "config": "cuda-graph", "settings": {},
                   "points": [_point(900.0, input="fp32", bytes_per_row=602112, max_abs_diff=2e-5),
                              _point(2000.0, input="uint8", bytes_per_row=150528, max_abs_diff=3e-5)]},
    })
    assert [p["x_cuda_limit"] for p in served["inputs"]["points"]] == [0.113, 0.25]
    table = markdown({"gpu": "test GPU", "onnxruntime": "1.31", "rows": [], "served": served})
    assert "| uint8 | 150,528 | 2000 | 0.25 | 30.00 | 90.50 | 1.7 | 3.0e-05 | 0 |" in table
    assert "gRPC concurrency 32, 1 row per request" in table
    skipped = markdown({"gpu": "test GPU", "onnxruntime": "1.31", "rows": [],
                        "served": {**served, "inputs": {"status": "skipped", "reason": "no uint8 input for this graph"}}})
    assert "Inputs, fp32 vs uint8: no uint8 input for this graph." in skipped


def test_front_ends_are_compared_one_vs_n_in_turns_at_concurrency_32_with_single_rows():
    assert frontends_plan(4) == [(1, 32, 1), (4, 32, 1)] * 2
    assert FRONTENDS_CONFIG in served_configs("CUDAExecutionProvider")


def test_the_report_gives_one_front_end_and_n_their_share_of_the_cuda_limit_with_p99_beside_it():
    served = with_cuda_ratios({
        "status": "measured", "cuda_limit_rows_per_s": 8000.0, "configs": [],
        "frontends": {"status": "measured", "config": "merging", "settings": {}, "frontends": 4, "ratio_median": 4.4,
                      "ratio_rounds": [4.3, 4.5], "points": [_point(900.0, frontends=1), _point(4000.0, frontends=4)]},
    })
    assert [p["x_cuda_limit"] for p in served["frontends"]["points"]] == [0.113, 0.5]
    table = markdown({"gpu": "test GPU", "onnxruntime": "1.31", "rows": [], "served": served})
    assert "| 4 | 4000 | 0.50 | 30.00 | 90.50 | 1.7 | 0 |" in table
    assert "4 / 1 = 4.4 (rounds [4.3, 4.5])" in table
    failed = markdown({"gpu": "test GPU", "onnxruntime": "1.31", "rows": [],
                       "served": {**served, "frontends": {"status": "failed", "reason": "the session host exited"}}})
    assert "Front ends, 1 vs N: the session host exited." in failed


@pytest.mark.parametrize("argv, message", [
    (["gpu", "--frontends", "1"], r"^--frontends 1: give 2 to 64 front ends to compare with one$"),
    (["frontends", "--frontends", "1"], r"^use --models of .*--frontends of 2 or more"),
])
def test_a_front_end_count_with_nothing_to_compare_is_refused_in_one_line(argv, message):
    with pytest.raises(UserError, match=message):
        benchmarks_main(argv)


@pytest.mark.skipif(require_gpu() is None, reason="checks the refusal on a machine without a CUDA GPU")
def test_bench_gpu_without_a_cuda_gpu_is_refused_in_one_line():
    with pytest.raises(UserError, match=r"^bench-gpu needs a CUDA GPU, and this machine lacks .*--allow-no-gpu") as caught:
        benchmarks_main(["gpu", "--no-docs"])
    assert "\n" not in str(caught.value)


@pytest.mark.slow  # starts two servers
def test_the_input_comparison_serves_both_inputs_with_the_same_answer(image_model, tmp_path):
    """The GPU session's path, here on the CPU provider (the CUDA graph setting then only pads to its bucket)."""
    steps = []
    inputs = measure_inputs(image_model, served_configs("CPUExecutionProvider")[INPUT_CONFIG], seconds=0.3,
                            work_dir=tmp_path, on_step=steps.append)
    assert [(p["input"], p["concurrency"], p["rows_per_request"]) for p in inputs["points"]] == input_plan()
    assert all(p["requests"] > 0 and p["errors"] == 0 and p["max_abs_diff"] < 1e-4 for p in inputs["points"]), inputs
    assert [p["bytes_per_row"] for p in inputs["points"]] == [360, 90] and len(steps) == 2
