"""Merging requests into one run: each request gets its own rows back, nothing waits when idle."""

import asyncio
import threading
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.session import create_session
from engine.tensor_specs import TensorSpec
from slipway.runtime_settings import RuntimeSettings
from tests.graphs import WEIGHT, matmul_graph
from wrappers.running.batching import BatchingConfigError, RowBatcher, fixed_batch_rows, gpu_buckets, run_in_buckets


@pytest.fixture
def session(tmp_path):
    return create_session(matmul_graph(tmp_path / "model.onnx"), RuntimeSettings())


@pytest.fixture(scope="module")
def matmul_session(tmp_path_factory):
    return create_session(matmul_graph(tmp_path_factory.mktemp("graphs") / "model.onnx"), RuntimeSettings())


class GatedRuns:
    """Runs the session, but the first `gated` runs wait for `release`: requests queue up behind them."""

    def __init__(self, session, gated: int):
        self._session = session
        self._gated = gated
        self._lock = threading.Lock()
        self.started = threading.Semaphore(0)
        self.release = threading.Event()

    def __call__(self, feeds, rows):
        assert next(iter(feeds.values())).shape[0] == rows
        with self._lock:
            gated, self._gated = self._gated > 0, self._gated - 1
        if gated:
            self.started.release()
            self.release.wait(timeout=10)
        return self._session.run(None, feeds)


async def _submit_behind_busy_runs(batcher, runs: GatedRuns, first: list, rest: list):
    """Submit `first` (one request per run slot), wait until each is running, queue `rest`, then release."""
    loop = asyncio.get_running_loop()
    started = []
    for x in first:  # one at a time: each must start a run of its own
        started.append(asyncio.ensure_future(batcher.submit({"x": x}, len(x))))
        assert await loop.run_in_executor(None, runs.started.acquire, True, 10), "a run did not start"
    queued = [asyncio.ensure_future(batcher.submit({"x": x}, len(x))) for x in rest]
    await asyncio.sleep(0)  # let every queued request reach the queue
    runs.release.set()
    return await asyncio.gather(*started, *queued, return_exceptions=True)


@pytest.fixture
def batchers():
    made = []

    def make(run, max_rows, max_runs=1, **options):
        stats = []
        made.append(RowBatcher(run, max_rows=max_rows, max_runs=max_runs, on_run=stats.append, **options))
        return made[-1], stats

    yield make
    for batcher in made:
        batcher.close()


def test_requests_queued_behind_a_run_are_merged_and_split_back(session, batchers):
    runs = GatedRuns(session, gated=1)
    batcher, stats = batchers(runs, max_rows=64)
    requests = [np.full((rows, 4), float(index), dtype=np.float32) for index, rows in enumerate([1, 3, 2, 5, 1, 4])]
    results = asyncio.run(_submit_behind_busy_runs(batcher, runs, requests[:1], requests[1:]))
    for x, (y,) in zip(requests, results):
        np.testing.assert_allclose(y, x @ WEIGHT)
    # The first request runs alone at once (nothing waits for a window); the rest queued behind it run together.
    assert [run.rows for run in stats] == [1, 15]
    assert all(wait >= 0 for run in stats for wait in run.queue_seconds)


def test_an_idle_batcher_runs_a_request_at_once(session, batchers):
    batcher, stats = batchers(GatedRuns(session, gated=0), max_rows=64)
    x = np.ones((2, 4), np.float32)
    (y,) = asyncio.run(batcher.submit({"x": x}, 2))
    np.testing.assert_allclose(y, x @ WEIGHT)
    assert [run.rows for run in stats] == [2]


def test_run_threads_carry_their_name_in_the_os(session):
    """`top -H` and the benchmark's CPU accounting (by /proc/<pid>/task/*/comm) see the run threads."""
    native_names = []

    def run(feeds, rows):
        native_names.append(Path(f"/proc/self/task/{threading.get_native_id()}/comm").read_text().strip())
        return session.run(None, feeds)

    batcher = RowBatcher(run, max_rows=4, max_runs=2, thread_name="ort-digits")
    try:
        asyncio.run(batcher.submit({"x": np.ones((1, 4), np.float32)}, 1))
    finally:
        batcher.close()
    assert native_names and native_names[0] in {"ort-digits_0", "ort-digits_1"}


def test_every_run_thread_warms_up_before_the_batcher_is_returned(session):
    """On a GPU first runs are slow per thread: each run slot warms up on its own thread, before serving."""
    warmed = []
    batcher = RowBatcher(
        lambda feeds, rows: session.run(None, feeds),
        max_rows=4,
        max_runs=3,
        thread_name="ort-w",
        warm_up=lambda: warmed.append(threading.current_thread().name),
    )
    try:
        assert sorted(warmed) == ["ort-w_0", "ort-w_1", "ort-w_2"]
        (y,) = asyncio.run(batcher.submit({"x": np.ones((1, 4), np.float32)}, 1))
        np.testing.assert_allclose(y, np.ones((1, 4)) @ WEIGHT)
    finally:
        batcher.close()

    def failing_warm_up():
        raise RuntimeError("warm-up at batch size 8 failed")

    before = threading.active_count()
    with pytest.raises(RuntimeError, match="batch size 8 failed"):
        RowBatcher(lambda feeds, rows: [], max_rows=4, max_runs=2, warm_up=failing_warm_up)
    assert threading.active_count() == before  # its run threads were stopped


def test_with_two_run_slots_two_requests_start_at_once_and_the_rest_merge(session, batchers):
    runs = GatedRuns(session, gated=2)
    batcher, stats = batchers(runs, max_rows=64, max_runs=2)
    requests = [np.full((rows, 4), float(rows), dtype=np.float32) for rows in (1, 2, 3, 4, 5)]
    results = asyncio.run(_submit_behind_busy_runs(batcher, runs, requests[:2], requests[2:]))
    for x, (y,) in zip(requests, results):
        np.testing.assert_allclose(y, x @ WEIGHT)
    # 1 and 2 ran at once, side by side; 3, 4 and 5 queued behind them and were merged into one run.
    assert sorted(run.rows for run in stats) == [1, 2, 12]


def test_runs_never_exceed_max_rows(session, batchers):
    runs = GatedRuns(session, gated=1)
    batcher, stats = batchers(runs, max_rows=4)
    requests = [np.ones((rows, 4), np.float32) for rows in (1, 3, 2, 2)]
    asyncio.run(_submit_behind_busy_runs(batcher, runs, requests[:1], requests[1:]))
    assert [run.rows for run in stats] == [1, 3, 4]


def test_a_failing_run_fails_only_its_own_requests(session, batchers):
    runs = GatedRuns(session, gated=1)
    batcher, _ = batchers(runs, max_rows=1)
    bad = np.ones((1, 5), np.float32)  # ONNX Runtime refuses the shape
    bad_result, good_result = asyncio.run(_submit_behind_busy_runs(batcher, runs, [bad], [np.ones((1, 4), np.float32)]))
    assert isinstance(bad_result, Exception) and "x" in str(bad_result)
    np.testing.assert_allclose(good_result[0], np.ones((1, 4)) @ WEIGHT)


class NegativeInput(ValueError):
    """What a graph raises for one request's bad values (ONNX Runtime: a Gather index out of range)."""


def refusing_negatives(runs: GatedRuns, error: type[Exception] = NegativeInput):
    def run(feeds, rows):
        if (feeds["x"] < 0).any():
            raise error("x holds a negative value")
        return runs(feeds, rows)

    return run


def test_a_bad_request_merged_with_good_ones_fails_alone(session, batchers):
    runs = GatedRuns(session, gated=1)
    batcher, stats = batchers(refusing_negatives(runs), max_rows=64, input_errors=(NegativeInput,))
    requests = [np.full((rows, 4), value, dtype=np.float32) for rows, value in [(1, 1.0), (2, 2.0), (1, -1.0), (3, 3.0)]]
    first, good, bad, other = asyncio.run(_submit_behind_busy_runs(batcher, runs, requests[:1], requests[1:]))
    for x, result in ((requests[0], first), (requests[1], good), (requests[3], other)):
        np.testing.assert_allclose(result[0], x @ WEIGHT)
    assert isinstance(bad, NegativeInput)
    # The merged run of the three queued requests failed; each ran again alone, the bad one failing.
    assert [run.rows for run in stats] == [1, 2, 3]


def test_other_errors_of_a_merged_run_fail_all_its_requests_at_once(session, batchers):
    runs = GatedRuns(session, gated=1)
    batcher, stats = batchers(refusing_negatives(runs, RuntimeError), max_rows=64, input_errors=(NegativeInput,))
    requests = [np.full((1, 4), value, dtype=np.float32) for value in (1.0, 2.0, -1.0)]
    _, good, bad = asyncio.run(_submit_behind_busy_runs(batcher, runs, requests[:1], requests[1:]))
    assert isinstance(good, RuntimeError) and good is bad  # not rerun: one error, not one per request
    assert [run.rows for run in stats] == [1]


def test_closing_fails_what_still_waits_and_refuses_new_requests(session):
    runs = GatedRuns(session, gated=1)
    batcher = RowBatcher(runs, max_rows=8)

    async def main():
        loop = asyncio.get_running_loop()
        running = asyncio.ensure_future(batcher.submit({"x": np.ones((1, 4), np.float32)}, 1))
        assert await loop.run_in_executor(None, runs.started.acquire, True, 10), "the run did not start"
        waiting = asyncio.ensure_future(batcher.submit({"x": np.ones((1, 4), np.float32)}, 1))
        await asyncio.sleep(0)
        loop.call_later(0.05, runs.release.set)
        await loop.run_in_executor(None, batcher.close)  # returns once the running run has ended
        with pytest.raises(RuntimeError, match="unloaded"):
            await batcher.submit({"x": np.ones((1, 4), np.float32)}, 1)
        return await asyncio.gather(running, waiting, return_exceptions=True)

    done, failed = asyncio.run(main())
    np.testing.assert_allclose(done[0], np.ones((1, 4)) @ WEIGHT)
    assert isinstance(failed, RuntimeError) and "unloaded before this request ran" in str(failed)


def test_fixed_batch_graphs_run_any_row_count_in_padded_chunks(tmp_path):
    session = create_session(matmul_graph(tmp_path / "fixed.onnx", batch=2), RuntimeSettings())
    x = np.arange(20, dtype=np.float32).reshape(5, 4)
    (y,) = run_in_buckets(lambda feeds: session.run(None, feeds), {"x": x}, 5, [2])
    np.testing.assert_allclose(y, x @ WEIGHT)


def test_runs_are_padded_up_to_buckets_and_long_requests_go_in_chunks_of_the_largest(tmp_path):
    session = create_session(matmul_graph(tmp_path / "model.onnx"), RuntimeSettings())
    shapes = []

    def run(feeds):
        shapes.append(feeds["x"].shape[0])
        return session.run(None, feeds)

    x = np.arange(44, dtype=np.float32).reshape(11, 4)
    for rows, runs in [(3, [4]), (4, [4]), (11, [8, 4]), (1, [1]), (0, [1])]:
        shapes.clear()
        (y,) = run_in_buckets(run, {"x": x[:rows]}, rows, [1, 4, 8])
        assert shapes == runs
        np.testing.assert_allclose(y, x[:rows] @ WEIGHT)
    with pytest.raises(RuntimeError, match=r"set parameters.extra.batch_buckets to \[\]"):
        run_in_buckets(lambda feeds: [np.float32(1.0)], {"x": x[:3]}, 3, [4])


@settings(max_examples=60, deadline=None)
@given(rows=st.integers(1, 40), buckets=st.sets(st.integers(1, 16), min_size=1, max_size=5))
def test_any_row_count_runs_only_at_bucket_sizes_and_gets_its_own_rows_back(matmul_session, rows, buckets):
    buckets = sorted(buckets)
    shapes = []

    def run(feeds):
        shapes.append(feeds["x"].shape[0])
        return matmul_session.run(None, feeds)

    x = np.random.default_rng(rows).normal(size=(rows, 4)).astype(np.float32)
    (y,) = run_in_buckets(run, {"x": x}, rows, buckets)
    assert set(shapes) <= set(buckets) and sum(shapes) >= rows and len(shapes) == -(-rows // buckets[-1])
    np.testing.assert_allclose(y, x @ WEIGHT, rtol=1e-5, atol=1e-5)


def test_gpu_buckets_are_powers_of_two_up_to_the_merge_limit_or_32():
    assert gpu_buckets(1) == [1, 2, 4, 8, 16, 32]
    assert gpu_buckets(48) == [1, 2, 4, 8, 16, 32, 48]
    assert gpu_buckets(64) == [1, 2, 4, 8, 16, 32, 64]


def test_graphs_that_cannot_be_merged_are_refused_with_what_to_set():
    assert fixed_batch_rows([TensorSpec("x", "FP32", (-1, 4))], [TensorSpec("y", "FP32", (-1, 3))]) is None
    assert fixed_batch_rows([TensorSpec("x", "FP32", (2, 4))], [TensorSpec("y", "FP32", (-1, 3))]) == 2
    with pytest.raises(BatchingConfigError, match="scalar with no batch dimension.*max_batch_rows to 1"):
        fixed_batch_rows([TensorSpec("x", "FP32", ())], [])
    with pytest.raises(BatchingConfigError, match=r"disagree on the batch size \(\[1, 2\]\)"):
        fixed_batch_rows([TensorSpec("x", "FP32", (1, 4))], [TensorSpec("y", "FP32", (2, 3))])


def test_merged_runs_are_padded_to_a_bucket_in_one_copy_into_a_buffer_the_run_thread_keeps(session, batchers):
    seen = []

    def run(feeds, rows):
        x = feeds["x"]
        seen.append((rows, x.shape[0], x.__array_interface__["data"][0], x[rows - 1 :].copy()))
        return session.run(None, feeds)

    runs = GatedRuns(session, gated=1)

    def gated_then_recorded(feeds, rows):
        runs(feeds, rows)
        return run(feeds, rows)

    batcher, stats = batchers(gated_then_recorded, max_rows=8, buckets=[1, 2, 4, 8])
    rng = np.random.default_rng(0)
    first = [rng.uniform(-1, 1, (1, 4)).astype(np.float32)]
    rest = [rng.uniform(-1, 1, (rows, 4)).astype(np.float32) for rows in (2, 1, 2)]  # 5 rows: padded to 8
    answers = asyncio.run(_submit_behind_busy_runs(batcher, runs, first, rest))
    for x, answer in zip(first + rest, answers):
        np.testing.assert_allclose(answer[0], x @ WEIGHT, rtol=1e-5)  # each request its own rows, padding dropped
    assert [(rows, padded) for rows, padded, _, _ in seen] == [(1, 1), (8, 8)]
    assert not seen[1][3][1:].any()  # the 3 padding rows are zeros
    assert [stat.rows for stat in stats] == [1, 5]  # the metrics count the requests' rows, not the padding
    later = [rng.uniform(-1, 1, (3, 4)).astype(np.float32)]  # alone, 3 rows: padded to 4 in the thread's buffer

    async def again():
        return await batcher.submit({"x": later[0]}, 3)

    np.testing.assert_allclose(asyncio.run(again())[0], later[0] @ WEIGHT, rtol=1e-5)
    np.testing.assert_allclose(asyncio.run(again())[0], later[0] @ WEIGHT, rtol=1e-5)
    assert [padded for _, padded, _, _ in seen[-2:]] == [4, 4]
    assert seen[-1][2] == seen[-2][2]  # the same buffer, not a fresh allocation per run
