"""Keep the event loop polling for a while after each request (`event_loop_spin_us`).

Why: at low load a server sleeps between requests, and its CPU goes idle. In a VM whose idle
vCPUs halt at once (the `haltpoll` driver with `guest_halt_poll_ns=0`, as on the machine the
benchmarks' figures come from), the next request must first wake that CPU, and on the gRPC path
several hand-offs between gRPC's poller thread and the loop each pay for it again. A loop that
keeps polling (its ready queue never empty, so it asks for I/O without blocking) is on a CPU when
the next request comes: a lower p50 at concurrency 1, unchanged under load, where the loop never waits anyway
(figures: docs/benchmarks.md, `event_loop_spin_us`).

The window must span the whole wait for the next request, not only the hand-offs inside one, so the cost is CPU
time: while requests keep coming within the window the loop uses
a whole core, which a CPU-utilization HPA counts as load (autoscale such a model on requests/s
instead). An idle server stops polling one window after its last request. Only requests run on the loop
(inline) arm it: a model run on inference threads gains nothing and would lose CPU to the poll.

A window set in model-settings.json polls after every inline run. The window chosen at load polls only while
requests come back to back, within the window (`wrappers.running.poll_gate`), so that a server whose requests come
further apart does not poll for nothing.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from slipway.runtime_settings import RuntimeSettings
from wrappers import process_state
from wrappers.running.poll_gate import PollGate

logger = logging.getLogger(__name__)


class LoopPoller:
    """Keeps one event loop polling until the latest deadline any request set (models share it).

    It counts what it did, cheaply (an add per pass), so that the polling can be checked without timing the CPU, which
    depends on how busy the host is: `passes`, the loop iterations it kept from blocking; `stretches`, the times it
    started polling; `polled_s`, the time from each stretch's start to the pass that found its deadline gone (a
    stretch still polling is not in it yet); `stopped_at`, that last pass's `time.perf_counter()`; `polling`, whether
    a pass is scheduled now."""

    def __init__(self) -> None:
        self._until = 0.0
        self._polling_on: asyncio.AbstractEventLoop | None = None
        self._since = 0.0  # when the stretch now polling started
        self.passes = 0
        self.stretches = 0
        self.polled_s = 0.0
        self.stopped_at: float | None = None

    @property
    def polling(self) -> bool:
        return self._polling_on is not None

    def keep_polling(self, seconds: float) -> None:
        """From the event loop: poll at least `seconds` more, instead of sleeping."""
        now = time.perf_counter()
        self._until = max(self._until, now + seconds)
        loop = asyncio.get_running_loop()
        if self._polling_on is not loop:  # not polling yet (or on a loop that has since been replaced)
            self._polling_on, self._since = loop, now
            self.stretches += 1
            loop.call_soon(self._poll)

    def _poll(self) -> None:
        self.passes += 1
        now = time.perf_counter()
        loop = self._polling_on  # set whenever a pass is scheduled
        if loop is not None and now < self._until:
            loop.call_soon(self._poll)  # a ready callback: the loop's next I/O wait does not block
        else:
            self.polled_s += now - self._since
            self.stopped_at, self._polling_on = now, None


poller = LoopPoller()


class RunPolling:
    """What the event loop does after one model's inline runs: poll for `window_s` (0: never), after every run, or,
    with a `gate`, only while the gate says (`on_change(polling)` hears each change)."""

    def __init__(
        self,
        window_s: float,
        gate: PollGate | None = None,
        on_change: Callable[[bool], None] = lambda polling: None,
        loop_poller: LoopPoller | None = None,
    ) -> None:
        self.window_s = window_s
        self.poller = loop_poller or poller  # the process's one, unless a test gives its own to read the counts of
        self._gate = gate
        self._on_change = on_change
        self._polling = False

    def run_started(self) -> None:
        if self._gate is not None:
            self._gate.run_started(time.perf_counter())

    def run_ended(self) -> None:
        if not self.window_s:
            return
        if self._gate is None or self._gate.run_ended(time.perf_counter()):
            self.poller.keep_polling(self.window_s)
        if self._gate is not None and self._gate.polling != self._polling:
            self._polling = self._gate.polling
            self._on_change(self._polling)


def for_model(config: RuntimeSettings, *, chosen: bool, inline: bool, model: str, version: str | None) -> RunPolling:
    """The polling after `model`'s inline runs: `event_loop_spin_us` as set (`chosen` False: after every run) or as
    chosen at load (gated, `wrappers.running.poll_gate`); the log says what it costs, or that it does nothing where the
    runs are not inline."""
    spin_us = config.event_loop_spin_us or 0  # unset: no polling
    window_s = spin_us / 1e6 if inline else 0.0
    if spin_us and not inline:
        logger.warning(
            "%s: event_loop_spin_us has no effect: the event loop polls after the runs it makes "
            "itself (under inline_below_ms), and this model's runs go to inference threads",
            model,
        )
    if not window_s:
        return RunPolling(0.0)
    if not chosen:
        logger.info(
            "%s: the event loop polls for %d us after each inline run; a CPU-utilization HPA counts that "
            "polling as load, so autoscale this model on requests/s",
            model,
            config.event_loop_spin_us,
        )
        return RunPolling(window_s)

    def changed(polling: bool) -> None:
        process_state.current().metrics.publish_polling(model, version, polling)
        logger.info(
            "%s: the event loop %s after inline runs: requests %s within %d us of the answer before them",
            model,
            "now polls" if polling else "now sleeps",
            "come" if polling else "no longer come",
            config.event_loop_spin_us,
        )

    process_state.current().metrics.publish_polling(model, version, False)
    return RunPolling(window_s, PollGate(window_s), changed)
