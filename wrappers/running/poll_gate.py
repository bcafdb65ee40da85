"""Whether the event loop polls after an inline run (the chosen `event_loop_spin_us`): while requests come back to back.

Polling (`wrappers.running.busy_poll`) pays where the next request comes within the window: the loop is still on its CPU
when it comes, so gRPC's hand-offs to it wake nothing (docs/internals.md, "The figures behind the modules"). A
window the next request does not come within is CPU spent for nothing. So the gate polls while at most half of the
latest `LATEST` windows it polled went by without the next run, and, once it has
stopped, polls one window in `PROBE_EVERY` runs only, starting again where `REARM` probes in a row caught the next
run: a server whose requests come further apart than the window pays 1/`PROBE_EVERY` of a window per request.
A stretch of slow waits (the host busy for a moment) does not stop it; a client gone quiet stops it within a few
windows. It cannot tell a client that waits on each answer from a stream paced as fast (both leave short waits),
so it polls for both.

Pure: the caller gives it the clock's readings (the runtime, on the event loop thread where inline runs happen).
"""

from __future__ import annotations

from collections import deque

LATEST = 32  # the polled windows the gate looks back on while polling
PROBE_EVERY = 32  # runs per probing window while the gate does not poll
REARM = 4  # probes in a row that must catch the next run for polling to start again
# A run starts this long after its request came, at most, on the way from the socket (gRPC's hand-offs, decoding):
# a next run starting up to this late after the window still came inside it.
ARRIVAL_S = 0.0005


class PollGate:
    """Polls after a run while the next run mostly starts within the window after the last ones."""

    def __init__(self, window_s: float) -> None:
        self.window_s = window_s
        self.polling = False  # whether requests come back to back: poll after every run
        self._caught: deque[bool] = deque(maxlen=LATEST)  # per polled window: did the next run start inside it
        self._polled_since: float | None = None  # when the window now open began (a run's end); None: not polling
        self._runs = 0

    def run_started(self, now: float) -> None:
        """A run starts: a window polled since the last run's end caught it, or it came too late."""
        if self._polled_since is None:
            return
        self._caught.append(now - self._polled_since <= self.window_s + ARRIVAL_S)
        self._polled_since = None
        if self.polling:
            self.polling = 2 * self._caught.count(False) <= len(self._caught)
        elif len(self._caught) >= REARM and all(list(self._caught)[-REARM:]):
            self.polling = True
            self._caught = deque([True] * REARM, maxlen=LATEST)  # the misses that stopped it are behind it now

    def run_ended(self, now: float) -> bool:
        """A run ended: whether the loop should poll now (False: sleep until the next request)."""
        self._runs += 1
        poll = self.polling or self._runs % PROBE_EVERY == 0
        self._polled_since = now if poll else None
        return poll
