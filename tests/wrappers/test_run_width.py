"""Runs alone get the wide session, runs beside others the narrow one (`wrappers.running.width`): real sessions."""

from __future__ import annotations

import threading

import numpy as np

from engine.runner import SessionRunner
from slipway.runtime_settings import RuntimeSettings
from tests.graphs import WEIGHT, matmul_graph
from wrappers.running.width import WidthRunner, rebuilt, runner

FEEDS = {"x": np.arange(8, dtype=np.float32).reshape(2, 4)}


def _threads(part: SessionRunner) -> int:
    return part.session.get_session_options().intra_op_num_threads


def test_a_busy_width_under_the_lone_one_builds_two_sessions_else_one(tmp_path):
    graph = matmul_graph(tmp_path / "model.onnx")
    width = runner(graph, RuntimeSettings(intra_op_threads=2, busy_intra_op_threads=1))
    assert isinstance(width, WidthRunner) and [_threads(part) for part in width.parts()] == [2, 1]
    for config in (
        RuntimeSettings(intra_op_threads=2),
        RuntimeSettings(intra_op_threads=2, busy_intra_op_threads=0),
        RuntimeSettings(intra_op_threads=1, busy_intra_op_threads=1),
    ):
        single = runner(graph, config)
        assert isinstance(single, SessionRunner) and single.parts() == (single,)


def test_a_lone_session_built_already_is_kept_and_only_the_narrow_one_built(tmp_path):
    graph = matmul_graph(tmp_path / "model.onnx")
    built = runner(graph, RuntimeSettings(intra_op_threads=2))
    assert isinstance(built, SessionRunner)
    width = runner(graph, RuntimeSettings(intra_op_threads=2, busy_intra_op_threads=1), wide=built)
    assert isinstance(width, WidthRunner) and width.wide is built and _threads(width.narrow) == 1
    config = RuntimeSettings(intra_op_threads=2, busy_intra_op_threads=1)
    again = rebuilt(graph, config, width, keep_lone_session=True)  # from a WidthRunner: its wide part is the lone one
    assert isinstance(again, WidthRunner) and again.wide is built and again.narrow is not width.narrow
    fresh = rebuilt(graph, config, width, keep_lone_session=False)
    assert isinstance(fresh, WidthRunner) and fresh.wide is not built


def test_a_run_that_starts_while_another_is_in_flight_goes_narrow_and_both_answer_alike(tmp_path):
    width = runner(matmul_graph(tmp_path / "model.onnx"), RuntimeSettings(intra_op_threads=2, busy_intra_op_threads=1))
    assert isinstance(width, WidthRunner)
    went: list[str] = []
    in_flight, release = threading.Event(), threading.Event()
    wide_run, narrow_run = width.wide.run, width.narrow.run

    def held_wide(names, feeds):  # the lone run stays in flight until the second has run
        went.append("wide")
        in_flight.set()
        release.wait(10)
        return wide_run(names, feeds)

    def narrow(names, feeds):
        went.append("narrow")
        return narrow_run(names, feeds)

    width.wide.run, width.narrow.run = held_wide, narrow
    answers: list[np.ndarray] = []
    lone = threading.Thread(target=lambda: answers.append(width.run(["y"], FEEDS)[0]))
    lone.start()
    assert in_flight.wait(10)
    beside = width.run(["y"], FEEDS)[0]
    release.set()
    lone.join(10)
    assert went == ["wide", "narrow"]
    np.testing.assert_allclose(beside, FEEDS["x"] @ WEIGHT, rtol=1e-6)
    np.testing.assert_allclose(answers[0], beside, rtol=1e-6)
    width.wide.run = lambda names, feeds: (went.append("wide"), wide_run(names, feeds))[1]
    width.run(["y"], FEEDS)  # alone again: wide
    assert went == ["wide", "narrow", "wide"]
