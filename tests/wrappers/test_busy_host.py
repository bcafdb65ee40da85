"""The timing-sensitive tests of `make test-fast` pass on a host whose every core is busy with other work.

A test that passes only on a quiet machine says how busy the machine was, not whether the code works. Here the
busy-poll tests run in a subprocess while one CPU hog per core (an ordinary SCHED_OTHER process at the default
nice, as other work would be) keeps every core busy; each hog stops by itself after HOG_S and is killed by its PID
when the test ends.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from slipway.paths import PROJECT_ROOT

TIMING_SENSITIVE = ["tests/wrappers/test_busy_poll.py"]  # the not-slow tests that read clocks or the loop's polling
HOG_S = 90.0  # each hog's own limit: longer than the run it loads, short enough to be gone soon after
RUN_TIMEOUT_S = 75.0
HOG = f"""
import os, time
os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))
end = time.monotonic() + {HOG_S}
while time.monotonic() < end:
    pass
"""


@pytest.mark.slow
def test_the_timing_sensitive_tests_pass_with_every_core_busy():
    cores = len(os.sched_getaffinity(0))
    hogs = [subprocess.Popen([sys.executable, "-c", HOG]) for _ in range(cores)]
    try:
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "not slow", *TIMING_SENSITIVE],
            cwd=PROJECT_ROOT,
            capture_output=True,
            text=True,
            timeout=RUN_TIMEOUT_S,
            check=False,
        )
        busy = [hog.poll() is None for hog in hogs]
    finally:
        for hog in hogs:
            if hog.poll() is None:
                hog.kill()  # by its PID
            hog.wait(timeout=30)
    assert all(busy), f"a CPU hog ended before the tests did ({busy}): the cores were not busy all along"
    assert done.returncode == 0, (
        f"with {cores} core(s) busy, {' '.join(TIMING_SENSITIVE)} failed:\n{done.stdout[-3000:]}{done.stderr[-2000:]}"
    )
    assert " passed" in done.stdout and " deselected" in done.stdout, done.stdout[-1000:]
