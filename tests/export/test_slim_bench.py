"""`python -m export bench-slim`: the MobileNetV2 goal's benchmark, its plumbing run end to end on a tiny model.

MobileNetV2 itself takes a minute and the bench lock (`make bench-slim`); here a small
residual CNN with batch norm and a depthwise convolution, saved as a user would, goes
through the same command: slimmed, converted, checked, timed in two rounds, and written
as JSON, PNG and the docs page's section.
"""

from __future__ import annotations

import json

import pytest

from slipway.cli import UserError

pytestmark = pytest.mark.slow  # converts with tf2onnx: TensorFlow's import alone takes seconds

SECTION = "<!-- bench-slim:start -->\nold\n<!-- bench-slim:end -->\n"


def tiny_residual_cnn():
    """16x16x3 -> conv + BN, depthwise, an addition tying two convolutions, pooling, softmax: every kind of group."""
    import keras

    keras.utils.set_random_seed(0)
    inputs = keras.Input((16, 16, 3), name="pixels")
    x = keras.layers.ReLU(name="stem_relu")(
        keras.layers.BatchNormalization(name="stem_bn")(keras.layers.Conv2D(8, 3, padding="same", name="stem")(inputs))
    )
    y = keras.layers.DepthwiseConv2D(3, padding="same", name="dw")(x)
    y = keras.layers.Conv2D(8, 1, name="project")(y)
    x = keras.layers.Add(name="residual")([x, y])
    outputs = keras.layers.Dense(4, activation="softmax", name="out")(keras.layers.GlobalAveragePooling2D(name="pool")(x))
    return keras.Model(inputs, outputs, name="tiny")


@pytest.fixture
def bench_slim(monkeypatch, tmp_path):
    """`python -m export bench-slim ...` in this process, reports written under tmp_path."""
    from export.cli import main

    monkeypatch.setattr("slipway.reports.REPORTS_DIR", tmp_path / "reports")
    return lambda *args: main(["bench-slim", *map(str, args)])


def test_a_model_and_its_half_width_copy_are_checked_timed_and_written(bench_slim, tmp_path):
    tiny_residual_cnn().save(tmp_path / "tiny.keras")
    page = tmp_path / "benchmarks.md"
    page.write_text("# Benchmarks\n" + SECTION + "after\n")
    assert bench_slim(tmp_path / "tiny.keras", "--batch-size", "4", "--rounds", "2", "--calls", "1", "--page", page) == 0
    report = json.loads((tmp_path / "reports" / "bench-slim.json").read_text())
    assert report["full"]["conv_filters"] == 24 and report["slim"]["conv_filters"] == 12  # stem, depthwise, project: 8 -> 4 each
    assert report["slim"]["parameters"] < report["full"]["parameters"]
    assert report["full"]["graph_valid"] and report["slim"]["graph_valid"] and report["same_output_shapes"]
    assert report["slim"]["output_shapes"] == {"output_0": [4, 4]}
    assert len(report["throughput_ratio_per_round"]) == 2 and report["throughput_ratio"] > 0
    assert report["throughput_ratio_spread"]["min"] <= report["throughput_ratio"] <= report["throughput_ratio_spread"]["max"]
    assert report["met"] == (report["throughput_ratio"] >= 1.6)
    assert (tmp_path / "reports" / "bench-slim.png").read_bytes().startswith(b"\x89PNG")
    text = page.read_text()
    assert text.startswith("# Benchmarks\n<!-- bench-slim:start -->\nMeasured by `make bench-slim`") and text.endswith(
        "<!-- bench-slim:end -->\nafter\n"
    )
    assert "| convolution channels | 24 | 12 | 0.50 |" in text


def test_requests_that_cannot_work_are_refused_in_one_line(bench_slim, tmp_path):
    import keras

    tiny_residual_cnn().save(tmp_path / "tiny.keras")
    inputs = keras.Input((5,), name="row")
    keras.Model(inputs, keras.layers.Dense(2, name="out")(inputs)).save(tmp_path / "rows.keras")
    (tmp_path / "plain.md").write_text("no markers\n")
    for args, expected in [
        ((tmp_path / "rows.keras", "--no-docs"), "is not a one-input Keras image model"),
        ((tmp_path / "tiny.keras", "--fraction", "1", "--no-docs"), "--fraction must be between 0 and 1"),
        ((tmp_path / "tiny.keras", "--rounds", "1", "--no-docs"), "--rounds at least 2"),
        (
            (tmp_path / "tiny.keras", "--batch-size", "2", "--rounds", "2", "--calls", "1", "--page", tmp_path / "plain.md"),
            "has no <!-- bench-slim:start --> / <!-- bench-slim:end --> markers",
        ),
    ]:
        with pytest.raises(UserError) as caught:
            bench_slim(*args)
        assert expected in str(caught.value) and "\n" not in str(caught.value), str(caught.value)
        assert not (tmp_path / "reports").exists()  # refused before any work: nothing half-written
    assert (tmp_path / "plain.md").read_text() == "no markers\n"
