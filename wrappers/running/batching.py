"""Merge requests that queue behind a busy session into one run, with no waiting window.

MLServer's adaptive batching waits up to `max_batch_time` for a batch to fill, so at low
load every request pays that whole delay. Here an idle session runs a request at once;
only requests that arrive while every run slot is busy wait, and they go together into
the next run (up to `max_rows` rows). Under load batches form by themselves; at low load
nothing waits. By default one run at a time (ONNX Runtime spreads a run over the cores);
with several run slots and one intra-op thread each, runs proceed side by side and a run
stalled by the server's own threads no longer holds up the others.

Each run slot is a thread of its own that takes its next batch from the queue itself as
soon as a run ends. Handing that choice to the event loop instead (a callback per run)
left the session idle until the loop got round to it, behind every request it was
decoding or answering (docs/internals.md, "The figures behind the modules").
"""

from __future__ import annotations

import asyncio
import ctypes
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

# The padding plans live in `wrappers.running.planning`; re-exported for the batcher's callers.
from wrappers.operations.metrics import BatchStats
from wrappers.running.planning import GPU_LARGEST_BUCKET as GPU_LARGEST_BUCKET
from wrappers.running.planning import BatchingConfigError as BatchingConfigError
from wrappers.running.planning import bucket_chunks, bucket_for
from wrappers.running.planning import fixed_batch_rows as fixed_batch_rows
from wrappers.running.planning import gpu_buckets as gpu_buckets

Feeds = dict[str, np.ndarray]
RunFn = Callable[[Feeds, int], list[np.ndarray]]
# Per request its outputs or its own error; or one error for the whole batch.
Results = list[list[np.ndarray] | BaseException] | BaseException
_JOIN_TIMEOUT_S = 30.0
_PR_SET_NAME = 15  # prctl option: set the calling thread's name (15 bytes at most)


@dataclass
class _Pending:
    feeds: Feeds
    rows: int
    future: asyncio.Future
    loop: asyncio.AbstractEventLoop
    queued_at: float = field(default_factory=time.perf_counter)


class RowBatcher:
    """Run `run(feeds, rows)` on `max_runs` threads of its own, merging what queued meanwhile.

    `run` returns the outputs for all rows (each output's first axis is the row axis);
    every request gets back its own rows. Requests whose non-row dimensions or dtypes
    differ from the head of the queue are left for a later run instead of being merged.
    A merged run that raises one of `input_errors` (what one request's bad input can cause)
    is run again request by request, so each gets its own result or error, not its neighbour's.
    `on_run` is called on the run's thread after each run. `warm_up`, when given, runs on
    every run thread before the batcher is returned (its first error is raised here).
    With `buckets`, a run of up to the largest bucket's rows is padded to the smallest bucket that holds
    it as it is merged: each request's rows are copied once, into a buffer the run thread keeps for that
    bucket (a fresh one would cost its page faults again at every run), its tail zeroed; `run` then gets
    the bucket's row count. A run of more rows goes as it is (the runtime runs it in chunks).
    """

    def __init__(
        self,
        run: RunFn,
        *,
        max_rows: int,
        max_runs: int = 1,
        on_run: Callable[[BatchStats], None] | None = None,
        input_errors: tuple[type[BaseException], ...] = (),
        thread_name: str = "inference",
        warm_up: Callable[[], None] | None = None,
        buckets: Sequence[int] = (),
    ):
        self._run = run
        self._buckets = sorted(buckets)
        self._local = threading.local()  # each run thread's padded buffers
        self._max_rows = max_rows
        self._on_run = on_run
        self._input_errors = input_errors
        self._queue: deque[_Pending] = deque()
        self._ready = threading.Condition()
        self._closed = False
        self._warm_up = warm_up
        self._warmed = threading.Semaphore(0)
        self._warm_up_errors: list[BaseException] = []
        self._threads = [
            threading.Thread(target=self._serve, name=f"{thread_name}_{index}", daemon=True) for index in range(max_runs)
        ]
        for thread in self._threads:
            thread.start()
        for _ in self._threads:
            self._warmed.acquire()
        if self._warm_up_errors:
            self.close()
            raise self._warm_up_errors[0]

    async def submit(self, feeds: Feeds, rows: int) -> list[np.ndarray]:
        """The outputs for these rows, once a run that includes them has finished."""
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        with self._ready:
            if self._closed:
                raise RuntimeError("the model is being unloaded; send the request again once it is loaded")
            self._queue.append(_Pending(feeds, rows, future, loop))
            self._ready.notify()
        return await future

    def close(self) -> None:
        """Fail whatever still waits and stop the run threads once their current run ends (model unloading)."""
        with self._ready:
            self._closed = True
            waiting = list(self._queue)
            self._queue.clear()
            self._ready.notify_all()
        for item in waiting:
            _settle(item, RuntimeError("the model was unloaded before this request ran"))
        for thread in self._threads:
            if thread is not threading.current_thread():
                thread.join(timeout=_JOIN_TIMEOUT_S)

    def _serve(self) -> None:
        """One run slot: take the next batch, run it, hand each request its rows on its event loop."""
        _name_native_thread(threading.current_thread().name)
        try:
            if self._warm_up is not None:
                self._warm_up()
        except Exception as err:  # reported by __init__, which closes the batcher
            self._warm_up_errors.append(err)
        finally:
            self._warmed.release()
        while True:
            with self._ready:
                while not self._queue and not self._closed:
                    self._ready.wait()
                if self._closed:
                    return
                batch, rows = self._take_batch()
            if not batch:
                continue
            results = self._results(batch, rows)
            try:
                batch[0].loop.call_soon_threadsafe(_deliver, batch, results)
            except RuntimeError:  # the event loop is closed: nobody is waiting for these any more
                pass

    def _take_batch(self) -> tuple[list[_Pending], int]:
        """The head of the queue and what may join it (called holding the lock)."""
        while self._queue and self._queue[0].future.done():  # cancelled by a client that went away
            self._queue.popleft()
        if not self._queue:
            return [], 0
        batch = [self._queue.popleft()]
        rows = batch[0].rows
        while self._queue and rows + self._queue[0].rows <= self._max_rows and _mergeable(batch[0], self._queue[0]):
            item = self._queue.popleft()
            if not item.future.done():
                batch.append(item)
                rows += item.rows
        return batch, rows

    def _results(self, batch: list[_Pending], rows: int) -> Results:
        """Each request's outputs, or the error of the run that failed it (a failing run fails only its own requests)."""
        try:
            return self._run_batch(batch, rows)
        except Exception as err:
            if len(batch) == 1 or not isinstance(err, self._input_errors):
                return err
        # One request's input may have failed the merged run: alone, the others run as they would have.
        results: list[list[np.ndarray] | BaseException] = []
        for item in batch:
            try:
                results.extend(self._run_batch([item], item.rows))
            except Exception as err:
                results.append(err)
        return results

    def _run_batch(self, batch: list[_Pending], rows: int) -> list[list[np.ndarray] | BaseException]:
        started = time.perf_counter()
        size = bucket_for(rows, self._buckets) if self._buckets and 0 < rows <= self._buckets[-1] else rows
        if len(batch) == 1 and size == rows:
            feeds = batch[0].feeds
        elif size == rows:
            feeds = {name: np.concatenate([item.feeds[name] for item in batch]) for name in batch[0].feeds}
        else:
            feeds = self._padded(batch, rows, size)
        outputs = self._run(feeds, size)
        finished = time.perf_counter()
        if self._on_run is not None:
            self._on_run(BatchStats(rows, finished - started, [started - item.queued_at for item in batch]))
        if len(batch) == 1 and size == rows:
            return [outputs]
        for output in outputs:
            if output.ndim == 0 or output.shape[0] != size:
                raise RuntimeError(
                    f"an output of shape {list(output.shape)} does not have one row per input row ({size}); "
                    "this model cannot merge or pad requests: set max_batch_rows to 1 and batch_buckets to []"
                )
        bounds = np.cumsum([0] + [item.rows for item in batch])
        return [[output[start:stop] for output in outputs] for start, stop in zip(bounds[:-1], bounds[1:])]

    def _padded(self, batch: list[_Pending], rows: int, size: int) -> Feeds:
        """The batch's rows copied once into this thread's buffers of `size` rows, the rest zeros."""
        buffers = self._local.__dict__.setdefault("buffers", {})
        feeds = {}
        for name, head in batch[0].feeds.items():
            key = (name, size, head.shape[1:], head.dtype.str)
            buffer = buffers.get(key)
            if buffer is None:
                buffer = buffers[key] = np.zeros((size, *head.shape[1:]), dtype=head.dtype)
            start = 0
            for item in batch:
                part = item.feeds[name]
                buffer[start : start + len(part)] = part
                start += len(part)
            buffer[rows:] = 0
            feeds[name] = buffer
        return feeds


def _name_native_thread(name: str) -> None:
    """Give the OS thread the Python thread's name (Linux), so `top -H` and /proc show the run threads.

    The benchmark accounts the server's CPU time per thread by this name (`benchmarks.load`).
    """
    try:
        libc = ctypes.CDLL(None)
        libc.prctl(_PR_SET_NAME, ctypes.c_char_p(name.encode()[:15]), 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: the name only helps profiling
        pass


def _deliver(batch: list[_Pending], results: Results) -> None:
    """On the event loop: each request its own rows or error, or the run's error."""
    for index, item in enumerate(batch):
        _settle(item, results if isinstance(results, BaseException) else results[index])


def _settle(item: _Pending, result: list[np.ndarray] | BaseException) -> None:
    if item.future.done():  # the client went away meanwhile
        return
    if isinstance(result, BaseException):
        item.future.set_exception(result)
    else:
        item.future.set_result(result)


def _mergeable(head: _Pending, other: _Pending) -> bool:
    """Same inputs with the same dtypes and the same non-row dimensions: concatenable on axis 0."""
    if head.loop is not other.loop or head.feeds.keys() != other.feeds.keys():
        return False
    return all(
        head.feeds[name].dtype == other.feeds[name].dtype and head.feeds[name].shape[1:] == other.feeds[name].shape[1:]
        for name in head.feeds
    )


def run_in_buckets(run: Callable[[Feeds], list[np.ndarray]], feeds: Feeds, rows: int, buckets: list[int]) -> list[np.ndarray]:
    """Run `rows` rows in runs of bucket sizes only: each chunk (of at most the largest bucket)
    zero-padded up to the smallest bucket that holds it; every request gets its own rows back.
    Zero rows run as one padded chunk too, for outputs of zero rows in the graph's shapes."""
    chunks = []
    for start, count, size in bucket_chunks(rows, buckets):
        outputs = run({name: _pad_rows(array[start : start + count], size) for name, array in feeds.items()})
        if size != count and any(output.ndim == 0 or output.shape[0] != size for output in outputs):
            raise RuntimeError(
                f"the graph's outputs do not have one row per input row ({size}), so runs cannot be padded: "
                "set parameters.extra.batch_buckets to []"
            )
        chunks.append([output[:count] for output in outputs])
    return chunks[0] if len(chunks) == 1 else [np.concatenate(parts) for parts in zip(*chunks)]


def _pad_rows(array: np.ndarray, size: int) -> np.ndarray:
    if len(array) == size:
        return array
    return np.concatenate([array, np.zeros((size - len(array), *array.shape[1:]), dtype=array.dtype)])
