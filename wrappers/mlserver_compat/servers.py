"""MLServer's server, built and started by Slipway's launcher instead of `mlserver start` (issue 29).

`mlserver start FOLDER` reads the settings (`mlserver.cli.serve.load_settings`), builds `MLServer(settings)`
and starts it with the models, and hands its REST app and gRPC server to no one; it logs a model that fails
to load and exits 0. `wrappers.launch` does the same steps itself through the functions here, so that the
REST app (built with the server) and the gRPC server (built as it starts serving) are handed to
`running` as they are made, and each model's load is awaited by the launcher, which sees why one fails.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import AsyncIterator, Callable
from typing import Any

from mlserver.cli import serve as mlserver_cli
from mlserver.errors import ModelNotFound
from mlserver.grpc import server as grpc_server
from mlserver.handlers.dataplane import DataPlane
from mlserver.registry import MultiModelRegistry
from mlserver.server import MLServer

from wrappers.mlserver_compat import require, require_function, running

logger = logging.getLogger("mlserver")  # MLServer's log: the launcher's lines go where the server's go
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
    require_function(
        MultiModelRegistry,
        "get_model",
        "mlserver.registry.MultiModelRegistry.get_model",
        ("self", "name", "version"),
        is_async=True,
    )
    require_function(
        DataPlane, "infer", "mlserver.handlers.DataPlane.infer", ("self", "payload", "name", "version"), is_async=True
    )
    require_function(
        DataPlane, "infer_stream", "mlserver.handlers.DataPlane.infer_stream", ("self", "payloads", "name", "version")
    )


async def load_settings(folder: str) -> tuple[Any, list[Any]]:
    """MLServer's settings (its `MLSERVER_*` variables, a `settings.json` in `folder`) and the models' settings
    its repository finds under `folder`, exactly as `mlserver start FOLDER` reads them."""
    check_server_points()
    return await mlserver_cli.load_settings(folder)


def build(settings: Any, on_unknown_model: Callable[[], None] = lambda: None) -> Any:
    """`MLServer(settings)`, its REST app handed to `running` now and its gRPC server as soon as it is built.

    Its data plane answers an inference request for a model (or version) the registry does not hold before MLServer's
    request metrics see it (`on_unknown_model` counts it instead): MLServer labels them with the name the client sent,
    five series for each name, so a client could grow the metrics endpoint without bound. Call it on the running
    event loop (MLServer installs its signal handlers there)."""
    check_server_points()
    running.mark_launched()
    server = MLServer(settings)
    app = require(require(server, "_rest_server", f"{_SERVER}._rest_server"), "_app", "mlserver.rest.server.RESTServer._app")
    grpc = require(server, "_grpc_server", f"{_SERVER}._grpc_server")
    create_server = require_function(grpc, "_create_server", f"{_GRPC}._create_server", ())
    registry = require(server, "_model_registry", f"{_SERVER}._model_registry")
    require_function(registry, "load", "mlserver.registry.MultiModelRegistry.load", ("model_settings",), is_async=True)
    _answer_unknown_models_first(require(server, "_data_plane", f"{_SERVER}._data_plane"), registry, on_unknown_model)

    def create_and_hand_over() -> Any:
        built = create_server()
        running.add_grpc_server(built)
        return built

    grpc._create_server = create_and_hand_over  # on this instance: MLServer builds its gRPC server as it starts
    running.add_rest_app(app)
    return server


def _answer_unknown_models_first(data_plane: Any, registry: Any, on_unknown_model: Callable[[], None]) -> None:
    """On this data plane (the one MLServer's REST endpoints and gRPC servicer call), look the model up before
    MLServer's `infer` and `infer_stream` label their metrics with its name: an unknown one raises MLServer's own
    ModelNotFound (404 / NOT_FOUND, its message) without a series."""
    infer = require_function(
        data_plane, "infer", "mlserver.handlers.DataPlane.infer", ("payload", "name", "version"), is_async=True
    )
    infer_stream = require_function(
        data_plane, "infer_stream", "mlserver.handlers.DataPlane.infer_stream", ("payloads", "name", "version")
    )

    async def served(name: str, version: str | None) -> None:
        try:
            await registry.get_model(name, version)
        except ModelNotFound:
            on_unknown_model()
            raise

    async def infer_served(payload: Any, name: str, version: str | None = None) -> Any:
        await served(name, version)
        return await infer(payload, name, version)

    async def infer_stream_served(payloads: Any, name: str, version: str | None = None) -> AsyncIterator[Any]:
        await served(name, version)
        async for response in infer_stream(payloads, name, version):
            yield response

    data_plane.infer, data_plane.infer_stream = infer_served, infer_stream_served  # on this instance only


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


def drain_on_signals(server: Any, grace_s: float) -> None:
    """On SIGTERM (SIGINT, SIGQUIT) stop accepting on REST and gRPC at once, answer what each has accepted for at most
    `grace_s`, then stop. Call it on the running event loop, after `build` (it replaces the handlers MLServer added).

    MLServer's own handler stopped gRPC first, with 5 s of grace, REST accepting new connections meanwhile, then REST
    with no bound: one request that never ended (a client that stops sending its body) kept the process until the
    pod's grace period ran out and it was killed, losing every request still in flight; and with parallel workers it
    closed their pool first, under the requests they were answering."""
    rest = require(server, "_rest_server", f"{_SERVER}._rest_server")
    grpc = require(server, "_grpc_server", f"{_SERVER}._grpc_server")
    require_function(rest, "stop", "mlserver.rest.server.RESTServer.stop", ("sig",), is_async=True)
    loop = asyncio.get_running_loop()
    draining: list[asyncio.Task[None]] = []

    def on_signal(sig: int) -> None:
        if draining:
            logger.info("signal %d: already draining (at most %g s)", sig, grace_s)
            return
        draining.append(loop.create_task(_drain(server, rest, grpc, sig, grace_s)))

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGQUIT):
        loop.add_signal_handler(sig, on_signal, sig)


async def _drain(server: Any, rest: Any, grpc: Any, sig: int, grace_s: float) -> None:
    logger.info(
        "signal %d: accepting no more requests, answering those in flight for at most %g s (SLIPWAY_DRAIN_SECONDS)",
        sig,
        grace_s,
    )
    uvicorn_server = getattr(rest, "_server", None)  # made as REST starts serving
    if uvicorn_server is not None:
        uvicorn_server.config.timeout_graceful_shutdown = grace_s  # then uvicorn cancels what is left
    await rest.stop(sig)  # uvicorn closes its listener and idle connections now, the others once answered
    grpc_server = getattr(grpc, "_server", None)  # made as gRPC starts serving
    if grpc_server is not None:
        await grpc_server.stop(grace_s)  # refuses new RPCs now, cancels those in flight after grace_s
    if uvicorn_server is not None:
        deadline = asyncio.get_running_loop().time() + grace_s + 1
        state = uvicorn_server.server_state
        while (state.connections or state.tasks) and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.05)
    for part, method in (("_inference_pool_registry", "close"), ("_kafka_server", "stop")):
        found = getattr(server, part, None)
        if found is not None:
            await getattr(found, method)()
    metrics = getattr(server, "_metrics_server", None)
    if metrics is not None:
        await metrics.stop(sig)
    logger.info("drained: stopping")
