"""`wrappers.running.poll_gate`: after an inline run the loop polls while requests come back to back within the window.

Simulated traffic on a simulated clock: each gap is the wait from a run's end to the next run's start.
"""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from wrappers.running.poll_gate import ARRIVAL_S, LATEST, PROBE_EVERY, REARM, PollGate

WINDOW_S = 0.002
RUN_S = 0.0001
SOON, LATE = 0.0013, 0.01  # digits at concurrency 1 waited ~1.3-1.5 ms from run to run while polling


class Traffic:
    """Runs on one clock: each `serve` call goes on where the last one stopped."""

    def __init__(self) -> None:
        self.gate, self.now = PollGate(WINDOW_S), 0.0

    def serve(self, gaps: list[float]) -> list[bool]:
        """A run before each of these gaps (each gap counts at the run after it); whether the loop polled after each."""
        polled = []
        for gap in gaps:
            self.gate.run_started(self.now)
            self.now += RUN_S
            polled.append(self.gate.run_ended(self.now))
            self.now += gap
        return polled


def test_requests_back_to_back_start_polling_after_a_few_probes():
    traffic = Traffic()
    polled = traffic.serve([SOON] * (PROBE_EVERY * (REARM + 1)))
    assert traffic.gate.polling and all(polled[PROBE_EVERY * REARM :])
    assert sum(polled[: PROBE_EVERY * REARM - 1]) == REARM - 1  # before that, only the probes polled


def test_requests_further_apart_than_the_window_cost_one_window_in_a_probe():
    traffic = Traffic()
    polled = traffic.serve([SOON] * (PROBE_EVERY * (REARM + 1)) + [LATE] * 3200)
    assert not traffic.gate.polling
    assert sum(polled[-3000:]) / 3000 <= 1 / PROBE_EVERY + 0.001
    assert not any(polled[-3000:][:-1][i] and polled[-3000:][i + 1] for i in range(2999))  # no two windows in a row


def test_a_stretch_of_slow_waits_does_not_stop_it_but_a_quiet_client_does():
    traffic = Traffic()
    traffic.serve([SOON] * (PROBE_EVERY * REARM + LATEST))
    assert all(traffic.serve(([LATE] * 8 + [SOON] * 24) * 10))  # the host busy for a moment, now and then
    stopped_after = traffic.serve([LATE] * LATEST).index(False)
    assert 0 < stopped_after <= LATEST // 2 + 1


def test_a_request_arriving_inside_the_window_counts_though_its_run_starts_after_it():
    traffic = Traffic()
    traffic.serve([WINDOW_S + ARRIVAL_S / 2] * (PROBE_EVERY * (REARM + 1)))
    assert traffic.gate.polling


@settings(max_examples=100, deadline=None)
@given(st.lists(st.sampled_from([SOON, LATE, 0.0, 0.02]), min_size=1, max_size=600), st.integers(0, 2**16))
def test_the_gate_polls_exactly_as_its_rule_says(gaps, seed):
    """Whatever the traffic: a run is followed by polling exactly while the gate polls, or on a probe; it stops
    only when more than half the latest polled windows missed, starts only after REARM probes in a row caught."""
    random.Random(seed).shuffle(gaps)
    traffic, caught, polling = Traffic(), [], False
    for index, gap in enumerate(gaps, start=1):
        assert traffic.serve([gap]) == [polling or index % PROBE_EVERY == 0]
        if polling or index % PROBE_EVERY == 0:  # this window's outcome counts at the next run
            caught.append(gap <= WINDOW_S + ARRIVAL_S)
            latest = caught[-LATEST:]
            if polling:
                polling = 2 * latest.count(False) <= len(latest)
            elif len(caught) >= REARM and all(caught[-REARM:]):
                polling, caught = True, [True] * REARM
