"""Merging requests into one run: each request gets its own rows back, nothing waits when idle."""

import asyncio
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from tests.wrappers.graphs import WEIGHT, matmul_graph
from wrappers.batching import BatchingConfigError, RowBatcher, fixed_batch_rows, run_in_fixed_batches
from wrappers.session import TensorSpec, create_session
from wrappers.settings import RuntimeSettings


@pytest.fixture
def session(tmp_path):
    return create_session(matmul_graph(tmp_path / "model.onnx"), RuntimeSettings())


def _batcher(session, runs, max_rows, max_runs=1):
    def run(feeds, rows):
        assert next(iter(feeds.values())).shape[0] == rows
        return session.run(None, feeds)

    return RowBatcher(run, ThreadPoolExecutor(max_runs), max_rows=max_rows, max_runs=max_runs, on_run=runs.append)


def test_requests_queued_behind_a_run_are_merged_and_split_back(session):
    runs = []
    batcher = _batcher(session, runs, max_rows=64)
    requests = [np.full((rows, 4), float(index), dtype=np.float32) for index, rows in enumerate([1, 3, 2, 5, 1, 4])]

    async def main():
        return await asyncio.gather(*(batcher.submit({"x": x}, len(x)) for x in requests))

    results = asyncio.run(main())
    for x, (y,) in zip(requests, results):
        np.testing.assert_allclose(y, x @ WEIGHT)
    # The first request runs alone at once (nothing waits for a window); the rest queued behind it run together.
    assert [stats.rows for stats in runs] == [1, 15]
    assert all(wait >= 0 for stats in runs for wait in stats.queue_seconds)


def test_with_two_run_slots_two_requests_start_at_once_and_the_rest_merge(session):
    runs = []
    batcher = _batcher(session, runs, max_rows=64, max_runs=2)
    requests = [np.full((rows, 4), float(rows), dtype=np.float32) for rows in (1, 2, 3, 4, 5)]

    async def main():
        return await asyncio.gather(*(batcher.submit({"x": x}, len(x)) for x in requests))

    for x, (y,) in zip(requests, asyncio.run(main())):
        np.testing.assert_allclose(y, x @ WEIGHT)
    assert sorted(stats.rows for stats in runs[:2]) == [1, 2] and sum(stats.rows for stats in runs) == 15
    assert len(runs) <= 4  # 3, 4 and 5 queued behind the two running ones: merged, not run one by one


def test_runs_never_exceed_max_rows(session):
    runs = []
    batcher = _batcher(session, runs, max_rows=4)

    async def main():
        first = batcher.submit({"x": np.ones((1, 4), np.float32)}, 1)
        others = [batcher.submit({"x": np.ones((rows, 4), np.float32)}, rows) for rows in (3, 2, 2)]
        return await asyncio.gather(first, *others)

    asyncio.run(main())
    assert [stats.rows for stats in runs] == [1, 3, 4]


def test_a_failing_run_fails_only_its_own_requests(session):
    runs = []
    batcher = _batcher(session, runs, max_rows=1)

    async def main():
        bad = batcher.submit({"x": np.ones((1, 5), np.float32)}, 1)  # ONNX Runtime refuses the shape
        good = batcher.submit({"x": np.ones((1, 4), np.float32)}, 1)
        return await asyncio.gather(bad, good, return_exceptions=True)

    bad, good = asyncio.run(main())
    assert isinstance(bad, Exception) and "x" in str(bad)
    np.testing.assert_allclose(good[0], np.ones((1, 4)) @ WEIGHT)


def test_fixed_batch_graphs_run_any_row_count_in_padded_chunks(tmp_path):
    session = create_session(matmul_graph(tmp_path / "fixed.onnx", batch=2), RuntimeSettings())
    x = np.arange(20, dtype=np.float32).reshape(5, 4)
    (y,) = run_in_fixed_batches(lambda feeds: session.run(None, feeds), {"x": x}, 5, 2)
    np.testing.assert_allclose(y, x @ WEIGHT)


def test_graphs_that_cannot_be_merged_are_refused_with_what_to_set():
    assert fixed_batch_rows([TensorSpec("x", "FP32", (-1, 4))], [TensorSpec("y", "FP32", (-1, 3))]) is None
    assert fixed_batch_rows([TensorSpec("x", "FP32", (2, 4))], [TensorSpec("y", "FP32", (-1, 3))]) == 2
    with pytest.raises(BatchingConfigError, match="scalar with no batch dimension.*max_batch_rows to 1"):
        fixed_batch_rows([TensorSpec("x", "FP32", ())], [])
    with pytest.raises(BatchingConfigError, match=r"disagree on the batch size \(\[1, 2\]\)"):
        fixed_batch_rows([TensorSpec("x", "FP32", (1, 4))], [TensorSpec("y", "FP32", (2, 3))])
