"""Time a model at load on the machine it serves from: per-row time by batch size, and the hop to a thread.

The numbers feed `wrappers.defaults.choice`. Both timings are bounded (in runs and in seconds), so a large
model costs a load at most about `budget_s` more; the fastest run counts, as other work on a shared machine
only ever makes runs slower.
"""

from __future__ import annotations

import asyncio
import statistics
import threading
import time
from collections.abc import Callable
from queue import SimpleQueue

BATCH_SIZES = (1, 2, 4, 8)
RUNS_PER_SIZE = 5  # timed runs per batch size, after one untimed (a shape's first run is slow)
BUDGET_S = 3.0
HOP_ROUND_TRIPS = 100


def seconds_per_row(
    run: Callable[[int], object],
    sizes: tuple[int, ...] = BATCH_SIZES,
    *,
    runs: int = RUNS_PER_SIZE,
    budget_s: float = BUDGET_S,
) -> dict[int, float]:
    """The fastest of `runs` timed calls of `run(rows)` per size (after one untimed), divided by the rows.

    The sizes take turns, round by round, so that other work on the machine slows each size alike instead of
    whichever happened to be timed while it ran. From a first timed 1-row run, the sizes (smallest first) are
    kept while their predicted cost, at that run's time per row, stays within `budget_s` in all; the smallest
    is always kept.
    """
    ordered = sorted(sizes)
    run(ordered[0])  # a shape's first run is slow: untimed
    probe = _timed(run, ordered[0])
    per_row = probe / ordered[0]
    kept, predicted = [ordered[0]], per_row * ordered[0] * (runs + 1)
    for rows in ordered[1:]:
        predicted += per_row * rows * (runs + 1)
        if predicted > budget_s:
            break
        kept.append(rows)
        run(rows)
    fastest = {rows: float("inf") for rows in kept}
    fastest[ordered[0]] = probe
    for _ in range(max(1, runs)):
        for rows in kept:
            fastest[rows] = min(fastest[rows], _timed(run, rows))
    return {rows: seconds / rows for rows, seconds in fastest.items()}


def _timed(run: Callable[[int], object], rows: int) -> float:
    begun = time.perf_counter()
    run(rows)
    return time.perf_counter() - begun


def hop_seconds(round_trips: int = HOP_ROUND_TRIPS) -> float:
    """The median round trip of an event loop handing work to a thread and getting the answer back.

    The same mechanics as a run sent to `wrappers.running.batching` (a future on the loop, a thread woken to take the
    work, `call_soon_threadsafe` to hand the result back), on a loop and a thread of its own, so that it can be
    measured from a loading model whose own loop is busy with the load.
    """
    work: SimpleQueue[tuple[asyncio.AbstractEventLoop, asyncio.Future] | None] = SimpleQueue()

    def serve() -> None:
        while (item := work.get()) is not None:
            loop, future = item
            loop.call_soon_threadsafe(future.set_result, None)

    async def ping() -> list[float]:
        loop = asyncio.get_running_loop()
        times = []
        for _ in range(round_trips):
            begun = time.perf_counter()
            future = loop.create_future()
            work.put((loop, future))
            await future
            times.append(time.perf_counter() - begun)
        return times

    worker = threading.Thread(target=serve, name="hop-timing", daemon=True)
    worker.start()
    result: list[list[float]] = []
    try:
        pinger = threading.Thread(target=lambda: result.append(asyncio.run(ping())), name="hop-timing-loop")
        pinger.start()
        pinger.join()
    finally:
        work.put(None)
        worker.join()
    if not result:
        raise RuntimeError("timing the hop to a thread failed")
    return statistics.median(result[0])
