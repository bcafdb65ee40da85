"""`make bench-gpu`'s input comparison, on what runs without a GPU: the plan, the two models of the same images,
the ratios and table of the report, the refusal without a CUDA GPU, and one real served pass on the CPU provider."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from benchmarks.cli import main as benchmarks_main
from benchmarks.gpu import goals, markdown, require_gpu, with_cuda_ratios
from benchmarks.gpu_served import (
    DEFAULTS,
    FRONTEND_COUNTS,
    chosen_frontends,
    client_processes,
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
        [helper.make_node("Flatten", ["image"], ["flat"]), helper.make_node("MatMul", ["flat", "W"], ["scores"])],
        "image",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["N", 6, 5, 3])],
        [helper.make_tensor_value_info("scores", TensorProto.FLOAT, ["N", 4])],
        [numpy_helper.from_array(weight, "W")],
    )
    path = tmp_path_factory.mktemp("bench-model") / "image.onnx"
    onnx.save(onnx_model(graph), path)
    row = np.random.default_rng(1).uniform(-1, 1, (1, 6, 5, 3)).astype(np.float32)
    return BenchModel("image", path, "image", row, "test graph")


def test_the_input_comparison_is_fp32_then_uint8_at_concurrency_32_with_single_rows():
    assert input_plan() == [("fp32", 32, 1), ("uint8", 32, 1)]
    assert served_configs("CUDAExecutionProvider")[DEFAULTS] == {"providers": ["CUDAExecutionProvider"]}
    assert client_processes(32) > 1 and client_processes(1) == 1


def test_both_inputs_carry_the_same_image_and_uint8_a_quarter_of_the_bytes(image_model, tmp_path):
    models = input_models(image_model, tmp_path)
    floats, pixels = models["fp32"].row, models["uint8"].row
    assert pixels.dtype == np.uint8 and floats.dtype == np.float32 and 4 * pixels.nbytes == floats.nbytes
    np.testing.assert_allclose(floats, image_model.row, atol=1 / 255 + 1e-6)  # the bench row, rounded to a pixel
    run = {
        kind: ort.InferenceSession(str(m.onnx_path), providers=["CPUExecutionProvider"]).run(None, {"image": m.row})[0]
        for kind, m in models.items()
    }
    np.testing.assert_allclose(run["uint8"], run["fp32"], rtol=1e-5, atol=1e-5)


def _point(rows_per_s: float, **more) -> dict:
    return {
        "concurrency": 32,
        "rows_per_request": 1,
        "rows_per_s": rows_per_s,
        "p50_ms": 30.0,
        "p99_ms": 90.5,
        "server_cpu_ms_per_request": 1.7,
        "errors": 0,
        **more,
    }


def test_the_report_gives_each_input_its_share_of_the_cuda_limit_with_p99_beside_it():
    served = with_cuda_ratios(
        {
            "status": "measured",
            "cuda_limit_rows_per_s": 8000.0,
            "configs": [
                {"name": "cuda-graph", "settings": {}, "providers_used": "[]", "max_abs_diff": 0.0, "points": [_point(900.0)]}
            ],
            "inputs": {
                "status": "measured",
                "config": "cuda-graph",
                "settings": {},
                "points": [
                    _point(900.0, input="fp32", bytes_per_row=602112, max_abs_diff=2e-5),
                    _point(2000.0, input="uint8", bytes_per_row=150528, max_abs_diff=3e-5),
                ],
            },
        }
    )
    assert [p["x_cuda_limit"] for p in served["inputs"]["points"]] == [0.113, 0.25]
    table = markdown({"gpu": "test GPU", "onnxruntime": "1.31", "rows": [], "served": served})
    assert "| uint8 | 150,528 | 2000 | 0.25 | 30.00 | 90.50 | 1.7 | 3.0e-05 | 0 |" in table
    assert "gRPC concurrency 32, 1 row per request" in table
    skipped = markdown(
        {
            "gpu": "test GPU",
            "onnxruntime": "1.31",
            "rows": [],
            "served": {**served, "inputs": {"status": "skipped", "reason": "no uint8 input for this graph"}},
        }
    )
    assert "Inputs, fp32 vs uint8: no uint8 input for this graph." in skipped


def test_front_ends_are_compared_at_1_2_4_and_8_at_concurrency_32_and_the_fewest_near_the_fastest_chosen():
    assert frontends_plan() == [(count, 32, 1) for count in FRONTEND_COUNTS] and FRONTEND_COUNTS == (1, 2, 4, 8)
    points = [_point(rows, frontends=count, requests=10) for count, rows in zip(FRONTEND_COUNTS, (900, 2500, 4000, 4100))]
    assert chosen_frontends(points) == 4  # 8 is faster by under 5%: it would only spend more CPU
    assert chosen_frontends(points[:2]) == 2 and chosen_frontends([]) == 1


def test_the_report_gives_each_front_end_count_its_share_of_the_cuda_limit_and_judges_the_goals():
    served = with_cuda_ratios(
        {
            "status": "measured",
            "cuda_limit_rows_per_s": 8000.0,
            "configs": [
                {
                    "name": "defaults",
                    "settings": {},
                    "providers_used": "[]",
                    "max_abs_diff": 0.0,
                    "points": [
                        _point(300.0, concurrency=1, requests=9),
                        _point(900.0, concurrency=8, requests=9),
                        _point(950.0, requests=9),
                    ],
                }
            ],
            "frontends": {
                "status": "measured",
                "config": "defaults",
                "settings": {},
                "chosen": 4,
                "points": [
                    _point(900.0, frontends=1, requests=9, client_cpu_ms_per_request=0.6),
                    _point(4000.0, frontends=4, requests=9, client_cpu_ms_per_request=0.6),
                ],
            },
            "inputs": {
                "status": "measured",
                "config": "defaults",
                "settings": {},
                "points": [
                    _point(4000.0, input="fp32", requests=9, bytes_per_row=360, max_abs_diff=0.0),
                    _point(4400.0, input="uint8", requests=9, bytes_per_row=90, max_abs_diff=0.0),
                ],
            },
        }
    )
    assert [p["x_cuda_limit"] for p in served["frontends"]["points"]] == [0.113, 0.5]
    judged = {goal["goal"]: goal for goal in goals(served)}
    fp32, uint8 = judged["served 1-row gRPC c32 fp32 / CUDA limit"], judged["served 1-row gRPC c32 uint8 / CUDA limit"]
    assert fp32["met"] and fp32["value"] == 0.5 and not uint8["met"] and uint8["value"] == 0.55
    assert judged["`defaults` at c8 and c32 / c1 (1-row)"]["met"]
    assert judged["p99 / p50 at every served point (worst)"]["value"] == round(90.5 / 30, 3)
    assert judged["server CPU ms per request at c32 (worst point)"]["met"]
    served["goals"] = list(judged.values())
    table = markdown({"gpu": "test GPU", "onnxruntime": "1.31", "rows": [], "served": served})
    assert "| 4 | 4000 | 0.50 | 30.00 | 90.50 | 1.7 | 0.6 | 0 |" in table
    assert "chosen: 4" in table and "| served 1-row gRPC c32 uint8 / CUDA limit | >= 0.6 | 0.55 | no |" in table
    failed = markdown(
        {
            "gpu": "test GPU",
            "onnxruntime": "1.31",
            "rows": [],
            "served": {**served, "frontends": {"status": "failed", "reason": "the session host exited"}},
        }
    )
    assert "Front ends: the session host exited." in failed


def test_a_front_end_count_with_nothing_to_compare_is_refused_in_one_line():
    with pytest.raises(UserError, match=r"^use --models of .*--frontends of 2 or more"):
        benchmarks_main(["frontends", "--frontends", "1"])


@pytest.mark.skipif(require_gpu() is None, reason="checks the refusal on a machine without a CUDA GPU")
def test_bench_gpu_without_a_cuda_gpu_is_refused_in_one_line():
    with pytest.raises(UserError, match=r"^bench-gpu needs a CUDA GPU, and this machine lacks .*--allow-no-gpu") as caught:
        benchmarks_main(["gpu", "--no-docs"])
    assert "\n" not in str(caught.value)


@pytest.mark.slow  # starts two servers
def test_the_input_comparison_serves_both_inputs_with_the_same_answer(image_model, tmp_path):
    """The GPU session's path, here on the CPU provider, from several client processes at concurrency 32."""
    steps = []
    inputs = measure_inputs(
        image_model, served_configs("CPUExecutionProvider")[DEFAULTS], seconds=0.3, work_dir=tmp_path, on_step=steps.append
    )
    assert [(p["input"], p["concurrency"], p["rows_per_request"]) for p in inputs["points"]] == input_plan()
    assert all(p["requests"] > 0 and p["errors"] == 0 and p["max_abs_diff"] < 1e-4 for p in inputs["points"]), inputs
    assert [p["bytes_per_row"] for p in inputs["points"]] == [360, 90] and len(steps) == 2
