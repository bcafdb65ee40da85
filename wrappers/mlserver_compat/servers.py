"""MLServer's server, built and started by Slipway's launcher instead of `mlserver start` (issue 29).

`mlserver start FOLDER` reads the settings (`mlserver.cli.serve.load_settings`), builds `MLServer(settings)`
and starts it with the models, and hands its REST app and gRPC server to no one; it logs a model that fails
to load and exits 0. `wrappers.launch` does the same steps itself through the functions here, so that the
REST app (built with the server) and the gRPC server (built as it starts serving) are handed to
`running` as they are made, and each model's load is awaited by the launcher, which sees why one fails. The gRPC
server is built with Slipway's drain gate as its first interceptor (`wrappers.limits.grpc_drain`), and on SIGTERM
the launcher drains both servers (`drain_on_signals`) instead of MLServer's stop.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager
from typing import Any

from mlserver.cli import serve as mlserver_cli
from mlserver.errors import ModelNotFound
from mlserver.grpc import server as grpc_server
from mlserver.handlers.dataplane import DataPlane
from mlserver.registry import MultiModelRegistry
from mlserver.server import MLServer

from wrappers.limits.grpc_drain import GOAWAY_SENT_S, REFUSING_AT_MOST_S, STOP_LEFT_S, DrainGate
from wrappers.mlserver_compat import IncompatibleMLServer, require, require_function, running

logger = logging.getLogger("mlserver")  # MLServer's log: the launcher's lines go where the server's go
_SERVER = "mlserver.server.MLServer"
_GRPC = "mlserver.grpc.server.GRPCServer"
_AIO = "mlserver.grpc.server.aio"
_AIO_SERVER = ("migration_thread_pool", "handlers", "interceptors", "options", "maximum_concurrent_rpcs", "compression")


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


def check_grpc_interceptors() -> Any:
    """What `build` reaches to put an interceptor first on MLServer's gRPC server: `GRPCServer._create_server` builds
    it with `aio.server(..., interceptors=...)`, `aio` read from its module's globals (grpc.aio); returns that."""
    aio = require(grpc_server, "aio", _AIO)
    require_function(aio, "server", f"{_AIO}.server", _AIO_SERVER)
    create = require_function(require(grpc_server, "GRPCServer", _GRPC), "_create_server", f"{_GRPC}._create_server", ("self",))
    if not {"aio", "server", "_interceptors"} <= set(create.__code__.co_names):
        raise IncompatibleMLServer(f"{_GRPC}._create_server", "no longer builds its server with aio.server(interceptors=...)")
    return aio


class _AioWithInterceptor:
    """grpc.aio, but for `server`, which puts `first` ahead of the interceptors it is given (keyword only, as
    MLServer passes them) and records that it was called."""

    def __init__(self, aio: Any, first: Any) -> None:
        self._aio, self._first, self.called = aio, first, False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._aio, name)

    def server(self, *args: Any, interceptors: Any = None, **kwargs: Any) -> Any:
        self.called = True
        return self._aio.server(*args, interceptors=[self._first, *(interceptors or ())], **kwargs)


@contextmanager
def _interceptor_first(interceptor: Any) -> Iterator[None]:
    """While the block runs (MLServer's `_create_server`, on the event loop's thread), MLServer's gRPC server module
    builds its server with `interceptor` first; IncompatibleMLServer where it did not build one through it."""
    aio = check_grpc_interceptors()
    swapped = _AioWithInterceptor(aio, interceptor)
    grpc_server.aio = swapped
    try:
        yield
    finally:
        grpc_server.aio = aio
    if not swapped.called:
        raise IncompatibleMLServer(f"{_GRPC}._create_server", "built its server without calling aio.server")


def build(settings: Any, gate: DrainGate, on_unknown_model: Callable[[], None] = lambda: None) -> Any:
    """`MLServer(settings)`, its REST app handed to `running` now and its gRPC server as soon as it is built, with
    `gate` as its first interceptor (`drain_on_signals` closes it).

    Its data plane answers an inference request for a model (or version) the registry does not hold before MLServer's
    request metrics see it (`on_unknown_model` counts it instead): MLServer labels them with the name the client sent,
    five series for each name, so a client could grow the metrics endpoint without bound. Call it on the running
    event loop (MLServer installs its signal handlers there)."""
    check_server_points()
    check_grpc_interceptors()
    running.mark_launched()
    server = MLServer(settings)
    app = require(require(server, "_rest_server", f"{_SERVER}._rest_server"), "_app", "mlserver.rest.server.RESTServer._app")
    grpc = require(server, "_grpc_server", f"{_SERVER}._grpc_server")
    create_server = require_function(grpc, "_create_server", f"{_GRPC}._create_server", ())
    registry = require(server, "_model_registry", f"{_SERVER}._model_registry")
    require_function(registry, "load", "mlserver.registry.MultiModelRegistry.load", ("model_settings",), is_async=True)
    _answer_unknown_models_first(require(server, "_data_plane", f"{_SERVER}._data_plane"), registry, on_unknown_model)

    def create_and_hand_over() -> Any:
        with _interceptor_first(gate):
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


def drain_on_signals(server: Any, grace_s: float, gate: DrainGate) -> None:
    """On SIGTERM (SIGINT, SIGQUIT) stop accepting on REST and gRPC at once, answer what each has accepted for at most
    `grace_s`, then stop. Call it on the running event loop, after `build` (it replaces the handlers MLServer added).

    MLServer's own handler stopped gRPC first, with 5 s of grace, REST accepting new connections meanwhile, then REST
    with no bound: one request that never ended (a client that stops sending its body) kept the process until the
    pod's grace period ran out and it was killed, losing every request still in flight; and with parallel workers it
    closed their pool first, under the requests they were answering. And its gRPC stop cancelled the calls grpc had
    taken but not yet handed to a handler (`gate`, `wrappers.limits.grpc_drain`, says why it refuses them instead)."""
    rest = require(server, "_rest_server", f"{_SERVER}._rest_server")
    grpc = require(server, "_grpc_server", f"{_SERVER}._grpc_server")
    require_function(rest, "stop", "mlserver.rest.server.RESTServer.stop", ("sig",), is_async=True)
    loop = asyncio.get_running_loop()
    draining: list[asyncio.Task[None]] = []

    def on_signal(sig: int) -> None:
        if draining:
            logger.info("signal %d: already draining (at most %g s)", sig, grace_s)
            return
        gate.close()  # now, before the loop takes another call: each new one is refused UNAVAILABLE
        draining.append(loop.create_task(_drain(server, rest, grpc, gate, sig, grace_s)))

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGQUIT):
        loop.add_signal_handler(sig, on_signal, sig)


async def _drain(server: Any, rest: Any, grpc: Any, gate: DrainGate, sig: int, grace_s: float) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + grace_s
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
        # grpc's stop kills the calls it has not handed to a handler: stop it once the refused clients stop sending
        refusing_s = min(REFUSING_AT_MOST_S, grace_s)
        if not await gate.quiet(at_most_s=refusing_s):
            gate.hold()  # each new call waits in the gate: a client that sends again at once runs out of calls to send
            logger.info("gRPC clients still send after %d refusals: holding each new call until gRPC stops", gate.refused)
            if not await gate.quiet(at_most_s=max(refusing_s, grace_s - STOP_LEFT_S)):
                logger.info("gRPC clients still send after %d calls held: stopping gRPC regardless", gate.held)
        stopping = asyncio.ensure_future(grpc_server.stop(max(deadline - loop.time(), GOAWAY_SENT_S)))
        if gate.holding:
            await asyncio.sleep(GOAWAY_SENT_S)  # the stop sends GOAWAY: the clients send no more on these connections
            gate.release()  # then the held calls are answered UNAVAILABLE
        await stopping  # and the calls still in flight at the end of the drain cancelled
    if uvicorn_server is not None:
        state = uvicorn_server.server_state
        while (state.connections or state.tasks) and loop.time() < deadline + 1:
            await asyncio.sleep(0.05)
    for part, method in (("_inference_pool_registry", "close"), ("_kafka_server", "stop")):
        found = getattr(server, part, None)
        if found is not None:
            await getattr(found, method)()
    metrics = getattr(server, "_metrics_server", None)
    if metrics is not None:
        await metrics.stop(sig)
    logger.info("drained: stopping")
