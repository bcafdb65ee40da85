"""Limits on each HTTP connection of MLServer's uvicorn servers: headers' size and count, how long headers and a
body may take, how many connections at once (`wrappers.limits.connection_rules` says what and why).

MLServer builds its uvicorn servers with no way to pass a protocol or limits, and uvicorn's httptools protocol has
no header limit nor a header timeout. `limit_http_connections` wraps `uvicorn.Server.startup`: with the config
loaded, it serves with a subclass of the protocol class uvicorn chose that counts a request's header bytes and
lines as they arrive and times their arrival, and sets `limit_concurrency` where unset. No MLServer import here.
"""

from __future__ import annotations

import asyncio
import socket
from typing import Any

from wrappers.limits.connection_rules import ConnectionLimits, answer
from wrappers.mlserver_compat import IncompatibleMLServer, require, require_function

_STARTUP = "uvicorn.Server.startup"
LINGER_S = 2.0  # how long a refused connection's last bytes are read and dropped before it is closed
IDLE_DRAIN_S = 2.0  # how long an idle kept-alive connection waits for one last request once the server drains
_PROTOCOL = "uvicorn.protocols.http.httptools_impl.HttpToolsProtocol"
_CALLBACKS = {
    "connection_made": ("self", "transport"),
    "connection_lost": ("self", "exc"),
    "data_received": ("self", "data"),
    "on_message_begin": ("self",),
    "on_header": ("self", "name", "value"),
    "on_headers_complete": ("self",),
    "on_body": ("self", "body"),
    "on_message_complete": ("self",),
    "shutdown": ("self",),
}


def check_connection_points() -> type:
    """What `limit_http_connections` wraps and subclasses, with the shapes uvicorn has; the protocol class."""
    import uvicorn
    from uvicorn.protocols.http import httptools_impl

    require_function(uvicorn.Server, "startup", _STARTUP, ("self", "sockets"), is_async=True)
    protocol = require(httptools_impl, "HttpToolsProtocol", _PROTOCOL)
    for name, parameters in _CALLBACKS.items():
        require_function(protocol, name, f"{_PROTOCOL}.{name}", parameters)
    return protocol


def limiting() -> bool:
    """Whether `limit_http_connections` has run in this process."""
    import uvicorn

    return getattr(uvicorn.Server.startup, "limits_connections", False)


def limit_http_connections(limits: ConnectionLimits) -> None:
    """Every uvicorn server this process starts from now on serves within `limits` (call before serving)."""
    import uvicorn

    base = check_connection_points()
    if limiting():
        return
    startup = uvicorn.Server.startup

    async def startup_within_limits(self: Any, sockets: list[socket.socket] | None = None) -> None:
        config = self.config
        if not issubclass(config.http_protocol_class, base):
            raise IncompatibleMLServer(
                _PROTOCOL, f"is not what uvicorn serves with ({config.http_protocol_class.__name__}): install httptools"
            )
        config.http_protocol_class = limited(config.http_protocol_class, limits)
        if config.limit_concurrency is None:
            config.limit_concurrency = limits.max_connections
        return await startup(self, sockets)

    # uvicorn has no hook for its protocol class: its method is replaced (mypy forbids that), marked as limiting.
    startup_within_limits.limits_connections = True  # type: ignore[attr-defined]
    uvicorn.Server.startup = startup_within_limits  # type: ignore[method-assign]


def limited(protocol: type, limits: ConnectionLimits) -> type:
    """`protocol` that refuses headers past `limits` (431) and closes connections whose headers or body stall (408)."""

    class Limited(protocol):
        def connection_made(self, transport: asyncio.Transport) -> None:
            super().connection_made(transport)
            self._limit_timer: asyncio.TimerHandle | None = None  # the deadline's watch, a drain's or a refusal's
            self._watch_at: float | None = None  # when the watch fires, where `_limit_timer` is the watch
            self._deadline: float | None = None  # when the headers or body under way are too late
            self._header_bytes = self._header_lines = 0
            self._in_headers, self._in_body, self._draining = True, False, False
            self._last_request = False  # the server drains: the next request is answered with Connection: close
            self._arm(limits.header_timeout_s, 408, "Request Timeout", limits.headers_late)

        def connection_lost(self, exc: Exception | None) -> None:
            self._cancel()
            super().connection_lost(exc)

        def on_message_begin(self) -> None:
            super().on_message_begin()
            if self._deadline is None or self._last_request:  # else the first request: its time runs since connect
                self._arm(limits.header_timeout_s, 408, "Request Timeout", limits.headers_late)

        def on_header(self, name: bytes, value: bytes) -> None:
            self._header_lines += 1
            super().on_header(name, value)

        def on_headers_complete(self) -> None:
            self._in_headers, self._in_body = False, True
            refusal = limits.headers_refusal(0, self._header_lines)  # lines counted exactly (bytes: data_received)
            if refusal is not None:
                self._refuse(431, "Request Header Fields Too Large", refusal)
                return  # no request cycle starts: the rest of what the parser holds is dropped
            self._arm(limits.body_idle_timeout_s, 408, "Request Timeout", limits.body_idle)
            super().on_headers_complete()
            if self._last_request and self.cycle is not None:
                self.cycle.keep_alive = False

        def on_body(self, body: bytes) -> None:
            if not self._draining:
                super().on_body(body)

        def on_message_complete(self) -> None:
            if self._draining:
                return
            self._disarm()
            self._header_bytes = self._header_lines = 0  # the next request's headers count from its first byte
            self._in_headers, self._in_body = True, False
            super().on_message_complete()

        def data_received(self, data: bytes) -> None:
            if self._draining:  # refused: what the client still sends is dropped until it reads the answer
                return
            if self._in_headers:
                self._header_bytes += len(data)  # a chunk may end the headers and start the body: checked below
            elif self._in_body:
                self._arm(limits.body_idle_timeout_s, 408, "Request Timeout", limits.body_idle)
            super().data_received(data)
            if self._in_headers and not self.transport.is_closing():
                refusal = limits.headers_refusal(self._header_bytes, self._header_lines)
                if refusal is not None:
                    self._refuse(431, "Request Header Fields Too Large", refusal)

        def shutdown(self) -> None:
            """The server drains. A connection answering a request closes once it is answered (uvicorn's way). An idle
            one is not closed at once, as uvicorn would: its client may have sent its next request as the drain began,
            and closing would reset the connection under that request, lost (the client cannot tell whether it was
            served). It stays open for at most IDLE_DRAIN_S: a request that arrives meanwhile is answered, with
            `Connection: close`; a connection still idle then is closed."""
            cycle = getattr(self, "cycle", None)
            if self._draining or self.transport.is_closing() or (cycle is not None and not cycle.response_complete):
                super().shutdown()
                return
            self._last_request = True
            if not self._header_bytes:  # else a request has begun: its header timer runs, and it is answered
                self._cancel()
                self._limit_timer = asyncio.get_running_loop().call_later(IDLE_DRAIN_S, self._close_if_idle)

        def _close_if_idle(self) -> None:
            self._limit_timer = None
            cycle = getattr(self, "cycle", None)
            if not self._header_bytes and (cycle is None or cycle.response_complete):
                self.transport.close()

        def _arm(self, seconds: float, status: int, reason: str, message: Any) -> None:
            """Headers or a body are due within `seconds`. The deadline moves; a timer is made only where none watches
            for it, or where the one there fires later than this deadline: a kept-alive connection's requests move
            it twice each and make no timer (a timer made and cancelled costs 3-4 us, twice a request)."""
            loop = asyncio.get_running_loop()
            deadline = loop.time() + seconds
            if self._watch_at is None or deadline < self._watch_at:
                self._cancel()  # a drain's timer, or a watch that would fire too late
                self._watch_at = deadline
                self._limit_timer = loop.call_at(deadline, self._watch)
            self._deadline, self._expiry = deadline, (status, reason, message)

        def _disarm(self) -> None:
            self._deadline = None  # the watch, when it fires, finds nothing due

        def _cancel(self) -> None:
            """No deadline, and no timer of any kind."""
            if self._limit_timer is not None:
                self._limit_timer.cancel()
                self._limit_timer = None
            self._watch_at = self._deadline = None

        def _watch(self) -> None:
            self._limit_timer = self._watch_at = None
            if self._deadline is None:
                return
            loop = asyncio.get_running_loop()
            if loop.time() < self._deadline:  # moved since: watch again then
                self._watch_at = self._deadline
                self._limit_timer = loop.call_at(self._deadline, self._watch)
                return
            self._deadline = None
            status, reason, message = self._expiry
            if not self.transport.is_closing():
                self._refuse(status, reason, message())

        def _refuse(self, status: int, reason: str, message: str) -> None:
            """Answer and close. Closing at once, with the client's bytes unread, would reset the connection and
            the client would lose the answer: the write side closes first, and what still comes is dropped for at
            most LINGER_S (the connection's end, whichever comes first)."""
            self._cancel()
            cycle = getattr(self, "cycle", None)
            answering = cycle is not None and cycle.response_started and not cycle.response_complete
            if answering:  # its answer is going out: another would garble it (a kept-alive one's last is whole)
                self.transport.close()
                return
            self.transport.write(answer(status, reason, message))
            if not self.transport.can_write_eof():
                self.transport.close()
                return
            self.transport.write_eof()
            self._draining = True
            self._limit_timer = asyncio.get_running_loop().call_later(LINGER_S, self.transport.close)

    Limited.__name__ = f"Limited{protocol.__name__}"
    return Limited
