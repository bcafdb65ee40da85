"""Lineage comes from the reports that provably describe the artifact, never from another model's."""

import json

from export.store.lineage import gather
from slipway.artifact import read_manifest
from slipway.reports import write_report

TRAIN_CONFIG = {"seed": 3, "epochs": 25, "batch_size": 64, "learning_rate": 0.001}


def write_training(tmp_path):
    """What `export train` leaves: model.keras with train-config.json beside it, and reports/train.json."""
    train_dir = tmp_path / "train"
    train_dir.mkdir()
    (train_dir / "model.keras").write_bytes(b"keras")
    (train_dir / "train-config.json").write_text(json.dumps({"config": TRAIN_CONFIG, "data_fingerprint": "fp-123"}))
    reports = tmp_path / "reports"
    write_report(
        "train",
        {
            "model_path": str(train_dir / "model.keras"),
            "config": TRAIN_CONFIG,
            "test_accuracy": 0.98,
            "test_loss": 0.07,
            "epochs_run": 19,
            "parameters": 120_000,
        },
        reports,
    )
    return train_dir / "model.keras", reports


def test_foundation_reports_give_config_fingerprint_and_metrics(tmp_path, artifact_factory):
    model_path, reports = write_training(tmp_path)
    artifact = artifact_factory(1.0)
    digest = read_manifest(artifact).digest
    write_report(
        "convert",
        {
            "source_model": str(model_path),
            "artifact": str(artifact),
            "digest": digest,
            "opset": 17,
            "onnx_bytes": 101,
            "onnx_test_accuracy": 0.975,
            "data_fingerprint": "fp-123",
            "parity": {"max_abs_diff": 1e-6, "identical_predictions": True},
        },
        reports,
    )
    found = gather(artifact, digest, reports_dir=reports, extra_metrics={"latency_p50_ms": 1.5})
    assert found.notes == []
    assert found.lineage["variant"] == "fp32"
    assert found.lineage["training"]["config"] == TRAIN_CONFIG
    assert found.lineage["data_fingerprint"] == "fp-123"
    assert found.lineage["source"]["digest"] == digest
    assert found.lineage["git"]["commit"] and len(found.lineage["git"]["commit"]) == 40
    assert found.metrics == {
        "train.test_accuracy": 0.98,
        "train.test_loss": 0.07,
        "train.epochs_run": 19.0,
        "train.parameters": 120000.0,
        "onnx_test_accuracy": 0.975,
        "onnx_bytes": 101.0,
        "opset": 17.0,
        "parity.max_abs_diff": 1e-6,
        "latency_p50_ms": 1.5,
    }


def test_a_variant_entry_names_the_variant_and_its_figures(tmp_path, artifact_factory):
    model_path, reports = write_training(tmp_path)
    int8, fp32 = artifact_factory(1.0), artifact_factory(2.0)
    write_report(
        "export",
        {
            "source_model": str(model_path),
            "chosen": "int8",
            "variants": [
                {"name": "fp32", "path": str(fp32), "accuracy": 0.97, "bytes": 400_000},
                {"name": "int8", "path": str(int8), "accuracy": 0.968, "bytes": 110_000, "latency": {"p50_ms": 0.4}},
            ],
        },
        reports,
    )
    found = gather(int8, read_manifest(int8).digest, reports_dir=reports)
    assert found.lineage["variant"] == "int8"
    assert found.metrics["accuracy"] == 0.968 and found.metrics["latency.p50_ms"] == 0.4
    assert found.lineage["training"]["config"] == TRAIN_CONFIG
    assert gather(int8, read_manifest(int8).digest, reports_dir=reports, variant="custom").lineage["variant"] == "custom"


def test_a_report_about_another_artifact_is_not_attached(tmp_path, artifact_factory):
    model_path, reports = write_training(tmp_path)
    artifact = artifact_factory(1.0)
    write_report(
        "export",
        {"source_model": str(model_path), "artifact": str(artifact), "digest": "0" * 64, "onnx_test_accuracy": 0.5},
        reports,
    )
    found = gather(artifact, read_manifest(artifact).digest, reports_dir=reports)
    assert found.metrics == {} and found.lineage["training"] is None and found.lineage["variant"] is None
    assert found.notes == [
        f"{reports / 'export.json'} describes another artifact: training config, data fingerprint "
        "and export metrics are unknown for this version"
    ]
    empty = tmp_path / "empty"
    assert f"no {empty / 'export.json'} or {empty / 'convert.json'}:" in gather(artifact, "x", reports_dir=empty).notes[0]


def test_malformed_lineage_files_leave_it_unknown_not_a_traceback(tmp_path, artifact_factory):
    model_path, reports = write_training(tmp_path)
    (model_path.parent / "train-config.json").write_text('{"config": ')  # cut short
    write_report("train", {"model_path": str(model_path), "data": ["not", "an", "object"], "test_accuracy": 0.9}, reports)
    artifact = artifact_factory(1.0)
    digest = read_manifest(artifact).digest
    write_report("export", {"variants": {"fp32": "not a list"}}, reports)  # edited by hand: matches nothing
    write_report("convert", {"source_model": str(model_path), "digest": digest}, reports)
    found = gather(artifact, digest, reports_dir=reports)
    assert found.lineage["training"] == {"model_path": str(model_path), "config": None, "data_fingerprint": None}
    assert found.metrics == {"train.test_accuracy": 0.9}
