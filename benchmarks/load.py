"""Closed-loop load generators: N concurrent clients sending one prepared V2 request again and again.

The request is built and serialized once (`slipway.v2_requests`), so the generator
spends as little of the shared CPU as a client can: what is measured is the server. gRPC
sends `raw_input_contents` (the fast path); gRPC over shared memory writes each input into
the client's own region of /dev/shm and sends where it lies (the V2 system shared-memory
extension); REST sends V2 JSON, as `tritonclient.http` does with `binary_data=False`, or tensors in
Triton's binary extension (`rest-binary`), as it does by default.
Every run is bounded in time and in count.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import resource
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import AsyncExitStack, ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from slipway.v2_requests import binary_rest_body, grpc_request, rest_body
from slipway.v2_wire import BINARY_HEADER, Location

GRPC, GRPC_SHARED_MEMORY, REST, REST_BINARY = "grpc", "grpc-shm", "rest", "rest-binary"
PROTOCOLS = (GRPC, GRPC_SHARED_MEMORY, REST, REST_BINARY)
MAX_MESSAGE_BYTES = 256 << 20
# The bench's gRPC clients and its bare server alike take messages past gRPC's 4 MB default.
GRPC_OPTIONS = [("grpc.max_send_message_length", MAX_MESSAGE_BYTES), ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES)]
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
    machine_steal_fraction: float | None = None  # time the hypervisor gave the machine's CPUs to someone else

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
            "rows_per_request": self.rows_per_request,
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
            "machine_steal_pct": None if self.machine_steal_fraction is None else round(100 * self.machine_steal_fraction, 1),
        }

    def _per_request_ms(self, seconds: float | None) -> float | None:
        return round(1000 * seconds / self.requests, 3) if seconds is not None and self.requests else None


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process and its threads, from /proc (Linux)."""
    return _cpu_seconds(Path(f"/proc/{pid}/stat"))


def _cpu_seconds(stat: Path) -> float:
    fields = stat.read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def descendants_cpu_seconds(pid: int) -> float:
    """User + system CPU time of every process below `pid` that runs now (and of the children those have reaped)."""
    import psutil

    total = 0.0
    for child in psutil.Process(pid).children(recursive=True):
        try:
            times = child.cpu_times()
        except (psutil.NoSuchProcess, psutil.AccessDenied):  # it ended meanwhile
            continue
        total += times.user + times.system + times.children_user + times.children_system
    return total


# Where a server's CPU time goes: its event loop (the main thread: gRPC/HTTP handling, MLServer,
# decoding; inline runs too), the wrappers runtime's inference threads (named `ort-<model>_<n>` by
# `wrappers.running.batching`), and every other thread (gRPC's own threads, ONNX Runtime's intra-op pools).
THREAD_GROUPS = ("event_loop", "inference", "other")
# A server that does its work in processes of its own (PyTriton's tritonserver and its stubs) is measured as a tree:
# every descendant's CPU counts too, under this group.
CHILD_PROCESSES = "child_processes"


@dataclass
class CpuSnapshot:
    """CPU seconds so far: the server's by thread group, this process's (the client); the machine's busy, idle
    and stolen clock ticks (stolen: a VM's CPU given to another guest, busy time to the guest's kernel)."""

    server: dict[str, float]
    client: float
    machine_busy: float
    machine_idle: float
    machine_steal: float

    @classmethod
    def take(cls, pid: int, *, process_tree: bool = False) -> CpuSnapshot:
        """`process_tree`: also the CPU of every process under `pid` now (`CHILD_PROCESSES`)."""
        groups = dict.fromkeys(THREAD_GROUPS, 0.0)
        if process_tree:
            groups[CHILD_PROCESSES] = descendants_cpu_seconds(pid)
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
        return cls(groups, usage.ru_utime + usage.ru_stime, sum(ticks) - idle, idle, ticks[7])

    def since(self, before: CpuSnapshot) -> tuple[dict[str, float], float, tuple[float, float]]:
        """Server seconds by group, client seconds and the machine's idle and stolen fractions between two snapshots."""
        # Never below 0: a process's total and its threads are read a clock tick apart.
        server = {group: max(0.0, self.server[group] - before.server.get(group, 0.0)) for group in self.server}
        busy, idle = self.machine_busy - before.machine_busy, self.machine_idle - before.machine_idle
        total = busy + idle
        shares = (idle / total, (self.machine_steal - before.machine_steal) / total) if total else (0.0, 0.0)
        return server, self.client - before.client, shares


async def _drive(call, *, concurrency: int, seconds: float, warmup_s: float, pid: int, process_tree: bool = False):
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

    before, started = CpuSnapshot.take(pid, process_tree=process_tree), time.perf_counter()
    await asyncio.gather(*(client() for _ in range(concurrency)))
    elapsed, cpu = time.perf_counter() - started, CpuSnapshot.take(pid, process_tree=process_tree).since(before)
    return len(latencies), errors, elapsed, latencies, cpu


async def _grpc_load(
    target: str,
    requests: list[bytes],
    *,
    before_call=None,
    concurrency: int,
    seconds: float,
    warmup_s: float,
    pid: int,
    process_tree: bool = False,
    channels: int = 1,
):
    """gRPC load; each client holds one of `requests` while its call is in flight (`before_call(slot)` first).
    `channels` > 1: calls take turns over that many connections (HTTP/2 keeps a connection on one server process,
    so a server of several processes on one port, `wrappers.frontends`, needs several to spread the load)."""
    import grpc
    from tritonclient.grpc import service_pb2

    # A local subchannel pool each: channels to one target would share one connection otherwise.
    options = GRPC_OPTIONS + ([("grpc.use_local_subchannel_pool", 1)] if channels > 1 else [])
    async with AsyncExitStack() as stack:
        opened = [await stack.enter_async_context(grpc.aio.insecure_channel(target, options=options)) for _ in range(channels)]
        # The request goes as the bytes it already is: serializing it again per call is client CPU the server needs.
        infers = [
            channel.unary_unary(
                MODEL_INFER, request_serializer=None, response_deserializer=service_pb2.ModelInferResponse.FromString
            )
            for channel in opened
        ]
        free_slots = list(range(len(requests)))
        turns = itertools.cycle(infers)

        async def call():
            slot = free_slots.pop()
            try:
                if before_call is not None:
                    before_call(slot)
                return await next(turns)(requests[slot], timeout=60)
            finally:
                free_slots.append(slot)

        return await _drive(call, concurrency=concurrency, seconds=seconds, warmup_s=warmup_s, pid=pid, process_tree=process_tree)


def grpc_answer(target: str, request: bytes) -> bytes:
    """One ModelInfer call with a serialized request; the serialized answer."""
    import grpc

    with grpc.insecure_channel(target, options=GRPC_OPTIONS) as channel:
        return channel.unary_unary(MODEL_INFER)(request, timeout=60)


@contextmanager
def _shared_memory_slots(http_url: str, inputs: dict[str, np.ndarray], count: int):
    """`count` shared-memory regions holding `inputs`, registered with the server for the load and
    removed after it: their locations per slot, and a function that writes the inputs into a slot."""
    from multiprocessing.shared_memory import SharedMemory

    size = sum(array.nbytes for array in inputs.values())
    blocks, views = [], []
    try:
        for _ in range(count):
            block = SharedMemory(create=True, size=size)
            blocks.append(block)
            _post_json(
                f"{http_url}/v2/systemsharedmemory/region/{block.name}/register",
                {"key": block.name, "offset": 0, "byte_size": size},
            )
        layout, offset = [], 0  # where each input lies in a slot's region
        for name, array in inputs.items():
            layout.append((name, offset, array))
            offset += array.nbytes
        slots = [{name: Location(block.name, at, array.nbytes) for name, at, array in layout} for block in blocks]
        views = [
            [(np.ndarray(array.shape, array.dtype, buffer=block.buf, offset=at), array) for _, at, array in layout]
            for block in blocks
        ]

        def write(slot: int) -> None:  # a client writes each new input, as a producer on the same host would
            for view, array in views[slot]:
                view[...] = array

        yield slots, write
    finally:
        views.clear()  # a block cannot close while arrays still view it
        for block in blocks:
            try:
                _post_json(f"{http_url}/v2/systemsharedmemory/region/{block.name}/unregister", None)
            except (OSError, RuntimeError):
                pass  # the server is gone, and its regions with it
            finally:
                block.close()
                block.unlink()


def _post_json(url: str, body: dict | None) -> None:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode() if body else b"", method="POST", headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=30):
            pass
    except urllib.error.HTTPError as err:
        raise RuntimeError(f"POST {url}: HTTP {err.code}: {err.read()[:300]!r}") from None


async def _rest_load(
    url: str,
    body: bytes,
    *,
    header_length: int | None = None,
    concurrency: int,
    seconds: float,
    warmup_s: float,
    pid: int,
    process_tree: bool = False,
):
    """REST load: V2 JSON, or Triton's binary extension where `header_length` is given."""
    import aiohttp

    connector = aiohttp.TCPConnector(limit=concurrency)
    timeout = aiohttp.ClientTimeout(total=60)
    headers = {"Content-Type": "application/json"} if header_length is None else {BINARY_HEADER: str(header_length)}
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:

        async def call():
            async with session.post(url, data=body, headers=headers) as response:
                payload = await response.read()
                if response.status != 200:
                    raise RuntimeError(f"HTTP {response.status}: {payload[:200]!r}")
                answered = response.headers.get(BINARY_HEADER)
                return json.loads(payload if answered is None else payload[: int(answered)])

        return await _drive(call, concurrency=concurrency, seconds=seconds, warmup_s=warmup_s, pid=pid, process_tree=process_tree)


@contextmanager
def pinned(cpus: list[int] | None) -> Iterator[None]:
    """This process kept to `cpus` meanwhile (sessions built here size and place their threads by it; a client's
    threads stay off the server's CPUs); anywhere without `cpus`."""
    if not cpus:
        yield
        return
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cpus)
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


def run_load(
    *,
    protocol: str,
    server,
    model: str,
    inputs: dict[str, np.ndarray],
    concurrency: int,
    seconds: float,
    warmup_s: float = 1.0,
    process_tree: bool = False,
    channels: int = 1,
    client_cpus: list[int] | None = None,
) -> LoadResult:
    """Load `server` (a `LocalServer`) for `seconds` and measure it, including its CPU time (with `process_tree`,
    that of every process under it too); over gRPC, through `channels` connections taking turns; this process the
    client, kept to `client_cpus` meanwhile where given (several client processes: `benchmarks.client_processes`)."""
    timing = {
        "concurrency": concurrency,
        "seconds": seconds,
        "warmup_s": warmup_s,
        "pid": server.pid,
        "process_tree": process_tree,
    }
    with ExitStack() as stack:
        stack.enter_context(pinned(client_cpus))  # this process is the client while the load runs
        if protocol == GRPC:
            work = _grpc_load(server.grpc_target, [grpc_request(model, inputs)] * concurrency, channels=channels, **timing)
        elif protocol == GRPC_SHARED_MEMORY:
            slots, write = stack.enter_context(_shared_memory_slots(server.http_url, inputs, concurrency))
            requests = [grpc_request(model, inputs, shared=slot) for slot in slots]
            work = _grpc_load(server.grpc_target, requests, before_call=write, **timing)
        elif protocol == REST:
            work = _rest_load(f"{server.http_url}/v2/models/{model}/infer", rest_body(inputs), **timing)
        elif protocol == REST_BINARY:
            body, header_length = binary_rest_body(inputs)
            work = _rest_load(f"{server.http_url}/v2/models/{model}/infer", body, header_length=header_length, **timing)
        else:
            raise ValueError(f"unknown protocol {protocol!r}: use one of {PROTOCOLS}")
        measured = asyncio.run(work)
    return load_result(protocol, concurrency, next(iter(inputs.values())).shape[0], measured)


def load_result(protocol: str, concurrency: int, rows: int, measured: tuple) -> LoadResult:
    """A `LoadResult` from what a load measured: (requests, errors, seconds, latencies, (server CPU by thread group,
    client CPU, (machine idle share, stolen share)))."""
    count, errors, elapsed, latencies, (server_cpu, client_cpu, (idle, steal)) = measured
    return LoadResult(
        protocol,
        concurrency,
        rows,
        count,
        errors,
        elapsed,
        latencies,
        server_cpu_by_thread=server_cpu,
        client_cpu_seconds=client_cpu,
        machine_idle_fraction=idle,
        machine_steal_fraction=steal,
    )
