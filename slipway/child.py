"""What a child process of ours does before it runs its program."""

from __future__ import annotations

import ctypes
import signal

_PR_SET_PDEATHSIG = 1  # linux/prctl.h


def stop_with_parent(signal_number: int = signal.SIGTERM) -> None:
    """In the child (a `preexec_fn`): `signal_number` when the parent dies, even by SIGKILL (Linux's
    PR_SET_PDEATHSIG), so that no server is left behind holding its ports."""
    prctl = getattr(ctypes.CDLL(None), "prctl", None)
    if prctl is not None:
        prctl(_PR_SET_PDEATHSIG, signal_number)
