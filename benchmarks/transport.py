"""gRPC alone, no MLServer and no model: what the transport costs before any serving work.

`python -m benchmarks.transport --port P --answer FILE` runs a `grpc.aio` server on uvloop (the
library and event loop MLServer serves gRPC with, its requests read as Slipway's launcher has them read:
`wrappers.transport.grpc_transport`) whose ModelInfer takes each request as bytes, unread, holds it as long as the
bench last set, and sends back the bytes in FILE: the real server's answer to the same request. Loaded by
the same client as the servers and held to their request rate (CPU per request falls as the rate rises:
more events per wake-up), its CPU per request is the floor under their event-loop and other-thread CPU.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.load import GRPC_OPTIONS, MODEL_INFER, grpc_answer
from slipway import atomic
from slipway.local_server import on_cpus
from slipway.paths import PROJECT_ROOT
from slipway.ports import LOOPBACK, free_port
from slipway.server_process import stop_process_group
from slipway.v2_requests import grpc_request
from wrappers.transport import grpc_transport

START_TIMEOUT_S = 30.0
HOLD_SERVICE, HOLD_METHOD = "slipway.bench.Transport", "Hold"  # its one other method: sets the hold, in ms


async def _serve(port: int, answer: bytes) -> None:
    import grpc

    hold_s = 0.0

    async def model_infer(_request: bytes, _context) -> bytes:
        if hold_s:
            await asyncio.sleep(hold_s)
        return answer

    async def hold(request: bytes, _context) -> bytes:
        nonlocal hold_s
        hold_s = float(request) / 1000
        return b""

    service, method = MODEL_INFER.strip("/").split("/")
    handlers = {(service, method): model_infer, (HOLD_SERVICE, HOLD_METHOD): hold}
    server = grpc.aio.server(options=GRPC_OPTIONS)
    server.add_generic_rpc_handlers(
        [  # no (de)serializers: bytes in, bytes out
            grpc.method_handlers_generic_handler(name, {method_name: grpc.unary_unary_rpc_method_handler(function)})
            for (name, method_name), function in handlers.items()
        ]
    )
    server.add_insecure_port(f"{LOOPBACK}:{port}")
    await server.start()
    stopped = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stopped.set)
    await stopped.wait()
    await server.stop(grace=1)


@dataclass
class BareGrpcServer:
    """The transport-only server in its own process, for `run_load` (it reads `grpc_target` and `pid`)."""

    answer_file: Path
    port: int = field(default_factory=free_port)
    cpus: list[int] | None = None  # kept to these CPUs (taskset), as the servers it stands beside
    _process: subprocess.Popen | None = None

    @classmethod
    def answering_as(cls, server, model: str, inputs: dict, work_dir: Path) -> BareGrpcServer:
        """A bare server (not started) that answers with what `server` (a real one, running) answers `inputs` with,
        on the same CPUs."""
        answer = work_dir / f"{model}-answer.bin"
        atomic.write_bytes(answer, grpc_answer(server.grpc_target, grpc_request(model, inputs)))
        return cls(answer, cpus=getattr(server, "cpus", None))

    @property
    def grpc_target(self) -> str:
        return f"{LOOPBACK}:{self.port}"

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process else None

    def hold(self, ms: float) -> None:
        """From now on, answer each request `ms` milliseconds after it arrived."""
        import grpc

        with grpc.insecure_channel(self.grpc_target) as channel:
            channel.unary_unary(f"/{HOLD_SERVICE}/{HOLD_METHOD}")(str(ms).encode(), timeout=10)

    def __enter__(self) -> BareGrpcServer:
        command = on_cpus(
            [sys.executable, "-m", "benchmarks.transport", "--port", str(self.port), "--answer", str(self.answer_file)], self.cpus
        )
        self._process = subprocess.Popen(command, cwd=PROJECT_ROOT, start_new_session=True)
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            try:
                socket.create_connection((LOOPBACK, self.port), timeout=1).close()
                return self
            except OSError:
                if self._process.poll() is not None or time.monotonic() > deadline:
                    self.__exit__()
                    raise RuntimeError(f"the bare gRPC server did not start on port {self.port}") from None
                time.sleep(0.1)

    def __exit__(self, *_: object) -> None:
        process, self._process = self._process, None
        stop_process_group(process)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.transport", description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--answer", type=Path, required=True, help="the serialized ModelInferResponse to send back")
    args = parser.parse_args()
    grpc_transport.read_on_poller_thread()  # as Slipway's launcher serves gRPC, before grpc is imported
    import uvloop

    uvloop.run(_serve(args.port, args.answer.read_bytes()))


if __name__ == "__main__":
    main()
