"""grpc.aio's poller thread, which `pin_event_loop` (`wrappers.running.cpu_pinning`) puts on the event loop's CPU.

grpc offers no handle on the thread its asyncio server polls its completion queue on; it runs
`PollerCompletionQueue._poll_wrapper` (in grpc's private Cython module) on a plain Python thread, whose
default name ends with the target's name. Only grpc is imported here, never MLServer.
"""

from __future__ import annotations

import threading

from wrappers.mlserver_compat import IncompatibleMLServer, require

GRPC_POLLER_TARGET = "_poll_wrapper"
_QUEUE = "grpc._cython.cygrpc.PollerCompletionQueue"


def check_poller_thread() -> None:
    """The poller's target is still `PollerCompletionQueue._poll_wrapper`, the name its thread carries."""
    try:
        from grpc._cython import cygrpc
    except ImportError:
        raise IncompatibleMLServer("grpc._cython.cygrpc", "cannot be imported") from None
    require(require(cygrpc, "PollerCompletionQueue", _QUEUE), GRPC_POLLER_TARGET, f"{_QUEUE}.{GRPC_POLLER_TARGET}")


def grpc_poller_threads() -> list[threading.Thread]:
    """The threads grpc.aio polls on in this process (none where no gRPC server runs)."""
    check_poller_thread()
    return [thread for thread in threading.enumerate() if GRPC_POLLER_TARGET in thread.name and thread.native_id is not None]
