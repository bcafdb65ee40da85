"""Several MLServer processes on the same ports, one metrics view of them all (`wrappers.frontends`, issue 27).

gRPC core binds with SO_REUSEPORT by default (`grpc.so_reuseport`), so each front end's gRPC server can take
the same port. MLServer's REST and metrics servers are uvicorn servers that bind a host and port themselves,
without SO_REUSEPORT, and MLServer passes no sockets: `share_uvicorn_ports` makes a uvicorn server that would
bind a host and port bind a socket with SO_REUSEPORT instead, where the kernel spreads new connections over
the processes. `serve_metrics_of_all_processes` makes MLServer's metrics endpoint (which reads prometheus_client's
multi-process files only with parallel workers) sum the files every front end writes, so that a scrape that
reaches any one of them sees the whole server's counts. No MLServer gRPC import here.
"""

from __future__ import annotations

import os
import socket
from typing import Any

from wrappers.mlserver_compat import IncompatibleMLServer, require, require_function

_STARTUP = "uvicorn.Server.startup"
_ENDPOINT = "mlserver.metrics.prometheus.PrometheusEndpoint._registry"
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"


def check_shared_ports() -> None:
    """What both functions replace, with the shapes uvicorn and MLServer 1.7 have."""
    import uvicorn
    from mlserver.metrics import prometheus

    require_function(uvicorn.Server, "startup", _STARTUP, ("self", "sockets"), is_async=True)
    endpoint = require(prometheus, "PrometheusEndpoint", "mlserver.metrics.prometheus.PrometheusEndpoint")
    if not isinstance(require(endpoint, "_registry", _ENDPOINT), property):
        raise IncompatibleMLServer(_ENDPOINT, "is not a property")


def sharing() -> bool:
    """Whether `share_uvicorn_ports` has run in this process."""
    import uvicorn

    return getattr(uvicorn.Server.startup, "shares_ports", False)


def share_uvicorn_ports() -> None:
    """Every uvicorn server in this process binds its host and port with SO_REUSEPORT (call before serving)."""
    import uvicorn

    check_shared_ports()
    if sharing():
        return
    startup = uvicorn.Server.startup

    async def startup_on_a_shared_port(self: Any, sockets: list[socket.socket] | None = None) -> None:
        config = self.config
        if sockets is None and config.fd is None and config.uds is None:
            try:
                shared = socket.create_server((config.host, config.port), reuse_port=True, backlog=config.backlog)
            except OSError:  # uvicorn binds again, fails the same way, logs why and exits
                return await startup(self, None)
            shared.set_inheritable(False)
            return await startup(self, [shared])
        return await startup(self, sockets)

    # uvicorn has no hook for the socket it binds: its method is replaced (mypy forbids that), marked for `sharing`.
    startup_on_a_shared_port.shares_ports = True  # type: ignore[attr-defined]
    uvicorn.Server.startup = startup_on_a_shared_port  # type: ignore[method-assign]


def serve_metrics_of_all_processes() -> None:
    """MLServer's metrics endpoint sums prometheus_client's multi-process files under $PROMETHEUS_MULTIPROC_DIR
    (which must be set before prometheus_client is first imported: it picks its value class then)."""
    from mlserver.metrics import prometheus
    from prometheus_client import CollectorRegistry
    from prometheus_client.multiprocess import MultiProcessCollector

    check_shared_ports()
    folder = os.environ.get(MULTIPROC_ENV)
    if not folder or not os.path.isdir(folder):
        raise IncompatibleMLServer(_ENDPOINT, f"cannot sum the processes' metrics: ${MULTIPROC_ENV} names no folder")

    def registry(_self: Any) -> CollectorRegistry:
        summed = CollectorRegistry()
        MultiProcessCollector(summed, path=folder)
        return summed

    prometheus.PrometheusEndpoint._registry = property(registry)
