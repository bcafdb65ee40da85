"""`event_loop_spin_us`: after a run on the event loop, the loop keeps polling for the window, then sleeps.

What the loop did is read from the poller's counts (passes, stretches, when it stopped), not from the CPU time it
got: a polling loop gets as much CPU as the scheduler gives it, less on a busy host, and the same counts either way.
The real server's loop, in another process, is judged by the time it was runnable (on a CPU or waiting for one).
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest
import uvloop

from slipway.artifact import load_input_example
from slipway.local_server import LocalServer
from tests.wrappers.folders import model_folder
from tests.wrappers.v2 import post
from wrappers.running.busy_poll import LoopPoller, RunPolling
from wrappers.running.poll_gate import PROBE_EVERY, REARM, PollGate

LOOPS = {"asyncio": asyncio.new_event_loop, "uvloop": uvloop.new_event_loop}  # MLServer runs uvloop
# A polling loop that got a CPU for even a hundredth of its window made thousands of passes; a loop that slept
# (a timer at the deadline instead of ready callbacks) makes one.
MIN_PASSES = 10
STOP_WAIT_S = 10.0  # how long a test waits for a poll to end: far past any window here, even on a loaded host


async def _until_stopped(poller: LoopPoller) -> None:
    """Sleep until the poller's last pass found its deadline gone (it keeps the loop busy, not blocked, meanwhile)."""
    deadline = time.perf_counter() + STOP_WAIT_S
    while poller.polling:
        assert time.perf_counter() < deadline, f"still polling after {STOP_WAIT_S} s ({poller.passes} passes)"
        await asyncio.sleep(0.01)


@pytest.mark.parametrize("loop_kind", LOOPS)
def test_the_loop_polls_until_the_latest_deadline_then_sleeps(loop_kind):
    poller = LoopPoller()

    async def scenario() -> tuple[float, int]:
        started = time.perf_counter()
        poller.keep_polling(0.05)
        poller.keep_polling(0.2)  # a later deadline wins; an earlier one would not shorten it
        poller.keep_polling(0.01)
        await _until_stopped(poller)
        passes = poller.passes
        await asyncio.sleep(0.2)
        return started, passes

    with asyncio.Runner(loop_factory=LOOPS[loop_kind]) as runner:
        started, passes = runner.run(scenario())
    assert poller.stretches == 1 and passes >= MIN_PASSES, f"the loop slept instead of polling: {passes} passes"
    assert poller.stopped_at is not None and poller.stopped_at - started >= 0.2, (
        f"the loop stopped polling {poller.stopped_at - started:.3f} s in, before the latest deadline (0.2 s)"
    )
    assert poller.passes == passes and not poller.polling, "the loop kept polling past its deadline"


def test_a_poller_left_on_a_closed_loop_polls_on_the_next_one():
    poller = LoopPoller()

    async def leave_polling() -> None:
        poller.keep_polling(30)  # the loop closes with the poll still scheduled

    async def poll_again() -> tuple[int, bool]:
        poller.keep_polling(0.1)
        started = poller.passes
        await asyncio.sleep(0.15)
        return poller.passes - started, poller.polling

    asyncio.run(leave_polling())
    passes, polling = asyncio.run(poll_again())
    assert poller.stretches == 2 and passes >= MIN_PASSES, f"{passes} passes on the new loop: it slept"
    assert polling, "the deadline left from the closed loop (30 s) still holds on the new one"


@pytest.mark.parametrize(
    "polling, polls",
    [
        (lambda poller: RunPolling(0.2, loop_poller=poller), True),
        # nothing came back to back yet
        (lambda poller: RunPolling(0.2, PollGate(0.2), loop_poller=poller), False),
        (lambda poller: RunPolling(0.0, loop_poller=poller), False),
    ],
    ids=["set", "chosen", "off"],
)
def test_after_a_run_the_loop_polls_as_the_models_polling_says(polling, polls):
    poller = LoopPoller()

    async def scenario() -> float:
        after_runs = polling(poller)
        after_runs.run_started()
        ended = time.perf_counter()  # before the run's end armed the window
        after_runs.run_ended()
        await asyncio.sleep(0.05)  # a pass scheduled would have run by now
        await _until_stopped(poller)
        return ended

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        ended = runner.run(scenario())
    assert (poller.stretches, poller.passes >= MIN_PASSES) == ((1, True) if polls else (0, False)), (
        f"{poller.stretches} stretch(es) of polling, {poller.passes} passes after one run"
    )
    if polls:
        assert poller.stopped_at is not None and poller.stopped_at - ended >= 0.2, "polled for less than the window"


def test_requests_back_to_back_turn_the_gated_polling_on_and_it_is_heard_once():
    heard: list[bool] = []
    poller = LoopPoller()
    after_runs = RunPolling(0.05, PollGate(0.05), heard.append, loop_poller=poller)

    async def back_to_back(runs: int) -> float:
        for _ in range(runs):
            after_runs.run_started()
            after_runs.run_ended()
            await asyncio.sleep(0.001)  # the next request comes well within the window
        await _until_stopped(poller)
        before = poller.passes
        after_runs.run_started()
        ended = time.perf_counter()
        after_runs.run_ended()  # the gate is on: this run polls, as the last one did
        assert poller.polling, "the gate is on but the run did not poll"
        await _until_stopped(poller)
        assert poller.passes - before >= MIN_PASSES
        return ended

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        ended = runner.run(back_to_back(PROBE_EVERY * REARM + 1))
    assert heard == [True], "turned on once, after enough probed windows caught the next run"
    assert poller.stopped_at is not None and poller.stopped_at - ended >= 0.05, "then the loop polls the window after a run"


def _main_thread_runnable_s(pid: int) -> float:
    """Seconds the process's main thread (its event loop) has been runnable: on a CPU, or ready and waiting for one.
    A polling loop is runnable through its window however busy the host is; a sleeping one is not."""
    stat = Path(f"/proc/{pid}/task/{pid}/schedstat")
    if not stat.exists():
        pytest.skip(f"{stat} is absent: this kernel keeps no scheduler statistics (CONFIG_SCHED_INFO)")
    on_cpu_ns, waiting_ns, _ = stat.read_text().split()
    return (int(on_cpu_ns) + int(waiting_ns)) / 1e9


def _loop_runnable_over(pid: int, seconds: float) -> float:
    started = _main_thread_runnable_s(pid)
    time.sleep(seconds)
    return _main_thread_runnable_s(pid) - started


@pytest.mark.slow
def test_a_real_server_polls_after_inline_runs_only(tmp_path, digits_artifact):
    inputs, _, _ = load_input_example(digits_artifact)
    body = json.dumps(
        {
            "inputs": [
                {
                    "name": "image",
                    "datatype": "FP32",
                    "shape": [1, *inputs["image"].shape[1:]],
                    "data": inputs["image"][:1].ravel().tolist(),
                }
            ]
        }
    ).encode()
    # inline_below_ms well above a digits run even on a loaded machine: warm-up's timing cannot send it to threads
    model_folder(tmp_path, "inline", digits_artifact / "model.onnx", extra={"event_loop_spin_us": 100_000, "inline_below_ms": 50})
    model_folder(
        tmp_path, "threads", digits_artifact / "model.onnx", extra={"event_loop_spin_us": 100_000, "inline_below_ms": 0}
    )  # every run on an inference thread
    with LocalServer(tmp_path) as server:
        log = server.log_path.read_text()
        assert "threads: event_loop_spin_us has no effect" in log and "inline: event_loop_spin_us has no" not in log
        assert "inline: the event loop polls for 100000 us" in log and "threads: the event loop polls" not in log
        assert _loop_runnable_over(server.pid, 0.3) < 0.04, "an idle server's loop sleeps"
        status, answer = post(f"{server.http_url}/v2/models/threads/infer", body)
        assert status == 200, answer
        assert _loop_runnable_over(server.pid, 0.3) < 0.04, "a run on an inference thread does not arm the poll"
        status, answer = post(f"{server.http_url}/v2/models/inline/infer", body)
        assert status == 200, answer
        # the 0.1 s window began as the answer left, a moment before this measures
        polled = _loop_runnable_over(server.pid, 0.3)
        assert polled >= 0.06, f"after an inline run the loop polls for 0.1 s (main thread runnable {polled:.3f} s)"
        assert _loop_runnable_over(server.pid, 0.3) < 0.04, "then it sleeps again"
