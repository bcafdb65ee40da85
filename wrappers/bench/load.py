"""Closed-loop load generators: N concurrent clients sending one prepared V2 request again and again.

The request is built and serialized once (`wrappers.request_bodies`), so the generator
spends as little of the shared CPU as a client can: what is measured is the server. gRPC
sends `raw_input_contents` (the fast path); REST sends V2 JSON, as `tritonclient.http` does.
Every run is bounded in time and in count.
"""

from __future__ import annotations

import asyncio
import json
import os
import resource
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from wrappers.request_bodies import grpc_request, rest_body

MAX_MESSAGE_BYTES = 256 << 20
MODEL_INFER = "/inference.GRPCInferenceService/ModelInfer"
MAX_REQUESTS = 1_000_000


@dataclass
class LoadResult:
    protocol: str
    concurrency: int
    rows_per_request: int
    requests: int
    errors: int
    seconds: float
    latencies_ms: list[float]
    server_cpu_by_thread: dict[str, float] | None = None  # seconds: THREAD_GROUPS
    client_cpu_seconds: float | None = None
    machine_idle_fraction: float | None = None

    @property
    def server_cpu_seconds(self) -> float | None:
        return None if self.server_cpu_by_thread is None else sum(self.server_cpu_by_thread.values())

    @property
    def requests_per_s(self) -> float:
        return self.requests / self.seconds if self.seconds else 0.0

    def summary(self) -> dict:
        latencies = np.asarray(self.latencies_ms or [np.nan])
        return {
            "protocol": self.protocol,
            "concurrency": self.concurrency,
            "requests": self.requests,
            "errors": self.errors,
            "seconds": round(self.seconds, 3),
            "requests_per_s": round(self.requests_per_s, 2),
            "rows_per_s": round(self.requests_per_s * self.rows_per_request, 2),
            "p50_ms": round(float(np.percentile(latencies, 50)), 3),
            "p95_ms": round(float(np.percentile(latencies, 95)), 3),
            "p99_ms": round(float(np.percentile(latencies, 99)), 3),
            "server_cpu_ms_per_request": self._per_request_ms(self.server_cpu_seconds),
            "server_cpu_ms_per_request_by_thread": (
                {group: self._per_request_ms(seconds) for group, seconds in self.server_cpu_by_thread.items()}
                if self.server_cpu_by_thread is not None and self.requests
                else None
            ),
            "client_cpu_ms_per_request": self._per_request_ms(self.client_cpu_seconds),
            "machine_idle_pct": None if self.machine_idle_fraction is None else round(100 * self.machine_idle_fraction, 1),
        }

    def _per_request_ms(self, seconds: float | None) -> float | None:
        return round(1000 * seconds / self.requests, 3) if seconds is not None and self.requests else None


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process and its threads, from /proc (Linux)."""
    return _cpu_seconds(Path(f"/proc/{pid}/stat"))


def _cpu_seconds(stat: Path) -> float:
    fields = stat.read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# Where a server's CPU time goes: its event loop (the main thread: gRPC/HTTP handling, MLServer,
# decoding; inline runs too), the wrappers runtime's inference threads (named `ort-<model>_<n>` by
# `wrappers.batching`), and every other thread (gRPC's own threads, ONNX Runtime's intra-op pools).
THREAD_GROUPS = ("event_loop", "inference", "other")


@dataclass
class CpuSnapshot:
    """CPU seconds so far: the server's by thread group, this process's (the client), the machine's idle time."""

    server: dict[str, float]
    client: float
    machine_busy: float
    machine_idle: float

    @classmethod
    def take(cls, pid: int) -> CpuSnapshot:
        groups = dict.fromkeys(THREAD_GROUPS, 0.0)
        for task in Path(f"/proc/{pid}/task").iterdir():
            try:
                seconds = _cpu_seconds(task / "stat")
                name = (task / "comm").read_text().strip()
            except (FileNotFoundError, ProcessLookupError):  # the thread ended meanwhile
                continue
            if task.name == str(pid):
                groups["event_loop"] += seconds
            elif name.startswith("ort-"):
                groups["inference"] += seconds
        groups["other"] = process_cpu_seconds(pid) - groups["event_loop"] - groups["inference"]  # ended threads too
        usage = resource.getrusage(resource.RUSAGE_SELF)
        ticks = [int(value) for value in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
        idle = ticks[3] + ticks[4]  # idle + iowait
        return cls(groups, usage.ru_utime + usage.ru_stime, sum(ticks) - idle, idle)

    def since(self, before: CpuSnapshot) -> tuple[dict[str, float], float, float]:
        """Server seconds by group, client seconds and the machine's idle fraction between two snapshots."""
        # Never below 0: a process's total and its threads are read a clock tick apart.
        server = {group: max(0.0, self.server[group] - before.server[group]) for group in THREAD_GROUPS}
        busy, idle = self.machine_busy - before.machine_busy, self.machine_idle - before.machine_idle
        return server, self.client - before.client, idle / (busy + idle) if busy + idle else 0.0


async def _drive(call, *, concurrency: int, seconds: float, warmup_s: float, pid: int):
    await call()  # connect before timing
    stop_warmup = time.perf_counter() + warmup_s
    while time.perf_counter() < stop_warmup:
        await call()
    latencies: list[float] = []
    errors = 0
    deadline = time.perf_counter() + seconds

    async def client() -> None:
        nonlocal errors
        while time.perf_counter() < deadline and len(latencies) + errors < MAX_REQUESTS:
            started = time.perf_counter()
            try:
                await call()
            except Exception:
                errors += 1
                continue
            latencies.append(1000 * (time.perf_counter() - started))

    before, started = CpuSnapshot.take(pid), time.perf_counter()
    await asyncio.gather(*(client() for _ in range(concurrency)))
    elapsed, cpu = time.perf_counter() - started, CpuSnapshot.take(pid).since(before)
    return len(latencies), errors, elapsed, latencies, cpu


async def _grpc_load(target: str, request: bytes, *, concurrency: int, seconds: float, warmup_s: float, pid: int):
    import grpc
    from tritonclient.grpc import service_pb2

    options = [("grpc.max_send_message_length", MAX_MESSAGE_BYTES), ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES)]
    async with grpc.aio.insecure_channel(target, options=options) as channel:
        # The request goes as the bytes it already is: serializing it again per call is client CPU the server needs.
        infer = channel.unary_unary(MODEL_INFER, request_serializer=None,
                                    response_deserializer=service_pb2.ModelInferResponse.FromString)

        async def call():
            return await infer(request, timeout=60)

        return await _drive(call, concurrency=concurrency, seconds=seconds, warmup_s=warmup_s, pid=pid)


async def _rest_load(url: str, body: bytes, *, concurrency: int, seconds: float, warmup_s: float, pid: int):
    import aiohttp

    connector = aiohttp.TCPConnector(limit=concurrency)
    timeout = aiohttp.ClientTimeout(total=60)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:

        async def call():
            async with session.post(url, data=body, headers={"Content-Type": "application/json"}) as response:
                payload = await response.read()
                if response.status != 200:
                    raise RuntimeError(f"HTTP {response.status}: {payload[:200]!r}")
                return json.loads(payload)

        return await _drive(call, concurrency=concurrency, seconds=seconds, warmup_s=warmup_s, pid=pid)


def run_load(
    *,
    protocol: str,
    server,
    model: str,
    inputs: dict[str, np.ndarray],
    concurrency: int,
    seconds: float,
    warmup_s: float = 1.0,
) -> LoadResult:
    """Load `server` (a `LocalServer`) for `seconds` and measure it, including its CPU time."""
    timing = {"concurrency": concurrency, "seconds": seconds, "warmup_s": warmup_s, "pid": server.pid}
    if protocol == "grpc":
        work = _grpc_load(server.grpc_target, grpc_request(model, inputs), **timing)
    elif protocol == "rest":
        work = _rest_load(f"{server.http_url}/v2/models/{model}/infer", rest_body(inputs), **timing)
    else:
        raise ValueError(f"unknown protocol {protocol!r}: use grpc or rest")
    count, errors, elapsed, latencies, (server_cpu, client_cpu, idle) = asyncio.run(work)
    rows = next(iter(inputs.values())).shape[0]
    return LoadResult(
        protocol, concurrency, rows, count, errors, elapsed, latencies,
        server_cpu_by_thread=server_cpu, client_cpu_seconds=client_cpu, machine_idle_fraction=idle,
    )
