"""`event_loop_spin_us`: after a run on the event loop, the loop keeps polling for the window, then sleeps."""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path

import pytest
import uvloop

from slipway.artifact import load_input_example
from slipway.local_server import LocalServer
from tests.wrappers.folders import model_folder
from tests.wrappers.v2 import post
from wrappers.busy_poll import LoopPoller, RunPolling
from wrappers.poll_gate import PROBE_EVERY, REARM, PollGate

LOOPS = {"asyncio": asyncio.new_event_loop, "uvloop": uvloop.new_event_loop}  # MLServer runs uvloop


def _cpu_while_sleeping(seconds: float):
    async def measure() -> float:
        started = time.thread_time()
        await asyncio.sleep(seconds)
        return time.thread_time() - started

    return measure()


@pytest.mark.parametrize("loop_kind", LOOPS)
def test_the_loop_polls_until_the_latest_deadline_then_sleeps(loop_kind):
    poller = LoopPoller()

    async def scenario() -> tuple[float, float]:
        poller.keep_polling(0.05)
        poller.keep_polling(0.2)  # a later deadline wins; an earlier one would not shorten it
        poller.keep_polling(0.01)
        polling = await _cpu_while_sleeping(0.3)
        return polling, await _cpu_while_sleeping(0.3)

    with asyncio.Runner(loop_factory=LOOPS[loop_kind]) as runner:
        polling, after = runner.run(scenario())
    assert polling >= 0.1, f"the loop slept instead of polling: {polling:.3f} s of CPU in a 0.2 s window"
    assert after < 0.05, f"the loop kept polling past its deadline: {after:.3f} s of CPU"


def test_a_poller_left_on_a_closed_loop_polls_on_the_next_one():
    poller = LoopPoller()

    async def leave_polling() -> None:
        poller.keep_polling(30)  # the loop closes with the poll still scheduled

    async def poll_again() -> float:
        poller.keep_polling(0.1)
        return await _cpu_while_sleeping(0.15)

    asyncio.run(leave_polling())
    assert asyncio.run(poll_again()) >= 0.05


@pytest.mark.parametrize("polling, polls", [(lambda: RunPolling(0.2), True),
                                            (lambda: RunPolling(0.2, PollGate(0.2)), False),  # nothing came back to back yet
                                            (lambda: RunPolling(0.0), False)], ids=["set", "chosen", "off"])
def test_after_a_run_the_loop_polls_as_the_models_polling_says(polling, polls):
    async def scenario() -> float:
        after_runs = polling()
        after_runs.run_started()
        after_runs.run_ended()
        return await _cpu_while_sleeping(0.3)

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        cpu = runner.run(scenario())
    assert (cpu >= 0.1) == polls, f"{cpu:.3f} s of CPU in the 0.3 s after one run"


def test_requests_back_to_back_turn_the_gated_polling_on_and_it_is_heard_once():
    heard: list[bool] = []
    after_runs = RunPolling(0.05, PollGate(0.05), heard.append)

    async def back_to_back(runs: int) -> float:
        for _ in range(runs):
            after_runs.run_started()
            after_runs.run_ended()
            await asyncio.sleep(0.001)  # the next request comes well within the window
        return await _cpu_while_sleeping(0.2)

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        polled = runner.run(back_to_back(PROBE_EVERY * REARM + 1))
    assert heard == [True], "turned on once, after enough probed windows caught the next run"
    assert polled >= 0.02, f"then the loop polls after a run: {polled:.3f} s of CPU in the 0.05 s window"


def _main_thread_cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/task/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def _loop_cpu_over(pid: int, seconds: float) -> float:
    started = _main_thread_cpu_s(pid)
    time.sleep(seconds)
    return _main_thread_cpu_s(pid) - started


@pytest.mark.slow
def test_a_real_server_polls_after_inline_runs_only(tmp_path, digits_artifact):
    inputs, _, _ = load_input_example(digits_artifact)
    body = json.dumps({"inputs": [{"name": "image", "datatype": "FP32", "shape": [1, *inputs["image"].shape[1:]],
                                   "data": inputs["image"][:1].ravel().tolist()}]}).encode()
    # inline_below_ms well above a digits run even on a loaded machine: warm-up's timing cannot send it to threads
    model_folder(tmp_path, "inline", digits_artifact / "model.onnx",
                 extra={"event_loop_spin_us": 100_000, "inline_below_ms": 50})
    model_folder(tmp_path, "threads", digits_artifact / "model.onnx",
                 extra={"event_loop_spin_us": 100_000, "inline_below_ms": 0})  # every run on an inference thread
    with LocalServer(tmp_path) as server:
        log = server.log_path.read_text()
        assert "threads: event_loop_spin_us has no effect" in log and "inline: event_loop_spin_us has no" not in log
        assert "inline: the event loop polls for 100000 us" in log and "threads: the event loop polls" not in log
        assert _loop_cpu_over(server.pid, 0.3) < 0.04, "an idle server's loop sleeps"
        status, answer = post(f"{server.http_url}/v2/models/threads/infer", body)
        assert status == 200, answer
        assert _loop_cpu_over(server.pid, 0.3) < 0.04, "a run on an inference thread does not arm the poll"
        # A spinning loop gets the CPU only when the scheduler gives it one: on a busy 2-core machine a 0.1 s poll
        # can show as less. Up to three inline runs; an idle loop never shows 0.06 s (the checks around it).
        polled = []
        for _ in range(3):
            status, answer = post(f"{server.http_url}/v2/models/inline/infer", body)
            assert status == 200, answer
            polled.append(_loop_cpu_over(server.pid, 0.3))
            if polled[-1] >= 0.06:
                break
        assert polled[-1] >= 0.06, f"after an inline run the loop polls for 0.1 s (main thread CPU: {polled})"
        assert _loop_cpu_over(server.pid, 0.3) < 0.04, "then it sleeps again"
