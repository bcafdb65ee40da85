"""gRPC requests are read on grpc.aio's poller thread: EventEngine's threads stay asleep while a server answers."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from slipway.artifact import load_input_example
from slipway.local_server import LocalServer
from tests.wrappers.v2 import GrpcClient, raw_output, raw_request
from wrappers.transport import grpc_transport
from wrappers.transport.grpc_transport import EXPERIMENTS_ENV, POLLER_READS

REQUESTS = 100  # per batch
BATCHES = 5
EVENT_ENGINE_THREAD = "event_engine"  # the name gRPC core gives its EventEngine pool's threads


def test_the_launcher_turns_both_experiments_off_unless_the_environment_chooses():
    environ: dict[str, str] = {}
    assert "poller thread" in grpc_transport.read_on_poller_thread(environ)
    assert environ == {EXPERIMENTS_ENV: "-event_engine_listener,-event_engine_for_all_other_endpoints"}
    for chosen in ("", "-event_engine_listener"):  # empty: gRPC's own defaults
        environ = {EXPERIMENTS_ENV: chosen}
        assert "from the environment" in grpc_transport.read_on_poller_thread(environ)
        assert environ == {EXPERIMENTS_ENV: chosen}


def _event_engine_wakeups(pid: int) -> int:
    """Context switches of the process's EventEngine threads so far: each wake-up to handle an event is one."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        task = Path(f"/proc/{pid}/task/{tid}")
        try:
            if (task / "comm").read_text().strip() != EVENT_ENGINE_THREAD:
                continue
            for line in (task / "status").read_text().splitlines():
                key, _, value = line.partition(":")
                if key.endswith("ctxt_switches"):  # voluntary and not
                    total += int(value)
        except FileNotFoundError:  # the thread ended meanwhile
            continue
    return total


def _wakeups_per_request(servers: list[LocalServer], images) -> list[list[float]]:
    """EventEngine's wake-ups per request in each of `BATCHES` batches of requests to each server, the servers'
    batches alternating: a batch the host disturbed (gRPC core hands work to EventEngine when its poller falls behind)
    stands beside quiet ones."""
    request = raw_request("digits", {"image": ("FP32", list(images.shape), images.tobytes())})
    clients = [GrpcClient(server.grpc_target) for server in servers]
    counts: list[list[float]] = [[] for _ in servers]
    try:
        for client in clients:
            client.infer(request)  # the connection is up before counting
        for _ in range(BATCHES):
            for server, client, count in zip(servers, clients, counts, strict=True):
                before = _event_engine_wakeups(server.pid)
                for _ in range(REQUESTS):
                    response = client.infer(request)
                count.append((_event_engine_wakeups(server.pid) - before) / REQUESTS)
                assert raw_output(response).shape == (1, 10)
    finally:
        for client in clients:
            client.close()
    return counts


def _launcher_said(server: LocalServer) -> str:
    """The launcher's line about gRPC's experiments, from the server's log."""
    said = [line for line in server.log_path.read_text(errors="replace").splitlines() if EXPERIMENTS_ENV in line]
    return said[-1].strip() if said else f"no {EXPERIMENTS_ENV} line in {server.log_path}"


@pytest.mark.slow
def test_served_grpc_requests_leave_event_engine_s_threads_asleep(digits_artifact):
    images = load_input_example(digits_artifact)[0]["image"][:1]
    # Measured alone: 0.09-0.2 wake-ups per request with the poller's reads (timers), 4.4 with gRPC's defaults. Three
    # full CI runs counted 2.46-3.46 with the poller's reads in one batch of 200 requests, which no run alone, after
    # the other server tests or with both CPUs busy repeated: so both servers run side by side, in alternating
    # batches, and each is judged by its quietest batch (reading on EventEngine's threads wakes them in every batch).
    with LocalServer(digits_artifact) as server, LocalServer(digits_artifact, extra_env={EXPERIMENTS_ENV: ""}) as defaults:
        batches = _wakeups_per_request([server, defaults], images)
        said = _launcher_said(server)
    poller_reads, event_engine = (min(counts) for counts in batches)
    assert event_engine >= 2, f"with gRPC's defaults EventEngine's threads woke {batches[1]} times per request"
    assert poller_reads < 1 or poller_reads < event_engine / 4, (
        f"gRPC core reads requests on EventEngine's threads again ({poller_reads} wake-ups per request in the quietest "
        f"batch of {batches[0]}, against {batches[1]} with gRPC's defaults): does this grpcio still have {POLLER_READS}? The launcher "
        f"said: {said}"
    )
