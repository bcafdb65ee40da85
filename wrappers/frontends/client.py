"""A front end's side of the hand-off: send a request's rows to the session host, await its outputs.

`HostClient.submit(feeds, rows)` has the batcher's signature (`wrappers.running.batching.RowBatcher.submit`), so the
runtime sends runs here instead of to a local session with one call site. All of it runs on the front end's
event loop: a slot is filled (`ring`), a small frame is written to the host's socket (`protocol`), and the
reply's reader copies the outputs out before it frees the slot, so a request cancelled meanwhile (its client
went away) can never have its slot reused while the host still writes into it. When the host goes away,
waiting requests fail and the front end stops itself (SIGTERM to its own process), so that its supervisor
sees it exit rather than a server that accepts requests it can never answer.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from onnxruntime.capi.onnxruntime_pybind11_state import InvalidArgument

from engine.tensor_specs import describe
from slipway.runtime_settings import SettingsError
from wrappers.frontends import HOST_SOCKET_ENV, protocol
from wrappers.frontends.ring import SlotRing

logger = logging.getLogger(__name__)
DEFAULT_SLOTS = 64  # requests in flight per front end; more wait for a slot
# (outputs, seconds this request queued in the host, the run's seconds and rows: 0 rows where another
# request of the same run reports the run)
Observer = Callable[[list[np.ndarray], float, float, int], None]


class HostUnavailable(SettingsError):
    """No session host answers where this front end was told to find it; the message says how to start one (a
    SettingsError: the runtime refuses the load with it, naming the model)."""


def host_socket(environ: dict[str, str] | os._Environ = os.environ) -> Path:
    """Where the supervisor said the session host listens."""
    path = environ.get(HOST_SOCKET_ENV, "").strip()
    if not path:
        raise HostUnavailable(
            f"frontends > 1 needs a session host, and ${HOST_SOCKET_ENV} names none: serve the folder with Slipway's "
            "launcher (`python -m wrappers.launch FOLDER`, `slipway serve`), which starts the host and the front ends, "
            "or set frontends to 1"
        )
    return Path(path)


def _stop_this_process() -> None:
    os.kill(os.getpid(), signal.SIGTERM)


class HostClient:
    """One front end's connection to the session host, made at model load."""

    def __init__(
        self,
        socket_path: Path,
        *,
        slots: int = DEFAULT_SLOTS,
        observe: Observer | None = None,
        on_lost: Callable[[], None] = _stop_this_process,
    ):
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.settimeout(protocol.HANDSHAKE_TIMEOUT_S)
        try:
            self._sock.connect(str(socket_path))
            self.description = protocol.receive_hello(self._sock)
            self.ring = SlotRing(slots)
            protocol.send_slots(self._sock, self.ring.fds, [slot.size for slot in self.ring.slots])
        except (OSError, protocol.ProtocolError) as err:
            self._sock.close()
            raise HostUnavailable(
                f"the session host at {socket_path} does not answer ({err}); "
                "serve the folder with `python -m wrappers.launch FOLDER`"
            ) from err
        self.session = RemoteSession(self.description)
        self.inputs, self.outputs = describe(self.session)
        self.observe = observe
        self._on_lost = on_lost
        self._pending: dict[int, asyncio.Future] = {}
        self._transport: asyncio.Transport | None = None
        self._lost: str | None = None
        self._starting: asyncio.Task | None = None
        self._outbox: list[bytes] = []

    def start_soon(self) -> None:
        """Start reading replies on the running event loop (from synchronous code on it, such as a model's load)."""
        self._starting = asyncio.get_running_loop().create_task(self.start())

    async def start(self) -> None:
        """Read replies on the running event loop (the server's)."""
        self._sock.setblocking(False)
        transport, _ = await asyncio.get_running_loop().create_unix_connection(lambda: _Replies(self), sock=self._sock)
        self._transport = transport
        self._transport.write(protocol.serving())  # after the model's load: the supervisor waits for every front end

    async def submit(self, feeds: dict[str, np.ndarray], rows: int) -> list[np.ndarray]:
        """The graph's outputs for these rows, run by the host (perhaps merged with other front ends' rows)."""
        if self._transport is None and self._starting is not None and self._lost is None:
            await self._starting
        if self._lost is not None or self._transport is None:
            raise RuntimeError(f"the session host is gone ({self._lost or 'not connected'}); this front end stops")
        slot = await self.ring.acquire()
        slot_map = self.ring.slots[slot]
        try:
            arrays = [feeds[spec.name] for spec in self.inputs]  # graph order: the host reads them so
            slot_map.write(arrays)
        except BaseException:
            self.ring.release(slot)
            raise
        future = asyncio.get_running_loop().create_future()
        self._pending[slot] = future
        self._send(protocol.request(slot, slot_map.size, [(array.dtype, array.shape) for array in arrays]))
        return await future

    def _send(self, frame: bytes) -> None:
        """Frames written in one turn of the event loop go in one write: one wake-up of the host, not one each."""
        if not self._outbox:
            asyncio.get_running_loop().call_soon(self._flush)
        self._outbox.append(frame)

    def _flush(self) -> None:
        frames, self._outbox = self._outbox, []
        if self._transport is not None:
            self._transport.write(b"".join(frames))

    def received(self, reply: protocol.Reply) -> None:
        """On the event loop: copy a reply's outputs out of its slot, free the slot, settle its request."""
        future = self._pending.pop(reply.slot, None)
        if future is None:
            raise protocol.ProtocolError(f"a reply for slot {reply.slot}, which has no request in flight")
        slot_map = self.ring.slots[reply.slot]
        try:
            slot_map.remap(reply.size)
            outputs = slot_map.copies(reply.arrays) if reply.status == protocol.OK else []
        finally:
            self.ring.release(reply.slot)
        if future.done():  # cancelled: its client went away
            return
        if reply.status == protocol.INPUT_ERROR:  # raised as ONNX Runtime raised it: the runtime answers 400
            future.set_exception(InvalidArgument(reply.message))
        elif reply.status != protocol.OK:
            future.set_exception(RuntimeError(f"the session host's run failed: {reply.message}"))
        else:
            if self.observe is not None:
                self.observe(outputs, reply.queue_seconds, reply.run_seconds, reply.batch_rows)
            future.set_result(outputs)

    def lost(self, reason: str) -> None:
        """The host is gone: fail what waits, and stop this front end unless it is closing anyway."""
        if self._lost is not None:
            return
        self._lost = reason
        pending, self._pending = self._pending, {}
        for future in pending.values():
            if not future.done():
                future.set_exception(RuntimeError(f"the session host is gone ({reason}); this front end stops"))
        if self._transport is not None:
            logger.error("the session host is gone (%s): stopping this front end", reason)
            self._transport = None
            self._on_lost()

    def close(self) -> None:
        """At model unload: disconnect without stopping the process."""
        self._on_lost = lambda: None
        transport, self._transport = self._transport, None
        self._lost = self._lost or "the model was unloaded"
        if transport is not None:
            transport.close()
        else:
            self._sock.close()
        for future in self._pending.values():
            if not future.done():
                future.set_exception(RuntimeError("the model was unloaded before this request ran"))
        self._pending = {}
        self.ring.close()


class _Replies(asyncio.Protocol):
    def __init__(self, client: HostClient):
        self._client = client
        self._reader = protocol.FrameReader()

    def data_received(self, data: bytes) -> None:
        try:
            for payload in self._reader.feed(data):
                self._client.received(protocol.parse_reply(payload))
        except (protocol.ProtocolError, ValueError) as err:
            self._client.lost(f"it sent a bad frame: {err}")

    def connection_lost(self, exc: Exception | None) -> None:
        self._client.lost(f"its connection closed{': ' + str(exc) if exc else ''}")


@dataclass(frozen=True)
class GraphTensor:
    """A graph input or output as ONNX Runtime's NodeArg describes it, as the host sent it."""

    name: str
    type: str
    shape: list


class RemoteSession:
    """What the host's session says of itself (its graph's tensors, its providers): the session stays there."""

    def __init__(self, description: dict):
        self._description = description

    def get_inputs(self) -> list[GraphTensor]:
        return [GraphTensor(*node) for node in self._description["inputs"]]

    def get_outputs(self) -> list[GraphTensor]:
        return [GraphTensor(*node) for node in self._description["outputs"]]

    def get_providers(self) -> list[str]:
        return list(self._description["providers"])
