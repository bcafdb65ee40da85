"""MLServer's server, built and started by Slipway's launcher instead of `mlserver start` (issue 29).

`mlserver start FOLDER` reads the settings (`mlserver.cli.serve.load_settings`), builds `MLServer(settings)`
and starts it with the models, and hands its REST app and gRPC server to no one; it logs a model that fails
to load and exits 0. `wrappers.launch` does the same steps itself through the functions here, so that the
REST app (built with the server) and the gRPC server (built as it starts serving) are handed to
`running` as they are made, and each model's load is awaited by the launcher, which sees why one fails.
"""

from __future__ import annotations

from typing import Any

from mlserver.cli import serve as mlserver_cli
from mlserver.grpc import server as grpc_server
from mlserver.registry import MultiModelRegistry
from mlserver.server import MLServer

from wrappers.mlserver_compat import require, require_function, running

_SERVER = "mlserver.server.MLServer"
_GRPC = "mlserver.grpc.server.GRPCServer"


def check_server_points() -> None:
    """What `build`, `serve` and `load_model` call, with the shapes MLServer 1.7 has (checked before a server is
    built, and by `python -m wrappers.mlserver_compat`)."""
    require_function(mlserver_cli, "load_settings", "mlserver.cli.serve.load_settings", ("folder",), is_async=True)
    require_function(MLServer, "__init__", f"{_SERVER}.__init__", ("self", "settings"))
    require_function(MLServer, "start", f"{_SERVER}.start", ("self", "models_settings"), is_async=True)
    require_function(MLServer, "stop", f"{_SERVER}.stop", ("self", "sig"), is_async=True)
    require_function(require(grpc_server, "GRPCServer", _GRPC), "_create_server", f"{_GRPC}._create_server", ("self",))
    require_function(
        MultiModelRegistry, "load", "mlserver.registry.MultiModelRegistry.load", ("self", "model_settings"), is_async=True
    )


async def load_settings(folder: str) -> tuple[Any, list[Any]]:
    """MLServer's settings (its `MLSERVER_*` variables, a `settings.json` in `folder`) and the models' settings
    its repository finds under `folder`, exactly as `mlserver start FOLDER` reads them."""
    check_server_points()
    return await mlserver_cli.load_settings(folder)


def build(settings: Any) -> Any:
    """`MLServer(settings)`, its REST app handed to `running` now and its gRPC server as soon as it is built.

    Call it on the running event loop (MLServer installs its signal handlers there)."""
    check_server_points()
    running.mark_launched()
    server = MLServer(settings)
    app = require(require(server, "_rest_server", f"{_SERVER}._rest_server"), "_app", "mlserver.rest.server.RESTServer._app")
    grpc = require(server, "_grpc_server", f"{_SERVER}._grpc_server")
    create_server = require_function(grpc, "_create_server", f"{_GRPC}._create_server", ())
    registry = require(server, "_model_registry", f"{_SERVER}._model_registry")
    require_function(registry, "load", "mlserver.registry.MultiModelRegistry.load", ("model_settings",), is_async=True)

    def create_and_hand_over() -> Any:
        built = create_server()
        running.add_grpc_server(built)
        return built

    grpc._create_server = create_and_hand_over  # on this instance: MLServer builds its gRPC server as it starts
    running.add_rest_app(app)
    return server


async def serve(server: Any) -> None:
    """Serve REST, gRPC and metrics until the server stops; the models are loaded apart (`load_model`)."""
    await server.start([])


async def load_model(server: Any, model_settings: Any) -> Any:
    """Load one model into the server's registry as `MLServer.start` does, raising what its load raised."""
    return await server._model_registry.load(model_settings)


async def stop(server: Any) -> None:
    await server.stop()


def prepare_process() -> None:
    """What `mlserver start` does before it reads its settings: MLServer's log handler, uvloop as the event loop."""
    from mlserver.logging import configure_logger
    from mlserver.utils import install_uvloop_event_loop

    configure_logger()
    install_uvloop_event_loop()


def model_identity(model_settings: Any) -> tuple[str, str | None, str]:
    """A listed model's name, version and the settings file it was read from (MLServer keeps that privately)."""
    return model_settings.name, model_settings.version, str(getattr(model_settings, "_source", None) or "?")
