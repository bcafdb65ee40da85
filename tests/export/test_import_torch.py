"""A real PyTorch round trip: train, torch.onnx.export (dynamic batch), import, quantize, serve, query over V2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from export.report import ExportReport
from slipway.paths import PROJECT_ROOT
from tests.conftest import run_module

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def torch_export(tmp_path_factory) -> Path:
    pytest.importorskip("torch", reason="PyTorch (the dev extra's torch==2.13.0) is not installed")
    out = tmp_path_factory.mktemp("torch")
    subprocess.run(
        [sys.executable, str(PROJECT_ROOT / "tests/export/torch_digits.py"), str(out)],
        cwd=PROJECT_ROOT,
        check=True,
        capture_output=True,
        text=True,
        timeout=600,
    )
    return out


@pytest.fixture(scope="module")
def imported(torch_export, module_reports_env, tmp_path_factory):
    out = tmp_path_factory.mktemp("imported") / "torch-digits"
    run_module(
        "export",
        "import",
        str(torch_export / "model.onnx"),
        "--name",
        "torch-digits",
        "--calibration",
        str(torch_export / "calibration.npz"),
        "--labels",
        str(torch_export / "labelled.npz"),
        "--out",
        str(out),
        "--measure-rounds",
        "1",
        "--measure-seconds",
        "0.02",
        env=module_reports_env,
    )
    report = json.loads((Path(module_reports_env["SLIPWAY_REPORTS_DIR"]) / "export.json").read_text())
    return out, ExportReport.model_validate(report)


def test_torch_export_writes_external_data_and_a_dynamic_batch(torch_export):
    import onnx

    model = onnx.load(torch_export / "model.onnx", load_external_data=False)
    assert any(init.data_location == onnx.TensorProto.EXTERNAL for init in model.graph.initializer)
    batch = model.graph.input[0].type.tensor_type.shape.dim[0]
    assert batch.dim_param and not batch.dim_value


def test_import_makes_the_same_variants_and_report_as_keras(imported):
    out, report = imported
    assert [row.name for row in report.variants] == ["fp32", "int8", "fp16"]
    assert report.baseline.name == "imported" and report.source["kind"] == "onnx"
    assert report.evaluation["labelled"] and report.budget["basis"] == "accuracy drop"
    rows = {row.name: row for row in report.variants}
    assert all(row.accuracy is not None for row in rows.values())
    assert rows["fp32"].top1_agreement == 1.0 and rows["fp32"].max_abs_diff < 1e-4
    assert rows["int8"].file_bytes * 3 < rows["fp32"].file_bytes
    assert rows["int8"].details["calibration_method"] == "minmax"
    assert not report.calibration["synthetic"] and report.warnings == []
    assert report.chosen.name in rows and Path(report.chosen.path).parent == out


def test_fp32_answers_like_pytorch(imported, torch_export):
    import onnxruntime as ort

    out, _ = imported
    with np.load(torch_export / "labelled.npz") as labelled, np.load(torch_export / "torch-outputs.npz") as torch_out:
        x, logits = labelled["image"], torch_out["logits"]
    session = ort.InferenceSession(str(out / "fp32" / "model.onnx"), providers=["CPUExecutionProvider"])
    ours = session.run(None, {"image": x})[0]
    np.testing.assert_allclose(ours, logits, atol=1e-4)
    assert (ours.argmax(1) == logits.argmax(1)).all()


def test_served_int8_model_agrees_with_pytorch_over_rest_and_grpc(imported, torch_export):
    import tritonclient.grpc as grpcclient
    import tritonclient.http as httpclient

    from slipway.local_server import LocalServer

    out, _ = imported
    with np.load(torch_export / "labelled.npz") as labelled, np.load(torch_export / "torch-outputs.npz") as torch_out:
        x, torch_answers = labelled["image"][:64], torch_out["logits"][:64].argmax(1)
    with LocalServer(out / "int8") as server:
        http = httpclient.InferenceServerClient(server.http_url.removeprefix("http://"))
        assert http.get_model_metadata("torch-digits")["inputs"] == [
            {"name": "image", "datatype": "FP32", "shape": [-1, 1, 8, 8]}
        ]
        tensor = httpclient.InferInput("image", list(x.shape), "FP32")
        tensor.set_data_from_numpy(x, binary_data=False)  # MLServer's REST has no binary extension
        rest = http.infer("torch-digits", [tensor]).as_numpy("logits")
        http.close()
        grpc = grpcclient.InferenceServerClient(server.grpc_target)
        tensor = grpcclient.InferInput("image", list(x.shape), "FP32")
        tensor.set_data_from_numpy(x)
        over_grpc = grpc.infer("torch-digits", [tensor]).as_numpy("logits")
        grpc.close()
    np.testing.assert_allclose(rest, over_grpc, atol=1e-5)  # JSON carries decimal text, gRPC raw floats
    assert rest.shape == (64, 10)
    assert (rest.argmax(1) == torch_answers).mean() >= 0.95


def test_imported_variants_publish_to_the_store_like_keras_ones(imported, module_reports_env, tmp_path):
    out, report = imported
    int8 = next(row for row in report.variants if row.name == "int8")
    result = run_module(
        "export", "versions", "publish", str(out / "int8"), "--store", str(tmp_path / "store"), "--json", env=module_reports_env
    )
    record = json.loads(result.stdout)
    assert record["name"] == "torch-digits" and record["lineage"]["source"]["digest"] == int8.digest
    assert record["lineage"]["variant"] == "int8" and record["metrics"]["accuracy"] == pytest.approx(int8.accuracy)


def test_import_without_data_warns_that_accuracy_is_unknown(torch_export, reports_env, tmp_path):
    out = tmp_path / "nodata"
    result = run_module(
        "export",
        "import",
        str(torch_export / "model.onnx"),
        "--name",
        "nodata",
        "--out",
        str(out),
        "--report",
        "export-nodata",
        "--measure-rounds",
        "1",
        "--measure-seconds",
        "0.02",
        env=reports_env,
    )
    assert "synthetic" in result.stderr and "accuracy is unknown" in result.stderr
    report = ExportReport.model_validate_json((Path(reports_env["SLIPWAY_REPORTS_DIR"]) / "export-nodata.json").read_text())
    assert report.calibration["synthetic"] and report.budget["basis"] == "top-1 disagreement"
    assert all(row.accuracy is None and row.top1_agreement is not None for row in report.variants)
    assert len(report.warnings) == 2 and sorted(p.name for p in out.iterdir()) == ["fp16", "fp32", "int8"]
