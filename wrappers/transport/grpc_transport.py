"""gRPC's server reads each request on grpc.aio's poller thread, not on EventEngine's threads.

grpcio 1.85 reads connections on EventEngine's thread pool, which hands every event on to grpc.aio's poller
thread, which hands it on to the event loop: at low load, each hand-off wakes a thread that had gone to sleep.
With two of gRPC core's experiments turned off, its older endpoints read the sockets on the thread polling the
completion queue, which is grpc.aio's poller: one hand-off fewer per event, and EventEngine's threads no longer
wake for requests (4.4 wake-ups per request before, 0.12 after: timers). Digits over gRPC at concurrency 1
(2 CPUs, alternating rounds, six runs in one day): p50 lower in five of the six, by 5% in the median run (up
to 20%), for 3-16% less server CPU per request; at concurrency 8 within noise (docs/benchmarks.md).

`GRPC_EXPERIMENTS` is gRPC core's own configuration variable, read once, as `grpc` is first imported: the launcher sets it
before anything imports grpc. A value the environment sets already wins (empty: gRPC's own defaults). An
experiment a later grpcio no longer has is named in gRPC's own error log line ("Unknown experiment");
tests/wrappers/test_grpc_transport.py fails where the requests go through EventEngine's threads again.
"""

from __future__ import annotations

import os
import sys
from collections.abc import MutableMapping

EXPERIMENTS_ENV = "GRPC_EXPERIMENTS"
# EventEngine's listener and its endpoints for everything but clients: off, gRPC core falls back to the endpoints
# its completion-queue pollers read (both must be off; either alone measured as the default).
TURNED_OFF = ("event_engine_listener", "event_engine_for_all_other_endpoints")
POLLER_READS = ",".join(f"-{experiment}" for experiment in TURNED_OFF)


def read_on_poller_thread(environ: MutableMapping[str, str] = os.environ) -> str:
    """Turn the two experiments off for this process and those it starts, unless the environment chooses gRPC's
    experiments already; the line to log about it. Call it before anything imports grpc."""
    if EXPERIMENTS_ENV in environ:
        return f"{EXPERIMENTS_ENV}={environ[EXPERIMENTS_ENV]!r} from the environment: gRPC's experiments as it says"
    if environ is os.environ and "grpc" in sys.modules:
        return f"{EXPERIMENTS_ENV} left unset: grpc was imported before the launcher could set it"
    environ[EXPERIMENTS_ENV] = POLLER_READS
    return f"gRPC reads requests on grpc.aio's poller thread ({EXPERIMENTS_ENV}={POLLER_READS})"
