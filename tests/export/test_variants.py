"""`python -m export variants` on the really trained digits CNN: every variant built, judged, timed, written, served."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import numpy as np
import onnx
import pytest

from export.report import ExportReport
from slipway.artifact import verify_artifact
from tests.conftest import run_module

pytestmark = pytest.mark.slow

ALL = ["fp32", "int8", "fp16", "pruned", "pruned-int8", "slim", "slim-int8"]
QUICK = ["--measure-rounds", "1", "--measure-seconds", "0.02"]


@pytest.fixture(scope="module")
def variants_run(tmp_path_factory, trained_model, module_reports_env):
    """One full export run (short fine-tunes, short timing): the artifacts folder and the report."""
    out = tmp_path_factory.mktemp("variants") / "digits"
    result = run_module(
        "export",
        "variants",
        "digits",
        "--keras-model",
        str(trained_model),
        "--out",
        str(out),
        "--fine-tune-epochs",
        "4",
        *QUICK,
        env=module_reports_env,
    )
    report = json.loads((Path(module_reports_env["SLIPWAY_REPORTS_DIR"]) / "export.json").read_text())
    return out, report, result


def test_report_follows_its_schema_and_names_every_variant(variants_run, module_reports_env):
    out, report, _ = variants_run
    parsed = ExportReport.model_validate(report)
    assert [row.name for row in parsed.variants] == ALL
    assert parsed.baseline.name == "keras" and parsed.baseline.status == "baseline"
    for row in [parsed.baseline, *parsed.variants]:
        assert row.file_bytes > 0 and row.gzip_bytes > 0 and row.parameters > 0
        assert row.p50_latency_ms > 0 and row.throughput > 0 and row.latency_batch == 1 and row.throughput_batch == 32
        assert row.accuracy is not None and row.accuracy_drop_points is not None
    reports = Path(module_reports_env["SLIPWAY_REPORTS_DIR"])
    assert "| int8 |" in (reports / "export.md").read_text()
    assert (reports / "export.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_every_variant_is_a_verified_artifact_with_its_lineage(variants_run):
    out, report, _ = variants_run
    assert sorted(p.name for p in out.iterdir()) == sorted(ALL)  # nothing else: no staging left behind
    for row in report["variants"]:
        folder = Path(row["path"])
        assert folder.parent == out
        manifest = verify_artifact(folder)
        assert {"model.onnx", "model-settings.json", "input-example.npz", "variant.json"} <= set(manifest.files)
        lineage = json.loads((folder / "variant.json").read_text())
        assert lineage["variant"] == row["name"] and lineage["model"] == "digits"
    assert json.loads((out / "pruned-int8" / "variant.json").read_text())["derived_from"] == "pruned"


def test_chosen_is_the_fastest_accepted_variant(variants_run):
    _, report, result = variants_run
    accepted = [row for row in report["variants"] if row["status"] == "accepted"]
    assert accepted and report["chosen"]["name"] == min(accepted, key=lambda r: r["p50_latency_ms"])["name"]
    assert report["chosen"]["reason"].startswith(report["chosen"]["name"] + ": lowest p50 latency")
    for row in report["variants"]:
        drop = row["accuracy_drop_points"]
        assert (row["status"] == "accepted") == (drop <= 0.5 + 1e-9 and "tolerance" not in row["reason"]), row
    assert "chosen" in result.stderr + result.stdout


def test_float_variants_are_faithful_and_int8_is_small_and_accurate(variants_run):
    _, report, _ = variants_run
    rows = {row["name"]: row for row in report["variants"]}
    assert rows["fp32"]["top1_agreement"] == 1.0 and rows["fp32"]["max_abs_diff"] < 1e-4
    assert rows["fp16"]["max_abs_diff"] < 1e-2 and rows["fp16"]["top1_agreement"] >= 0.99
    assert rows["fp16"]["file_bytes"] < 0.55 * rows["fp32"]["file_bytes"]
    assert rows["int8"]["file_bytes"] * 3.5 <= rows["fp32"]["file_bytes"]
    assert rows["int8"]["accuracy_drop_points"] <= 1.0
    assert rows["int8"]["details"]["activations"] == "uint8" and rows["int8"]["details"]["calibration_method"] == "minmax"
    assert report["calibration"]["note"].startswith("training split")


def test_pruned_is_sparse_and_slim_is_half_as_wide(variants_run):
    _, report, _ = variants_run
    rows = {row["name"]: row for row in report["variants"]}
    fp32 = rows["fp32"]
    assert fp32["parameters"] == 151_306 and fp32["nonzero_parameters"] >= 151_306 - 10  # a bias never updated stays 0
    # 75% of every kernel is zero; biases (234) stay: same file, far smaller gzip
    assert rows["pruned"]["nonzero_parameters"] <= 0.26 * fp32["parameters"] + 234
    assert rows["pruned"]["gzip_bytes"] < 0.5 * fp32["gzip_bytes"]
    assert rows["pruned-int8"]["nonzero_parameters"] <= rows["pruned"]["nonzero_parameters"]
    # half the filters and hidden units: conv 16 + 32 filters, 64 hidden units, 10 outputs
    assert rows["slim"]["parameters"] == (9 * 16 + 16) + (9 * 16 * 32 + 32) + (4 * 4 * 32 * 64 + 64) + (64 * 10 + 10)
    assert rows["slim"]["accuracy"] >= 0.9 and rows["slim"]["max_abs_diff"] < 1e-4


def test_graphs_are_standard_onnx(variants_run):
    out, _, _ = variants_run
    for name in ALL:
        model = onnx.load(out / name / "model.onnx")
        onnx.checker.check_model(model)
        assert {node.domain for node in model.graph.node} <= {"", "ai.onnx"}, name
        assert [i.type.tensor_type.elem_type for i in model.graph.input] == [onnx.TensorProto.FLOAT], name
        assert [o.type.tensor_type.elem_type for o in model.graph.output] == [onnx.TensorProto.FLOAT], name
    int8 = onnx.load(out / "int8" / "model.onnx")
    assert sum(node.op_type == "QuantizeLinear" for node in int8.graph.node) >= 4
    fp16 = onnx.load(out / "fp16" / "model.onnx")
    assert {init.data_type for init in fp16.graph.initializer if len(init.dims) > 1} == {onnx.TensorProto.FLOAT16}


def test_an_int8_variant_serves_over_rest_and_grpc(variants_run):
    from loadtest.smoke import check_grpc, check_http
    from slipway.local_server import LocalServer

    out, _, _ = variants_run
    with LocalServer(out / "int8") as server:
        for result in (
            check_http(server.http_url, "digits", out / "int8"),
            check_grpc(server.grpc_target, "digits", out / "int8"),
        ):
            assert result.predictions_match and result.rows == 32


def test_profile_lists_operators_and_keeps_a_perfetto_trace(variants_run, module_reports_env, tmp_path):
    out, _, _ = variants_run
    trace = tmp_path / "trace.json"
    result = run_module(
        "export", "profile", str(out / "int8"), "--runs", "20", "--batch-size", "4", "--trace", str(trace), env=module_reports_env
    )
    events = json.loads(trace.read_text())
    assert any(event.get("cat") == "Node" for event in events)
    report = json.loads((Path(module_reports_env["SLIPWAY_REPORTS_DIR"]) / "profile.json").read_text())
    assert report["operators"][0]["op_type"] in result.stdout + result.stderr
    assert sum(op["share"] for op in report["operators"]) == pytest.approx(1.0)
    assert any("Conv" in op["op_type"] for op in report["operators"]) and report["operators"][0]["calls"] >= 20


def test_training_logs_keep_a_tensorboard_profile(trained_model):
    profiles = list((trained_model.parent / "tensorboard").rglob("*.xplane.pb"))
    assert profiles and profiles[0].stat().st_size > 0


# --- bad input: one line, non-zero exit, nothing written -------------------------------------


def _fails(args: list[str], env: dict, out: Path, expected: str):
    result = run_module("export", *args, "--out", str(out), env=env, check=False)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and expected in errors[0] and result.stderr.strip().splitlines()[-1] == errors[0]
    return result


def test_missing_and_corrupt_models_are_refused(tmp_path, module_reports_env):
    _fails(
        ["variants", "digits", "--keras-model", str(tmp_path / "none.keras")],
        module_reports_env,
        tmp_path / "o1",
        "no trained model at",
    )
    corrupt = tmp_path / "corrupt.keras"
    corrupt.write_bytes(np.random.default_rng(0).bytes(4096))
    _fails(["variants", "digits", "--keras-model", str(corrupt)], module_reports_env, tmp_path / "o2", "is not one")
    not_a_model = tmp_path / "zipped.keras"  # a zip archive, but not of a Keras model: Keras itself refuses it
    with zipfile.ZipFile(not_a_model, "w") as archive:
        archive.writestr("notes.txt", "hello")
    _fails(["variants", "digits", "--keras-model", str(not_a_model)], module_reports_env, tmp_path / "o3", "cannot read")
    assert not any((tmp_path / name).exists() for name in ("o1", "o2", "o3"))


@pytest.mark.parametrize(
    "args, expected",
    [
        (["--variants", "fp32,int4"], "unknown variant(s) ['int4']"),
        (["--accuracy-budget", "-1"], "invalid export options: accuracy_points"),
        (["--sparsity", "1.5"], "invalid export options: sparsity"),
    ],
)
def test_bad_options_are_refused_before_any_work(args, expected, trained_model, tmp_path, module_reports_env):
    _fails(["variants", "digits", "--keras-model", str(trained_model), *args], module_reports_env, tmp_path / "out", expected)
    assert not (tmp_path / "out").exists()


def test_a_budget_no_variant_meets_writes_nothing(trained_model, tmp_path, module_reports_env):
    out = tmp_path / "variants"
    (out / "fp32").mkdir(parents=True)  # a previous export's output: a new export may replace it, a failed one must not
    (out / "fp32" / "manifest.json").write_text("{}")
    reports = Path(module_reports_env["SLIPWAY_REPORTS_DIR"])
    before = (reports / "export.json").read_bytes() if (reports / "export.json").exists() else None
    # fp16 can never reproduce fp32 probabilities exactly: a zero tolerance rejects it for sure
    result = _fails(
        ["variants", "digits", "--keras-model", str(trained_model), "--variants", "fp16", "--fp16-tolerance", "0", *QUICK],
        module_reports_env,
        out,
        "no variant of digits is within budget",
    )
    assert "fp16: max abs diff" in result.stderr
    assert [p.name for p in out.iterdir()] == ["fp32"] and (out / "fp32" / "manifest.json").read_text() == "{}"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no staging folder left
    assert ((reports / "export.json").read_bytes() if (reports / "export.json").exists() else None) == before


def test_the_chosen_variant_publishes_with_its_lineage(variants_run, module_reports_env, tmp_path):
    _, report, _ = variants_run
    chosen = next(row for row in report["variants"] if row["name"] == report["chosen"]["name"])
    result = run_module(
        "export", "versions", "publish", chosen["path"], "--store", str(tmp_path / "store"), "--json", env=module_reports_env
    )
    record = json.loads(result.stdout)
    assert record["lineage"]["source"]["digest"] == chosen["digest"] and record["name"] == "digits"
    assert record["lineage"]["variant"] == chosen["name"]
    assert record["lineage"]["training"]["config"]["seed"] == 0
    assert record["lineage"]["data_fingerprint"] == report["data_fingerprint"]
    assert record["metrics"]["accuracy"] == pytest.approx(chosen["accuracy"])
