"""Keep the event loop polling for a while after each request (`event_loop_spin_us`).

Why: at low load a server sleeps between requests, and its CPU goes idle. In a VM whose idle
vCPUs halt at once (the `haltpoll` driver with `guest_halt_poll_ns=0`, as on the machine the
benchmarks' figures come from), the next request must first wake that CPU, and on the gRPC path
several hand-offs between gRPC's poller thread and the loop each pay for it again. A loop that
keeps polling (its ready queue never empty, so it asks for I/O without blocking) is on a CPU when
the next request comes. Measured on digits at concurrency 1 (alternating rounds, p50): gRPC
0.73-0.75 ms against 0.90-0.92 ms without it and the plain runtime's 0.80-0.83 ms; REST 0.52-0.53 ms
against 0.60 and 0.67 ms; unchanged at concurrency 8, where the loop never waits anyway.

The window must span the whole wait for the next request (100-250 us gained nothing there; 500 us
most of it), so the cost is CPU time: while requests keep coming within the window the loop uses
a whole core, which a CPU-utilization HPA counts as load (autoscale such a model on requests/s
instead). An idle server stops polling one window after its last request. Only requests run on the loop
(inline) arm it: a model run on inference threads gains nothing and would lose CPU to the poll.
"""

from __future__ import annotations

import asyncio
import time


class LoopPoller:
    """Keeps one event loop polling until the latest deadline any request set (models share it)."""

    def __init__(self) -> None:
        self._until = 0.0
        self._polling_on: asyncio.AbstractEventLoop | None = None

    def keep_polling(self, seconds: float) -> None:
        """From the event loop: poll at least `seconds` more, instead of sleeping."""
        self._until = max(self._until, time.perf_counter() + seconds)
        loop = asyncio.get_running_loop()
        if self._polling_on is not loop:  # not polling yet (or on a loop that has since been replaced)
            self._polling_on = loop
            loop.call_soon(self._poll)

    def _poll(self) -> None:
        if time.perf_counter() < self._until:
            self._polling_on.call_soon(self._poll)  # a ready callback: the loop's next I/O wait does not block
        else:
            self._polling_on = None


poller = LoopPoller()
