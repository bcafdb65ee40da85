"""The canary's state annotation and lease, its steps and durations: the rules the controller leans on."""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys

import pytest

from deployments.delivery.canary.command import duration_s, settle_s
from deployments.delivery.canary.controller import check_steps
from deployments.delivery.canary.live import annotation_path, pointer
from deployments.delivery.canary.state import CanaryState, Holder, StateError


def _state(holder: Holder, *, renewed_at: float = 1000.0, lease_s: float = 60.0) -> CanaryState:
    return CanaryState(
        version="2",
        digest="sha256:" + "a" * 64,
        uri="s3://b/digits/2",
        stable_version="1",
        stable_digest="sha256:" + "b" * 64,
        steps=[5, 50, 100],
        step=1,
        holder=holder,
        lease_s=lease_s,
        renewed_at=renewed_at,
        started_at=900.0,
        step_started_at=990.0,
    )


def test_the_state_round_trips_through_its_annotation_text():
    state = _state(Holder.this_process())
    assert CanaryState.decode(state.encode(), where="ns/digits") == state
    assert state.weight == 50 and state.position() == "step 2/3 at 50%"
    with pytest.raises(StateError, match="is not a canary state .* remove it with `kubectl annotate"):
        CanaryState.decode('{"version": "2"}', where="ns/digits")


def test_the_lease_holds_off_others_until_it_lapses_or_its_process_is_gone():
    me = Holder.this_process()
    elsewhere = Holder(host="another-machine", pid=1, run="abc")
    assert _state(me).held_elsewhere(me, now=5000.0) is None  # our own
    assert "pid 1 on another-machine, renewed 30 s ago" in _state(elsewhere).held_elsewhere(me, now=1030.0)
    assert _state(elsewhere).held_elsewhere(me, now=1061.0) is None  # lapsed
    alive = Holder(host=socket.gethostname(), pid=os.getppid(), run="def")
    assert _state(alive).held_elsewhere(me, now=1001.0) is not None
    finished = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    gone = Holder(host=socket.gethostname(), pid=int(finished.stdout), run="ghi")
    assert gone.gone() and _state(gone).held_elsewhere(me, now=1001.0) is None  # same machine, process gone: at once


@pytest.mark.parametrize("steps", [[5, 10, 25, 50, 100], [50, 100], [1, 99, 100]])
def test_steps_rise_to_100(steps):
    assert check_steps(steps) == tuple(steps)


@pytest.mark.parametrize("steps", [[10, 50], [50, 10, 100], [0, 100], [10, 10, 100], [10, 150], [100], []])
def test_other_steps_are_refused(steps):
    with pytest.raises(ValueError, match="rising, each 1-100, at least one judged step before the last, 100"):
        check_steps(steps)


def test_durations_and_pointers():
    assert [duration_s(text) for text in ("90s", "5m", "1h", "30", "0.5m")] == [90, 300, 3600, 30, 30]
    for bad in ("", "5x", "-1m", "0", "m"):
        with pytest.raises(argparse.ArgumentTypeError, match="is not a duration"):
            duration_s(bad)
    # a settle may be none at all; anything else is a duration as above
    assert [settle_s(text) for text in ("0", "0s", "0.0m", "5s", "1m")] == [0, 0, 0, 5, 60]
    for bad in ("-1s", "soon", ""):
        with pytest.raises(argparse.ArgumentTypeError, match="is not a duration"):
            settle_s(bad)
    assert annotation_path("slipway.io/canary") == "/metadata/annotations/slipway.io~1canary"
    assert pointer("spec", "predictors", 1, "a~b") == "/spec/predictors/1/a~0b"
