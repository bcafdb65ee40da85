"""gRPC load from several client processes, for a server that serves more than one Python client can send.

A Python gRPC client spends a good part of a millisecond of CPU on each MobileNetV2 request (the reports record it
as client_cpu_ms_per_request), so one client process caps the load below what a GPU served through several front
ends answers. Here `processes` clients (spawned, each its own event loop and connections) share the concurrency;
all of them warm up, then load the server over one common window of wall-clock time, while this process reads the
server's CPU at the window's ends. Each client process may be kept to CPUs of its own (`cpus`), away from the
server's.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import resource
import time
from dataclasses import dataclass

from benchmarks.load import GRPC, MAX_REQUESTS, CpuSnapshot, LoadResult, load_result
from slipway.v2_requests import grpc_request

START_LEAD_S = 3.0  # time for every client process to spawn and import gRPC before the window opens
JOIN_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class ClientShare:
    target: str
    request: bytes
    concurrency: int
    channels: int
    start_at: float  # time.time() of the window's start
    seconds: float
    cpus: tuple[int, ...] | None


def shares(concurrency: int, processes: int) -> list[int]:
    """The concurrency of each client process: as even as whole clients allow, none without a client."""
    processes = max(1, min(processes, concurrency))
    return [concurrency // processes + (1 if index < concurrency % processes else 0) for index in range(processes)]


def _client(share: ClientShare) -> tuple[int, int, list[float], float, float]:
    """In a client process: requests and errors started in the window, latencies (ms), the CPU seconds the process
    spent in the window, and when its last call ended (time.time())."""
    if share.cpus:
        os.sched_setaffinity(0, share.cpus)
    return asyncio.run(_load(share))


async def _load(share: ClientShare) -> tuple[int, int, list[float], float, float]:
    import grpc
    from tritonclient.grpc import service_pb2

    from benchmarks.load import GRPC_OPTIONS, MODEL_INFER

    options = GRPC_OPTIONS + [("grpc.use_local_subchannel_pool", 1)]
    channels = [grpc.aio.insecure_channel(share.target, options=options) for _ in range(max(1, share.channels))]
    infers = [
        channel.unary_unary(MODEL_INFER, request_serializer=None, response_deserializer=service_pb2.ModelInferResponse.FromString)
        for channel in channels
    ]
    latencies: list[float] = []
    errors = 0
    deadline = share.start_at + share.seconds

    async def client(index: int) -> None:
        nonlocal errors
        infer = infers[index % len(infers)]
        while time.time() < share.start_at:  # warming up: connections made, the server's first calls done
            await infer(share.request, timeout=60)
        while time.time() < deadline and len(latencies) + errors < MAX_REQUESTS:
            started = time.perf_counter()
            try:
                await infer(share.request, timeout=60)
            except Exception:
                errors += 1
                continue
            latencies.append(1000 * (time.perf_counter() - started))

    try:
        await infers[0](share.request, timeout=60)
        cpu_before = None

        async def mark_start() -> None:
            nonlocal cpu_before
            await asyncio.sleep(max(0.0, share.start_at - time.time()))
            cpu_before = _own_cpu()

        await asyncio.gather(mark_start(), *(client(index) for index in range(share.concurrency)))
        return len(latencies), errors, latencies, _own_cpu() - (cpu_before or 0.0), time.time()
    finally:
        for channel in channels:
            await channel.close()


def _own_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def grpc_load(
    target: str,
    request: bytes,
    *,
    processes: int,
    concurrency: int,
    seconds: float,
    warmup_s: float,
    pid: int,
    process_tree: bool,
    channels: int,
    client_cpus: list[int] | None = None,
):
    """`_drive`'s answer (requests, errors, seconds, latencies, (server CPU, client CPU, machine shares)) for a load
    of `concurrency` clients over `processes` client processes; `channels` connections in all."""
    counts = shares(concurrency, processes)
    start_at = time.time() + START_LEAD_S + warmup_s
    jobs = [
        ClientShare(
            target,
            request,
            count,
            max(1, round(channels * count / concurrency)),
            start_at,
            seconds,
            tuple(client_cpus) if client_cpus else None,
        )
        for count in counts
    ]
    context = multiprocessing.get_context("spawn")
    with context.Pool(len(jobs)) as pool:
        pending = pool.map_async(_client, jobs)
        time.sleep(max(0.0, start_at - time.time()))
        before = CpuSnapshot.take(pid, process_tree=process_tree)
        results = pending.get(timeout=JOIN_TIMEOUT_S + seconds + warmup_s)
        after = CpuSnapshot.take(pid, process_tree=process_tree)
    server, _, shares_ = after.since(before)
    latencies = [latency for result in results for latency in result[2]]
    elapsed = max(result[4] for result in results) - start_at
    return (
        sum(result[0] for result in results),
        sum(result[1] for result in results),
        elapsed,
        latencies,
        (server, sum(result[3] for result in results), shares_),
    )


def run_load(
    *,
    server,
    model: str,
    inputs: dict,
    concurrency: int,
    seconds: float,
    processes: int,
    warmup_s: float = 1.0,
    process_tree: bool = False,
    channels: int = 1,
    client_cpus: list[int] | None = None,
) -> LoadResult:
    """`benchmarks.load.run_load` over gRPC, its clients spread over `processes` client processes."""
    measured = grpc_load(
        server.grpc_target,
        grpc_request(model, inputs),
        processes=processes,
        concurrency=concurrency,
        seconds=seconds,
        warmup_s=warmup_s,
        pid=server.pid,
        process_tree=process_tree,
        channels=channels,
        client_cpus=client_cpus,
    )
    return load_result(GRPC, concurrency, next(iter(inputs.values())).shape[0], measured)
