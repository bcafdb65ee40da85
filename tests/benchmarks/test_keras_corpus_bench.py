"""`python -m benchmarks keras-corpus` run as a user runs it, on the smallest corpus model with tiny seconds.

The whole corpus takes minutes (`make bench-keras`); here the MLP goes through the same command: built, converted,
made into fp32/int8/fp16 and a pruned variant fine-tuned on its own answers, timed in two rounds, and written as JSON and PNG. Every figure must be a measurement.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from tests.conftest import run_module

pytestmark = pytest.mark.slow  # converts with tf2onnx: TensorFlow's import alone takes seconds


def positive(value) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value) and value > 0


def test_the_benchmark_measures_every_figure_of_a_corpus_model(tmp_path):
    env = {"SLIPWAY_REPORTS_DIR": str(tmp_path / "reports"), "SLIPWAY_BUILD_DIR": str(tmp_path / "build")}
    arguments = ["keras-corpus", "--models", "mlp", "--rounds", "2", "--seconds", "0.02", "--export-seconds", "0.02"]
    arguments += ["--fine-tune-epochs", "1"]
    result = run_module("benchmarks", *arguments, "--no-docs", env=env, warm=False, timeout=300)
    assert "| mlp |" in result.stdout, result.stdout

    report = json.loads((tmp_path / "reports" / "keras-corpus.json").read_text())
    assert Path(tmp_path / "reports" / "keras-corpus.png").stat().st_size > 1000
    assert report["report"] == "keras-corpus" and report["machine"]["cpu_count"] and report["rounds"] == 2
    (entry,) = report["models"]
    assert entry["model"] == "mlp" and "convert_error" not in entry and "variants_error" not in entry, entry
    assert positive(entry["convert_seconds"]) and positive(entry["variants_seconds"]) and positive(entry["onnx_bytes"])
    parity = entry["parity"]
    assert parity["samples"] == entry["rows"] == 48 and parity["identical_predictions"] is True
    assert isinstance(parity["max_abs_diff"], float) and 0 <= parity["max_abs_diff"] < 1e-3
    assert set(entry["variants"]) == {"fp32", "int8", "fp16", "pruned"} and "pruned_skipped" not in entry
    assert entry["chosen"] in entry["variants"] and entry["variants"][entry["chosen"]]["status"] == "accepted"
    for name, variant in entry["variants"].items():
        assert variant["status"] in ("accepted", "rejected") and positive(variant["file_bytes"]), name
        for batch in (1, 32):
            figures = variant[f"batch_{batch}"]
            assert positive(figures["rows_per_s"]) and len(figures["rows_per_s_rounds"]) == 2, (name, batch)
            assert all(positive(value) for value in figures["rows_per_s_rounds"]), (name, batch)
            if name != "fp32":
                assert positive(figures["vs_fp32"]) and len(figures["vs_fp32_rounds"]) == 2, (name, batch)


def test_unknown_models_are_refused_in_one_line(tmp_path):
    env = {"SLIPWAY_REPORTS_DIR": str(tmp_path / "reports"), "SLIPWAY_BUILD_DIR": str(tmp_path / "build")}
    result = run_module("benchmarks", "keras-corpus", "--models", "nope", "--no-docs", env=env, check=False)
    assert result.returncode == 2 and "unknown corpus models ['nope']" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr
