"""`python -m export import` on hand-built ONNX files: fixed batches, and every way the input can be wrong."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from export.input_spec import InputSpec
from export.onnx_import import ImportCheckError, read_rows
from tests.conftest import run_module
from tests.graphs import exp_model, onnx_model

QUICK = ["--measure-rounds", "1", "--measure-seconds", "0.02"]


def conv_model(*, batch: int | str = "N", opset: int = 17, extra_nodes=(), domain_op: bool = False) -> onnx.ModelProto:
    """image [batch, 1, 8, 8] -> Conv(4, 3x3) -> Relu -> Flatten -> Gemm(256 -> 10) -> logits."""
    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(rng.normal(0, 0.5, (4, 1, 3, 3)).astype(np.float32), "conv_w"),
        numpy_helper.from_array(np.zeros(4, np.float32), "conv_b"),
        numpy_helper.from_array(rng.normal(0, 0.1, (256, 10)).astype(np.float32), "fc_w"),
        numpy_helper.from_array(np.zeros(10, np.float32), "fc_b"),
    ]
    nodes = [
        helper.make_node("Conv", ["image", "conv_w", "conv_b"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("Flatten", ["r"], ["f"]),
        helper.make_node("Gemm", ["f", "fc_w", "fc_b"], ["logits"]),
        *extra_nodes,
    ]
    opsets = [helper.make_opsetid("", opset)]
    if domain_op:
        nodes[1] = helper.make_node("FancyRelu", ["c"], ["r"], domain="com.example")
        opsets.append(helper.make_opsetid("com.example", 1))
    graph = helper.make_graph(
        nodes,
        "tiny",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, [batch, 1, 8, 8])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [batch, 10])],
        inits,
    )
    return onnx_model(graph, opsets)


def save(model: onnx.ModelProto, path: Path) -> Path:
    path.write_bytes(model.SerializeToString())
    return path


def text_file(path: Path) -> Path:
    path.write_text("this is not a model\n")
    return path


def images(rows: int, dtype=np.float32, shape=(1, 8, 8)) -> np.ndarray:
    return np.random.default_rng(rows).random((rows, *shape)).astype(dtype)


def test_a_fixed_batch_model_is_timed_and_served_at_its_own_batch(tmp_path, reports_env):
    model = save(conv_model(batch=1), tmp_path / "fixed.onnx")
    np.savez(tmp_path / "cal.npz", anything=images(40))  # one input, one array: the key does not matter
    out = tmp_path / "out"
    run_module(
        "export",
        "import",
        str(model),
        "--name",
        "fixed",
        "--calibration",
        str(tmp_path / "cal.npz"),
        "--out",
        str(out),
        "--report",
        "export-fixed",
        *QUICK,
        env=reports_env,
    )
    report = json.loads((Path(reports_env["SLIPWAY_REPORTS_DIR"]) / "export-fixed.json").read_text())
    assert {(row["latency_batch"], row["throughput_batch"]) for row in report["variants"]} == {(1, 1)}
    assert report["evaluation"]["note"].startswith("last 8 rows")  # held out of the 40 calibration rows
    assert report["calibration"]["rows"] == 32
    with np.load(out / "fp32" / "input-example.npz") as example:
        assert example["input:image"].shape == (1, 1, 8, 8)


def _refused(tmp_path: Path, env: dict, args: list[str], expected: str) -> None:
    out = tmp_path / "out"
    result = run_module("export", "import", *args, "--out", str(out), *QUICK, env=env, check=False)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and expected in errors[0], result.stderr
    assert not out.exists()


@pytest.mark.parametrize(
    "make, expected",
    [
        (text_file, "is not an ONNX file"),
        (
            lambda p: save(conv_model(extra_nodes=[helper.make_node("Add", ["logits", "nowhere"], ["z"])]), p),
            "fails the ONNX checker",
        ),
        (lambda p: save(conv_model(opset=11), p), "uses opset 11; Slipway needs opset >= 13"),
        (lambda p: save(conv_model(domain_op=True), p), "outside standard ONNX (com.example::FancyRelu)"),
        (lambda p: p, "no ONNX file at"),
    ],
)
def test_bad_model_files_are_refused(make, expected, tmp_path, reports_env):
    path = make(tmp_path / "model.onnx")
    _refused(tmp_path, reports_env, [str(path), "--name", "m"], expected)


@pytest.mark.parametrize(
    "data, expected",
    [
        ({"image": images(20, shape=(8, 8))}, "is float32 [20, 8, 8]; the model's input 'image' takes float32 [N, 1, 8, 8]"),
        (
            {"image": images(20, dtype=np.float64)},
            "is float64 [20, 1, 8, 8]; the model's input 'image' takes float32 [N, 1, 8, 8] (at least one row): convert with .astype(np.float32)",
        ),
        ({"pixels": images(20), "other": images(20)}, "missing ['image']"),
    ],
)
def test_calibration_data_that_does_not_fit_is_refused(data, expected, tmp_path, reports_env):
    model = save(conv_model(), tmp_path / "model.onnx")
    np.savez(tmp_path / "cal.npz", **data)
    _refused(tmp_path, reports_env, [str(model), "--name", "m", "--calibration", str(tmp_path / "cal.npz")], expected)


def test_other_bad_requests_are_refused(tmp_path, reports_env):
    model = save(conv_model(), tmp_path / "model.onnx")
    np.savez(tmp_path / "unlabelled.npz", image=images(10))
    _refused(
        tmp_path, reports_env, [str(model), "--name", "m", "--labels", str(tmp_path / "unlabelled.npz")], "has no 'labels' array"
    )
    (tmp_path / "text.npz").write_text("not numpy")
    _refused(
        tmp_path,
        reports_env,
        [str(model), "--name", "m", "--calibration", str(tmp_path / "text.npz")],
        "cannot read calibration data",
    )
    _refused(tmp_path, reports_env, [str(model), "--name", "no spaces!"], "cannot be used in /v2/models/<name>")
    _refused(tmp_path, reports_env, [str(model), "--name", "m", "--variants", "fp32,slim"], "slim need(s) a Keras model")
    _refused(
        tmp_path,
        reports_env,
        [str(save(exp_model(), tmp_path / "exp.onnx")), "--name", "e"],
        "no operator ONNX Runtime can quantize",
    )


def test_labels_must_be_one_class_index_per_row(tmp_path):
    spec = [InputSpec("image", np.dtype(np.float32), (None, 1, 8, 8))]
    np.savez(tmp_path / "bad.npz", image=images(5), labels=np.zeros((5, 10)))
    with pytest.raises(ImportCheckError, match="1-D integer array with one class index per row"):
        read_rows(tmp_path / "bad.npz", spec, what="labelled", with_labels=True)
    np.savez(tmp_path / "good.npz", image=images(5), labels=np.arange(5))
    feeds, labels = read_rows(tmp_path / "good.npz", spec, what="labelled", with_labels=True)
    assert feeds["image"].shape == (5, 1, 8, 8) and labels.tolist() == [0, 1, 2, 3, 4]
