"""MLServer's model repository API (index, load, unload): where `wrappers.repository_api` guards it.

MLServer 1.7 builds its REST app and gRPC server before any model loads and offers neither a REST
middleware hook nor gRPC interceptors. Its one early hook is the model repository class it imports by
name (`MLSERVER_MODEL_REPOSITORY_IMPLEMENTATION`): subclassing its own (`MLServerRepository`), the guard
wraps the REST server's constructor (to add a middleware to the app it builds) and the repository methods
of its two gRPC servicers (before the server registers them). What it touches is checked here first.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

from fastapi import FastAPI
from mlserver.grpc import model_repository as grpc_repository
from mlserver.grpc import server as grpc_server
from mlserver.grpc import servicers
from mlserver.logging import logger as mlserver_logger  # noqa: F401  (MLServer's log, configured by then)
from mlserver.repository import repository
from mlserver.rest import endpoints
from mlserver.rest import server as rest_server

from wrappers.mlserver_compat import IncompatibleMLServer, require, require_function, running
from wrappers.mlserver_compat.rest_app import probe_app

REST_PREFIX = "/v2/repository"
GRPC_METHODS = ("RepositoryIndex", "RepositoryModelLoad", "RepositoryModelUnload")
_WRAPPED = "__slipway_wrapped__"
_SERVICERS = {
    "mlserver.grpc.servicers.InferenceServicer": (servicers, "InferenceServicer"),
    "mlserver.grpc.model_repository.ModelRepositoryServicer": (grpc_repository, "ModelRepositoryServicer"),
}
# MLServer's own repository (folders with a model-settings.json), which the guard's class extends; `object`
# where it has moved, and `check_guard_points` (run by the guard's constructor) says so.
MLServerRepository: type = getattr(repository, "SchemalessModelRepository", object)


def _rest_server_class() -> Any:
    return require(rest_server, "RESTServer", "mlserver.rest.server.RESTServer")


def _servicer_classes() -> dict[str, type]:
    return {symbol: require(module, name, symbol) for symbol, (module, name) in _SERVICERS.items()}


def check_guard_points() -> None:
    """MLServer's repository class, its REST server's constructor and its servicers' async repository methods,
    as `wrappers.repository_api` guards them (cheap: run as the server starts)."""
    if MLServerRepository is object:
        raise IncompatibleMLServer("mlserver.repository.repository.SchemalessModelRepository", "does not exist")
    require_function(
        _rest_server_class(),
        "__init__",
        "mlserver.rest.server.RESTServer.__init__",
        ("self", "settings", "data_plane", "model_repository_handlers"),
    )
    require(grpc_server, "GRPCServer", "mlserver.grpc.server.GRPCServer")
    for symbol, servicer in _servicer_classes().items():
        for name in repository_methods(servicer):
            require_function(servicer, name, f"{symbol}.{name}", ("self", "request", "context"), is_async=True)


def check_repository_routes(app: FastAPI | None = None) -> list[str]:
    """The app's repository routes (MLServer's real app, else one built for the check), all under REST_PREFIX."""
    paths = repository_route_paths(probe_app() if app is None else app)
    outside = [path for path in paths if not under_prefix(path)]
    if len(paths) < len(GRPC_METHODS) or outside:
        raise IncompatibleMLServer(
            "mlserver.rest.endpoints.ModelRepositoryEndpoints", f"routes are {paths}, not the three under {REST_PREFIX}"
        )
    return paths


def under_prefix(path: str) -> bool:
    return path == REST_PREFIX or path.startswith(REST_PREFIX + "/")


def repository_methods(servicer: type) -> list[str]:
    """Every `Repository*` method of a servicer (any a newer MLServer adds is guarded alike); all of
    GRPC_METHODS must be there."""
    names = sorted(name for name in dir(servicer) if name.startswith("Repository"))
    missing = sorted(set(GRPC_METHODS) - set(names))
    if missing:
        raise IncompatibleMLServer(f"{servicer.__module__}.{servicer.__name__}.{missing[0]}", "does not exist")
    return names


def servers_built() -> list[str]:
    """The kinds of MLServer server (REST app, gRPC server) `wrappers.launch` has built in this process so far."""
    return running.server_kinds()


def repository_route_paths(app: FastAPI) -> list[str]:
    """The paths of the app's routes that MLServer binds to its repository endpoints."""
    endpoints_class = require(endpoints, "ModelRepositoryEndpoints", "mlserver.rest.endpoints.ModelRepositoryEndpoints")
    return [
        getattr(route, "path", "")
        for route in app.routes
        if isinstance(getattr(getattr(route, "endpoint", None), "__self__", None), endpoints_class)
    ]


def on_rest_app_built(callback: Callable[[FastAPI], None]) -> None:
    """Call `callback(app)` with each REST app MLServer builds from now on, as its REST server is constructed
    (once: later calls keep the first callback)."""
    server_class = _rest_server_class()
    original_init = server_class.__init__
    if getattr(original_init, _WRAPPED, False):
        return

    @functools.wraps(original_init)
    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        original_init(self, *args, **kwargs)
        callback(require(self, "_app", "mlserver.rest.server.RESTServer._app"))

    setattr(init, _WRAPPED, True)
    server_class.__init__ = init


def wrap_repository_methods(wrap: Callable[[Callable[..., Any], str], Callable[..., Any]]) -> None:
    """Replace every repository method of MLServer's gRPC servicers by `wrap(method, "Servicer.Method")`, on the
    classes, before MLServer registers them (once each)."""
    for symbol, servicer in _servicer_classes().items():
        for name in repository_methods(servicer):
            method = getattr(servicer, name)
            if getattr(method, _WRAPPED, False):
                continue
            if not inspect.iscoroutinefunction(method):
                raise IncompatibleMLServer(f"{symbol}.{name}", "is not async")
            wrapped = wrap(method, f"{servicer.__name__}.{name}")
            setattr(wrapped, _WRAPPED, True)
            setattr(servicer, name, wrapped)
