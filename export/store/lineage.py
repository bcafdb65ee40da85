"""Where a version came from: training config, data fingerprint, metrics, export variant, git commit, who and when.

Lineage is read from the reports the export steps wrote (`reports/export.json` from
`export variants`/`import`, `reports/convert.json` from the demo's `export convert`,
`reports/train.json`) and the `train-config.json` kept beside the Keras model. A report
is only trusted for an artifact it provably describes (same digest, or for a variant
entry without one, the same folder); otherwise the lineage says "unknown" and a note
says why, rather than attaching another model's numbers.
"""

from __future__ import annotations

import getpass
import json
import os
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from export.store.records import flatten, is_number
from slipway.paths import PROJECT_ROOT, REPORTS_DIR
from slipway.precision import read_numerics
from slipway.reports import read_report

TRAIN_CONFIG_FILE = "train-config.json"  # written by export.train beside model.keras
FOUNDATION_VARIANT = "fp32"  # `export convert` writes float32 ONNX without slimming
EXPORT_REPORTS = ("export", "convert")  # the variants report first, then the single conversion's
EXPORT_METRIC_KEYS = ("onnx_test_accuracy", "onnx_bytes", "opset", "parity")
TRAIN_METRIC_KEYS = ("test_accuracy", "test_loss", "epochs_run", "best_epoch", "parameters", "train_seconds")


@dataclass
class Lineage:
    """The lineage and metrics of one publish, plus notes on what could not be found."""

    lineage: dict[str, Any] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def numeric_leaves(value: Any, prefix: str = "") -> dict[str, float]:
    """Every number inside `value` (nested dicts flattened with dots); booleans and lists are not metrics."""
    return {key: float(item) for key, item in flatten(value, prefix).items() if is_number(item)}


def _same_folder(a: Any, b: Path) -> bool:
    try:
        return isinstance(a, str) and Path(a).resolve() == b.resolve()
    except OSError:
        return False


def _match_export(report: dict | None, artifact_dir: Path, digest: str) -> tuple[dict | None, str | None, dict[str, float]]:
    """(the export report if it describes this artifact, the variant name, the variant's metrics)."""
    if report is None:
        return None, None, {}
    variants = report.get("variants")
    for entry in variants if isinstance(variants, list) else []:  # a hand-edited report may hold anything
        if not isinstance(entry, dict):
            continue
        described = entry.get("digest") == digest if "digest" in entry else _same_folder(entry.get("path"), artifact_dir)
        if described:
            figures = {k: v for k, v in entry.items() if k not in ("name", "path", "digest")}
            return report, entry.get("name"), numeric_leaves(figures)
    if report.get("digest") == digest:
        metrics = numeric_leaves({k: report[k] for k in EXPORT_METRIC_KEYS if k in report})
        return report, report.get("variant", FOUNDATION_VARIANT), metrics
    return None, None, {}


def _training(export: dict, reports_dir: Path | None) -> tuple[dict[str, Any] | None, dict[str, float]]:
    """The training config (from train-config.json beside the Keras model) and the train report's metrics."""
    source_model = export.get("source_model")
    training: dict[str, Any] | None = None
    if isinstance(source_model, str):
        config_path = Path(source_model).parent / TRAIN_CONFIG_FILE
        stored = _json_object(config_path) if config_path.is_file() else None
        if stored is not None:
            training = {
                "model_path": source_model,
                "config": stored.get("config"),
                "data_fingerprint": stored.get("data_fingerprint"),
            }
    metrics: dict[str, float] = {}
    train = read_report("train", reports_dir)
    if train is not None and source_model is not None and _same_folder(train.get("model_path"), Path(source_model)):
        metrics = numeric_leaves({k: train[k] for k in TRAIN_METRIC_KEYS if k in train}, "train.")
        if training is None:
            data = train.get("data")
            training = {
                "model_path": source_model,
                "config": train.get("config"),
                "data_fingerprint": data.get("fingerprint") if isinstance(data, dict) else None,
            }
    return training, metrics


def _json_object(path: Path) -> dict[str, Any] | None:
    """A JSON object from `path`, or None when it is unreadable or not an object (lineage is then unknown)."""
    try:
        stored = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return stored if isinstance(stored, dict) else None


def git_commit(cwd: Path | None = None) -> dict[str, Any] | None:
    """The commit of the code that made the artifact (the current checkout), and whether it had local changes."""
    for folder in (cwd or Path.cwd(), PROJECT_ROOT):
        try:
            commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=folder, capture_output=True, text=True, timeout=10)
            if commit.returncode != 0:
                continue
            status = subprocess.run(
                ["git", "status", "--porcelain", "--untracked-files=no"], cwd=folder, capture_output=True, text=True, timeout=10
            )
        except (OSError, subprocess.TimeoutExpired):
            continue
        return {"commit": commit.stdout.strip(), "dirty": bool(status.stdout.strip())}
    return None


def who() -> str:
    """`user@host` of the publisher."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = str(os.getuid())
    return f"{user}@{socket.gethostname()}"


def now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def gather(
    artifact_dir: Path,
    digest: str,
    *,
    reports_dir: Path | None = None,
    variant: str | None = None,
    extra_metrics: dict[str, float] | None = None,
) -> Lineage:
    """Collect lineage for the artifact whose manifest digest is `digest`."""
    result = Lineage()
    found = [(name, read_report(name, reports_dir)) for name in EXPORT_REPORTS]
    export: dict | None = None
    found_variant: str | None = None
    variant_metrics: dict[str, float] = {}
    for _, report in found:
        export, found_variant, variant_metrics = _match_export(report, Path(artifact_dir), digest)
        if export is not None:
            break
    training: dict[str, Any] | None = None
    train_metrics: dict[str, float] = {}
    if export is None:
        folder = Path(reports_dir or REPORTS_DIR)
        existing = [str(folder / f"{name}.json") for name, report in found if report is not None]
        if existing:
            why = f"{' and '.join(existing)} {'describes' if len(existing) == 1 else 'describe'} another artifact"
        else:
            why = f"no {' or '.join(str(folder / f'{name}.json') for name in EXPORT_REPORTS)}"
        result.notes.append(f"{why}: training config, data fingerprint and export metrics are unknown for this version")
    else:
        training, train_metrics = _training(export, reports_dir)
        if training is None:
            result.notes.append("the training config was not found beside the Keras model the export report names")
    result.metrics = {**train_metrics, **variant_metrics, **(extra_metrics or {})}
    result.lineage = {
        "variant": variant or found_variant,
        "training": training,
        "data_fingerprint": (training or {}).get("data_fingerprint") or (export or {}).get("data_fingerprint"),
        "source": {"path": str(Path(artifact_dir).resolve()), "digest": digest},
        "git": git_commit(),
        # precision and int8 flavour (U8S8/S8S8), read from the artifact: the gpu overlay refuses the CPU's U8S8
        "numerics": numerics.as_dict() if (numerics := read_numerics(Path(artifact_dir))) else None,
    }
    return result
