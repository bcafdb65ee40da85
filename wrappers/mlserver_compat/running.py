"""The REST app and gRPC server MLServer serves in this process, as Slipway's launcher handed them over.

MLServer 1.7 hands its servers to no one; `wrappers.launch` builds them itself (`servers.build`) and
registers them here, so the fast paths and guards find them without walking the heap (issue 29): a
heap walk cost a full pass over every object at each load, and missed what the collector had frozen.
Empty where no launcher runs: a worker process (`parallel_workers` > 0), a bare load in a test, or a
process `mlserver start` began (`started_by_mlserver_cli`, refused by the runtime). Nothing here imports
MLServer or grpc: the REST side must not pull in MLServer's gRPC protos.
"""

from __future__ import annotations

import sys
from typing import Any

_MLSERVER_CLI = "mlserver.cli.main"


class _Running:
    launched = False  # set by the launcher before it builds MLServer's server
    rest_apps: list[Any] = []
    grpc_servers: list[Any] = []
    grpc_handlers: list[Any] = []  # added to every gRPC server, including one built after the handler


def mark_launched() -> None:
    """Say that this process's MLServer server is the launcher's (before it is built)."""
    _Running.launched = True


def launched() -> bool:
    return _Running.launched


def started_by_mlserver_cli() -> bool:
    """Whether MLServer's own `mlserver start` runs this process (as a console script or `python -m`)."""
    main_spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    return _MLSERVER_CLI in sys.modules or getattr(main_spec, "name", None) == _MLSERVER_CLI


def add_rest_app(app: Any) -> None:
    _Running.rest_apps.append(app)


def rest_apps() -> list[Any]:
    """MLServer's REST app(s) in this process, as the launcher built them."""
    return list(_Running.rest_apps)


def add_grpc_server(server: Any) -> None:
    """A gRPC server MLServer has just built (not yet started): it gets every handler added so far."""
    _Running.grpc_servers.append(server)
    if _Running.grpc_handlers:
        server.add_generic_rpc_handlers(tuple(_Running.grpc_handlers))


def add_grpc_handler(handler: Any) -> int:
    """Serve `handler` on the gRPC server(s) of this process, those built already and the one MLServer builds
    once it starts (it builds its gRPC server as it starts serving, while the models load); returns how many
    servers have it or will: 0 where no launcher runs here. grpc looks handlers up per call, so methods added
    to a running server are served."""
    if handler not in _Running.grpc_handlers:
        _Running.grpc_handlers.append(handler)
        for server in _Running.grpc_servers:
            server.add_generic_rpc_handlers((handler,))
    return max(len(_Running.grpc_servers), 1 if _Running.launched else 0)


def server_kinds() -> list[str]:
    """The kinds of server (REST app, gRPC server) the launcher has handed over so far."""
    return sorted({type(obj).__name__ for obj in _Running.rest_apps + _Running.grpc_servers})
