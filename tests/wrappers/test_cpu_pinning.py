"""`pin_event_loop`: the event loop and gRPC's poller thread share one CPU, and get their CPUs back."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from slipway.artifact import load_input_example
from slipway.local_server import LocalServer
from slipway.repository_access import API_ENV
from tests.wrappers.folders import model_folder
from tests.wrappers.v2 import GrpcClient, post, raw_output, raw_request
from wrappers.running import cpu_pinning

CPUS = os.sched_getaffinity(0)
pytestmark = pytest.mark.skipif(len(CPUS) < 2, reason="pinning needs two CPUs to choose from")


def _allowed(pid: int, tid: int) -> set[int]:
    return os.sched_getaffinity(tid) if pid == os.getpid() else _allowed_in_proc(pid, tid)


def _allowed_in_proc(pid: int, tid: int) -> set[int]:
    """The CPUs a thread of another process may run on, from /proc (`Cpus_allowed_list: 0-1,4`)."""
    for line in Path(f"/proc/{pid}/task/{tid}/status").read_text().splitlines():
        if line.startswith("Cpus_allowed_list:"):
            cpus = set()
            for part in line.split(":", 1)[1].strip().split(","):
                first, _, last = part.partition("-")
                cpus.update(range(int(first), int(last or first) + 1))
            return cpus
    raise AssertionError(f"no Cpus_allowed_list for thread {tid} of {pid}")


def _pinned_threads(pid: int, cpu: int) -> set[int]:
    return {int(tid) for tid in os.listdir(f"/proc/{pid}/task") if _allowed_in_proc(pid, int(tid)) == {cpu}}


def test_the_loop_and_the_grpc_poller_share_the_last_cpu_until_no_owner_is_left():
    stop = threading.Event()
    poller = threading.Thread(target=stop.wait, name=f"Thread-99 ({cpu_pinning.GRPC_POLLER_TARGET})")
    bystander = threading.Thread(target=stop.wait, name="Thread-98 (serve)")
    poller.start()
    bystander.start()
    me = threading.get_native_id()
    first, second = SimpleNamespace(name="a"), SimpleNamespace(name="b")
    try:
        cpu_pinning.pinned_models().add(first)
        cpu_pinning.pinned_models().add(second)  # shares the pin
        assert _allowed(os.getpid(), me) == {max(CPUS)}
        assert _allowed(os.getpid(), poller.native_id) == {max(CPUS)}
        assert _allowed(os.getpid(), bystander.native_id) == CPUS
        cpu_pinning.pinned_models().discard(first)
        assert _allowed(os.getpid(), me) == {max(CPUS)}, "the second model still asks for the pin"
    finally:
        cpu_pinning.pinned_models().discard(first)
        cpu_pinning.pinned_models().discard(second)
        stop.set()
        poller.join()
        bystander.join()
    assert _allowed(os.getpid(), me) == CPUS


@pytest.mark.slow
def test_a_real_server_pins_at_its_first_request_and_unpins_when_the_model_unloads(tmp_path, digits_artifact):
    inputs, _, _ = load_input_example(digits_artifact)
    images = inputs["image"][:1]
    model_folder(tmp_path, "digits", digits_artifact / "model.onnx", extra={"pin_event_loop": True})
    with LocalServer(tmp_path, extra_env={API_ENV: "open"}) as server:  # unloaded over loopback below
        assert _pinned_threads(server.pid, max(CPUS)) == set(), "nothing is pinned before the first request"
        client = GrpcClient(server.grpc_target)
        try:
            response = client.infer(raw_request("digits", {"image": ("FP32", list(images.shape), images.tobytes())}))
        finally:
            client.close()
        assert raw_output(response).shape == (1, 10)
        pinned = _pinned_threads(server.pid, max(CPUS))
        assert server.pid in pinned, "the event loop (the main thread) is pinned"
        assert len(pinned) == 2, f"the event loop and gRPC's poller thread, nothing else: {pinned}"
        status, answer = post(f"{server.http_url}/v2/repository/models/digits/unload", b"")
        assert status == 200, answer
        assert _pinned_threads(server.pid, max(CPUS)) == set()
        assert _allowed_in_proc(server.pid, server.pid) == CPUS
    assert np.isfinite(raw_output(response)).all()
