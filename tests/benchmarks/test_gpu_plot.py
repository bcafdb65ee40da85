"""The GPU benchmark's figure: a linear axis (values read against each other), one labelled bar per measured
configuration, and every TensorRT configuration present: measured, or a slot marked "not measured" with why.
Read from matplotlib's artists, on payloads shaped as `make bench-gpu` writes them (no GPU needed)."""

from __future__ import annotations

import pytest

from benchmarks.gpu import NOT_MEASURED, draw, plot
from engine.providers import CPU, CUDA, TENSORRT


def _measured(provider: str, precision: str, batch: int, rows_per_s: float, **more) -> dict:
    return {
        "provider": provider,
        "precision": precision,
        "batch": batch,
        "io_binding": "off",
        "cuda_graph": False,
        "status": "measured",
        "rows_per_s": rows_per_s,
        **more,
    }


def _payload(*extra: dict) -> dict:
    rows = [
        _measured(provider, "fp32", batch, rate * batch) for provider, rate in ((CPU, 300.0), (CUDA, 1000.0)) for batch in (1, 32)
    ]
    return {"gpu": "test GPU", "rows": [*rows, *extra]}


def _marked(axis) -> list[str]:
    return [text.get_text() for text in axis.texts if text.get_gid() == "not-measured"]


@pytest.fixture
def close():
    import matplotlib.pyplot as plt

    figures = []
    yield figures.append
    for figure in figures:
        plt.close(figure)


def test_rows_per_second_on_a_linear_axis_one_labelled_bar_per_configuration(close):
    figure = draw(_payload(_measured(TENSORRT, "fp16", 1, 2500.0), _measured(TENSORRT, "fp16", 32, 40000.0)))
    close(figure)
    assert len(figure.axes) == 2
    for axis, batch in zip(figure.axes, (1, 32)):
        assert axis.get_yscale() == "linear"
        assert axis.get_title().startswith(f"batch {batch} ")
        heights = [bar.get_height() for bar in axis.patches]
        assert heights == [300.0 * batch, 1000.0 * batch, (2500.0, 40000.0)[batch == 32]]
        assert [label.get_text().split("\n")[0] for label in axis.get_xticklabels()] == ["CPU", "CUDA", "TensorRT"]
        assert {text.get_text() for text in axis.texts} == {f"{height:,.0f}" for height in heights}
        assert axis.get_ylim()[1] > max(heights)
        assert {text.get_text() for text in axis.get_legend().get_texts()} == {"CPU", "CUDA", "TensorRT"}


def test_a_tensorrt_that_fell_back_is_a_marked_slot_in_every_batch(close):
    fell_back = [
        {
            "provider": TENSORRT,
            "precision": precision,
            "cuda_graph": False,
            "status": "fell back",
            "reason": "TensorRT libraries not found",
            "providers_used": [CPU],
        }
        for precision in ("fp32", "int8")
    ]
    figure = draw(_payload(*fell_back))
    close(figure)
    for axis in figure.axes:
        labels = [label.get_text() for label in axis.get_xticklabels()]
        assert labels[-2:] == ["TensorRT\nfp32", "TensorRT\nint8"]
        assert _marked(axis) == [f"{NOT_MEASURED} (fell back)"] * 2
        assert [bar.get_height() for bar in axis.patches][-2:] == [0.0, 0.0]


def test_a_report_without_tensorrt_rows_says_tensorrt_was_not_measured(close, tmp_path):
    figure = draw(_payload())
    close(figure)
    for axis in figure.axes:
        assert axis.get_xticklabels()[-1].get_text() == "TensorRT" and _marked(axis) == [NOT_MEASURED]
    path = tmp_path / "gpu.png"
    plot(_payload(), path)
    assert path.read_bytes().startswith(b"\x89PNG")
