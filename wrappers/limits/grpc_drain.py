"""The gRPC half of the drain (issue 47): once the server drains, every new call is refused UNAVAILABLE by the
server's first interceptor, while the calls it took before finish; the launcher stops grpc's server only once no new
call has come for a moment (`DrainGate.quiet`).

Why not stop grpc's server at once, as MLServer does: `grpc.aio.Server.stop` makes grpc core kill every call its
transport has taken but no handler has yet, and every call that reaches it until its clients have read the GOAWAY
it sends, as CANCELLED (grpc/grpc#41785): with 8 clients sending back to back, 6 or 7 calls a run, on Slipway and on
plain MLServer alike. A call that ends CANCELLED cannot be told from one the server answered in part, so a client must
not retry it. grpc offers no GOAWAY without that stop (only through an xDS control plane), so the gate keeps grpc's
loop taking calls, the pending ones included, and answers each new one UNAVAILABLE, which says the call was not
processed and may be sent again, elsewhere; a client that stops sending, as the refusal asks, leaves no call for the
stop to kill.

A client that sends again at once on each refusal never leaves the server quiet, and stopping grpc under it lost a
call or more a run. So after REFUSING_AT_MOST_S of refusals the gate holds each new call instead (`hold`): its
handler waits, unanswered, so a client's every concurrent call ends up waiting in the gate and it has nothing more
to send; once no new call has come for a moment, nothing waits in grpc core, the launcher starts grpc's stop (its
GOAWAY tells the clients to send no more on this connection) and only then answers the held calls UNAVAILABLE
(`release`): the client's next try finds the listener closed, UNAVAILABLE too. Public grpc API only: the launcher
builds MLServer's server with it (`wrappers.mlserver_compat.servers`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc

QUIET_S = 0.5  # no new call for this long: the clients have stopped sending, none is left waiting in grpc core
REFUSING_AT_MOST_S = 2.0  # clients that go on sending regardless are refused this long, then their calls are held
STOP_LEFT_S = 1.0  # of the drain, left for grpc's stop and the held calls' answers after holding gives up
GOAWAY_SENT_S = 0.2  # after grpc's stop begins: its GOAWAY is on the wire before the held calls are answered
REFUSAL = "the server is stopping (SIGTERM) and takes no new calls; this one was not processed: send it again, to another replica"


class DrainGate(grpc.aio.ServerInterceptor):
    """The server's first interceptor: passes every call untouched until `close`, then answers each new one
    UNAVAILABLE (with the same streaming shape as its method, so grpc reads it as it would have): at once, or, after
    `hold`, once `release`d."""

    def __init__(self) -> None:
        self._closed_at: float | None = None
        self._last_call = 0.0
        self._released: asyncio.Event | None = None  # set by `hold`: new calls wait for it
        self.refused = 0
        self.held = 0

    def close(self) -> None:
        """Refuse every call from now on (the drain's first step, in the signal handler)."""
        if self._closed_at is None:
            self._closed_at = time.monotonic()

    @property
    def closed(self) -> bool:
        return self._closed_at is not None

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(handler_call_details)
        if self._closed_at is None or handler is None:  # serving; or an unknown method: grpc's UNIMPLEMENTED
            return handler
        self._last_call = time.monotonic()
        self.refused += 1
        if self._released is None:
            return _refusing(handler, None)
        self.held += 1
        return _refusing(handler, self._released)

    def hold(self) -> None:
        """From now on, answer each new call only once `release` is called (the gate is closed)."""
        if self._closed_at is None:
            raise RuntimeError("the gate is open: close it first")
        if self._released is None:
            self._released = asyncio.Event()

    @property
    def holding(self) -> bool:
        return self._released is not None

    def release(self) -> None:
        """Answer the held calls, and each new one, UNAVAILABLE now."""
        if self._released is not None:
            self._released.set()

    async def quiet(self, quiet_s: float = QUIET_S, at_most_s: float = REFUSING_AT_MOST_S) -> bool:
        """Wait until no new call has come for `quiet_s` (True), or `at_most_s` after `close` (False)."""
        if self._closed_at is None:
            raise RuntimeError("the gate is open: close it first")
        end = self._closed_at + at_most_s
        while True:
            now = time.monotonic()
            if now - max(self._closed_at, self._last_call) >= quiet_s:
                return True
            if now >= end:
                return False
            await asyncio.sleep(min(0.05, end - now))


def _refusing(handler: grpc.RpcMethodHandler, released: asyncio.Event | None) -> grpc.RpcMethodHandler:
    """A handler of `handler`'s kind that reads nothing and answers UNAVAILABLE (once `released` is set, if given)."""

    async def refuse(context: grpc.aio.ServicerContext) -> None:
        if released is not None:
            await released.wait()
        await context.abort(grpc.StatusCode.UNAVAILABLE, REFUSAL)

    async def unary(request: Any, context: grpc.aio.ServicerContext) -> Any:
        await refuse(context)

    async def streamed(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
        await refuse(context)
        yield None  # an async generator, as grpc serves a streaming answer; never reached: abort raises

    if handler.request_streaming and handler.response_streaming:
        return grpc.stream_stream_rpc_method_handler(streamed)
    if handler.request_streaming:
        return grpc.stream_unary_rpc_method_handler(unary)
    if handler.response_streaming:
        return grpc.unary_stream_rpc_method_handler(streamed)
    return grpc.unary_unary_rpc_method_handler(unary)
