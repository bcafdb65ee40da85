"""The load-test figure carries the SLO it was judged on: a labelled line at each limit on the axis that limit
bounds, all in a legend, and the load drawn over time as the steps it was (read from matplotlib's artists)."""

from __future__ import annotations

import pytest

from loadtest.plot import draw_load, limit_label, plot_load
from loadtest.steps import StepFigures
from slipway.slo import Slo


def _step(index: int, users: int, rps: float, p95: float, p99: float) -> StepFigures:
    return StepFigures(
        index=index,
        name=f"step {index + 1}",
        users=users,
        started_s=5.0 * index,
        duration_s=5.0,
        requests=int(rps * 5),
        failures=0,
        rps=rps,
        p50_ms=p95 / 2,
        p90_ms=p95 * 0.9,
        p95_ms=p95,
        p99_ms=p99,
    )


STEPS = [_step(0, 1, 180, 6, 9), _step(1, 2, 340, 7, 11), _step(2, 4, 610, 9, 15), _step(3, 8, 640, 19, 30)]
SLO = Slo(p50_ms=20, p95_ms=50, p99_ms=100, max_error_rate=0.001, min_rps=100)


def _lines_by_label(figure) -> dict[str, list]:
    found: dict[str, list] = {}
    for axis in figure.axes:
        for line in axis.get_lines():
            found.setdefault(line.get_label(), []).append((axis, line))
    return found


def _legend_texts(figure) -> list[set[str]]:
    return [{text.get_text() for text in axis.get_legend().get_texts()} for axis in figure.axes if axis.get_legend()]


@pytest.fixture
def figure():
    import matplotlib.pyplot as plt

    drawn = draw_load(STEPS, title="digits (rest, step load)", slo=SLO, saturation={"saturated": True, "users": 8, "rps": 640})
    yield drawn
    plt.close(drawn)


def test_each_limit_is_a_horizontal_line_at_its_value_on_the_axis_it_bounds(figure):
    lines = _lines_by_label(figure)
    for limit, value, unit in (("p95_ms", 50, "latency (ms)"), ("p99_ms", 100, "latency (ms)"), ("min_rps", 100, "requests/s")):
        drawn = lines[limit_label(limit, value)]
        assert drawn, limit
        for axis, line in drawn:
            assert list(line.get_ydata()) == [value, value]
            assert axis.get_ylabel() == unit
            low, high = axis.get_ylim()
            assert low <= value < high, f"{limit} {value} outside the visible {low}-{high}"
    assert not [label for label in lines if "p50" in label or "error" in label]  # not drawn: no axis for them


def test_every_panel_has_a_legend_naming_its_series_and_limits(figure):
    legends = _legend_texts(figure)
    assert len(legends) == 3
    by_load, over_time, latency = legends
    assert {
        "throughput (req/s)",
        "p95 latency (ms)",
        "p99 latency (ms)",
        "SLO p95 <= 50 ms",
        "SLO p99 <= 100 ms",
        "SLO min_rps >= 100 req/s",
        "saturation: 8 users, 640 req/s",
    } <= by_load
    assert {"users (the load applied)", "throughput (req/s)", "SLO min_rps >= 100 req/s"} <= over_time
    assert {"p95 latency (ms)", "p99 latency (ms)", "SLO p95 <= 50 ms", "SLO p99 <= 100 ms"} <= latency


def test_the_load_over_time_is_a_staircase_of_the_steps_users(figure):
    from matplotlib.patches import StepPatch

    [stairs] = [patch for axis in figure.axes for patch in axis.patches if isinstance(patch, StepPatch)]
    assert list(stairs.get_data().values) == [1, 2, 4, 8]
    assert list(stairs.get_data().edges) == [0, 5, 10, 15, 20]


def test_without_an_slo_nothing_claims_to_be_a_limit_and_a_limit_above_every_measurement_stays_visible():
    import matplotlib.pyplot as plt

    bare = draw_load(STEPS, title="no SLO")
    try:
        assert not [label for label in _lines_by_label(bare) if label.startswith("SLO")]
        assert len(_legend_texts(bare)) == 3
    finally:
        plt.close(bare)
    loose = draw_load(STEPS, title="loose", slo=Slo(p99_ms=400, min_rps=2000))
    try:
        for axis, line in (
            _lines_by_label(loose)[limit_label("p99_ms", 400)] + _lines_by_label(loose)[limit_label("min_rps", 2000)]
        ):
            assert line.get_ydata()[0] < axis.get_ylim()[1]
    finally:
        plt.close(loose)


def test_the_figure_is_written_as_a_png(tmp_path):
    path = tmp_path / "loadtest.png"
    plot_load(STEPS, path, title="digits", slo=SLO)
    assert path.read_bytes().startswith(b"\x89PNG")


def test_a_run_that_completed_no_step_still_gets_its_figure(tmp_path):
    """A server that never answered leaves no step: the report's plot must not fail the run (it names the server)."""
    path = tmp_path / "empty.png"
    plot_load([], path, title="never answered", slo=Slo(p95_ms=50, min_rps=100))
    assert path.stat().st_size > 0
