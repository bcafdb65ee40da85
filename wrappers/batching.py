"""Merge requests that queue behind a busy session into one run, with no waiting window.

MLServer's adaptive batching waits up to `max_batch_time` for a batch to fill, so at low
load every request pays that whole delay. Here an idle session runs a request at once;
only requests that arrive while every run slot is busy wait, and they go together into
the next run (up to `max_rows` rows). Under load batches form by themselves; at low load
nothing waits. By default one run at a time (ONNX Runtime spreads a run over the cores);
with several run slots and one intra-op thread each, runs proceed side by side and a run
stalled by the server's own threads no longer holds up the others.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass, field

import numpy as np

Feeds = dict[str, np.ndarray]
RunFn = Callable[[Feeds, int], list[np.ndarray]]


@dataclass
class _Pending:
    feeds: Feeds
    rows: int
    future: asyncio.Future
    queued_at: float = field(default_factory=time.perf_counter)


@dataclass
class BatchStats:
    """What one run did, for the metrics: its rows and each request's wait."""

    rows: int
    run_seconds: float
    queue_seconds: list[float]


class RowBatcher:
    """Run `run(feeds, rows)` on `executor`, at most `max_runs` at a time, merging what queued meanwhile.

    `run` returns the outputs for all rows (each output's first axis is the row axis);
    every request gets back its own rows. Requests whose non-row dimensions or dtypes
    differ from the head of the queue are left for a later run instead of being merged.
    """

    def __init__(
        self,
        run: RunFn,
        executor: Executor,
        *,
        max_rows: int,
        max_runs: int = 1,
        on_run: Callable[[BatchStats], None] | None = None,
    ):
        self._run = run
        self._executor = executor
        self._max_rows = max_rows
        self._max_runs = max_runs
        self._on_run = on_run
        self._queue: deque[_Pending] = deque()
        self._running = 0

    async def submit(self, feeds: Feeds, rows: int) -> list[np.ndarray]:
        """The outputs for these rows, once a run that includes them has finished."""
        future = asyncio.get_running_loop().create_future()
        self._queue.append(_Pending(feeds, rows, future))
        if self._running < self._max_runs:
            self._start_next()
        return await future

    def close(self) -> None:
        """Fail whatever still waits: the model is being unloaded."""
        while self._queue:
            item = self._queue.popleft()
            if not item.future.done():
                item.future.set_exception(RuntimeError("the model was unloaded before this request ran"))

    def _start_next(self) -> None:
        while self._queue and self._queue[0].future.done():  # cancelled by a client that went away
            self._queue.popleft()
        if not self._queue:
            return
        batch = [self._queue.popleft()]
        rows = batch[0].rows
        while self._queue and rows + self._queue[0].rows <= self._max_rows and _mergeable(batch[0], self._queue[0]):
            item = self._queue.popleft()
            if not item.future.done():
                batch.append(item)
                rows += item.rows
        self._running += 1
        run = asyncio.get_running_loop().run_in_executor(self._executor, self._run_batch, batch, rows)
        run.add_done_callback(lambda done: self._finish(batch, done))

    def _run_batch(self, batch: list[_Pending], rows: int) -> list[list[np.ndarray]]:
        started = time.perf_counter()
        if len(batch) == 1:
            feeds = batch[0].feeds
        else:
            feeds = {name: np.concatenate([item.feeds[name] for item in batch]) for name in batch[0].feeds}
        outputs = self._run(feeds, rows)
        finished = time.perf_counter()
        if self._on_run is not None:
            self._on_run(BatchStats(rows, finished - started, [started - item.queued_at for item in batch]))
        if len(batch) == 1:
            return [outputs]
        for output in outputs:
            if output.ndim == 0 or output.shape[0] != rows:
                raise RuntimeError(
                    f"an output of shape {list(output.shape)} does not have one row per input row ({rows}); "
                    "this model cannot merge requests: set max_batch_rows to 1"
                )
        bounds = np.cumsum([0] + [item.rows for item in batch])
        return [[output[start:stop] for output in outputs] for start, stop in zip(bounds[:-1], bounds[1:])]

    def _finish(self, batch: list[_Pending], done: asyncio.Future) -> None:
        self._running -= 1
        error = RuntimeError("the run was cancelled (the model is unloading)") if done.cancelled() else done.exception()
        results = None if error else done.result()
        for index, item in enumerate(batch):
            if item.future.done():
                continue
            if error:
                item.future.set_exception(error)
            else:
                item.future.set_result(results[index])
        self._start_next()


def _mergeable(head: _Pending, other: _Pending) -> bool:
    """Same inputs with the same dtypes and the same non-row dimensions: concatenable on axis 0."""
    if head.feeds.keys() != other.feeds.keys():
        return False
    return all(
        head.feeds[name].dtype == other.feeds[name].dtype and head.feeds[name].shape[1:] == other.feeds[name].shape[1:]
        for name in head.feeds
    )


class BatchingConfigError(ValueError):
    """The graph's shapes do not allow merging requests; the message says what to set instead."""


_TURN_OFF = "set max_batch_size to 1 in model-settings.json and parameters.extra.max_batch_rows to 1"


def fixed_batch_rows(inputs: list, outputs: list) -> int | None:
    """The graph's fixed batch size (None when dynamic), for graphs whose requests may be merged.

    `inputs` and `outputs` are `TensorSpec`s (-1 marks a dynamic dimension). A scalar has no
    row axis to merge on, and inputs or outputs that disagree on a fixed first dimension
    cannot be split back per request: both are refused.
    """
    for spec in [*inputs, *outputs]:
        if not spec.shape:
            raise BatchingConfigError(f"{spec.name!r} is a scalar with no batch dimension, so requests cannot be merged: {_TURN_OFF}")
    fixed = {spec.shape[0] for spec in [*inputs, *outputs] if spec.shape[0] != -1}
    if len(fixed) > 1:
        raise BatchingConfigError(
            f"inputs and outputs disagree on the batch size ({sorted(fixed)}), so requests cannot be merged: {_TURN_OFF}"
        )
    return fixed.pop() if fixed else None


def run_in_fixed_batches(run: Callable[[Feeds], list[np.ndarray]], feeds: Feeds, rows: int, size: int) -> list[np.ndarray]:
    """Run a graph whose batch size is fixed at `size` over any number of rows: chunks, the last one zero-padded."""
    chunks = []
    for start in range(0, rows, size):
        count = min(size, rows - start)
        chunk = {name: _pad_rows(array[start : start + count], size) for name, array in feeds.items()}
        chunks.append([output[:count] for output in run(chunk)])
    return [np.concatenate(parts) for parts in zip(*chunks)]


def _pad_rows(array: np.ndarray, size: int) -> np.ndarray:
    if len(array) == size:
        return array
    return np.concatenate([array, np.zeros((size - len(array), *array.shape[1:]), dtype=array.dtype)])
