"""MLServer's REST internals: its request class's JSON parser, its FastAPI app, that app's router and routes.

MLServer 1.7 builds its REST app itself and offers no hook to change how bodies are read or parsed, nor
to serve a route ahead of its own: `wrappers.transport.rest_json` swaps its request class's `json` (caching the parsed
body where Starlette's requests keep it),
`wrappers.transport.body_layer` wraps the app's router (every route's body within a limit), and
`wrappers.transport.rest_infer` puts a faster infer route ahead of MLServer's, calling MLServer's data plane as its
endpoint does. What they touch is checked here first: on MLServer's real app where there is one, and on
one MLServer builds for the check (`probe_app`) where `python -m wrappers.mlserver_compat` runs.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

import mlserver.utils
from fastapi import FastAPI
from mlserver.codecs import json as mlserver_json
from mlserver.rest import app as mlserver_app
from mlserver.rest import requests
from mlserver.rest import responses as mlserver_responses
from starlette.requests import Request as StarletteRequest
from starlette.responses import Response as BinaryResponse  # noqa: F401  (raw bytes, for wrappers.transport.rest_infer)
from starlette.routing import Route, Router

from wrappers.mlserver_compat import IncompatibleMLServer, require, require_function, running

INFER_PATH = "/v2/models/{model_name}/infer"  # how MLServer's REST app is told from other FastAPI apps
INFER_PATHS = (INFER_PATH, "/v2/models/{model_name}/versions/{model_version}/infer")
_REQUEST = "mlserver.rest.requests.Request"
# Where Starlette's `Request.json` (and MLServer's) caches the parsed body: a private of Starlette's request.
JSON_CACHE = "_json"

# MLServer's JSON response (orjson), its JSON encoder (the one that response renders with, not exported by
# `mlserver.codecs`) and its V2 header helpers, for the fast infer route; checked by `check_responses` before
# that route is installed.
JsonResponse: Any = getattr(mlserver_responses, "Response", None)
# Typed as the callables they are; getattr's None (hence the ignores) is one MLServer dropped, refused by check_responses.
insert_headers: Callable[..., Any] = getattr(mlserver.utils, "insert_headers", None)  # type: ignore[assignment]
extract_headers: Callable[..., Any] = getattr(mlserver.utils, "extract_headers", None)  # type: ignore[assignment]
encode_json: Callable[[Any], bytes] = getattr(mlserver_json, "encode_to_json_bytes", None)  # type: ignore[assignment]


# -- the request's JSON parser ----------------------------------------------------------------


def check_request_json() -> None:
    """MLServer's request class has an async `json(self)`, its routes build their requests from that class, and
    it is a Starlette request whose `json` caches the parsed body in `_json` (where the replacement keeps it)."""
    request = require(requests, "Request", _REQUEST)
    require_function(request, "json", f"{_REQUEST}.json", ("self",), is_async=True)
    if getattr(mlserver_app, "Request", None) is not request:
        raise IncompatibleMLServer(
            "mlserver.rest.app.Request", f"is not {_REQUEST}: MLServer's routes read bodies through another class"
        )
    if not (inspect.isclass(request) and issubclass(request, StarletteRequest)):
        raise IncompatibleMLServer(_REQUEST, "is not a starlette.requests.Request")
    starlette_json = require_function(StarletteRequest, "json", "starlette.requests.Request.json", ("self",), is_async=True)
    if JSON_CACHE not in starlette_json.__code__.co_names:
        raise IncompatibleMLServer(
            f"starlette.requests.Request.{JSON_CACHE}", "is no longer where Request.json caches the parsed body"
        )


def replace_request_json(parse: Callable[[bytes], Any]) -> None:
    """Parse every REST body MLServer's routes read with `parse(body bytes)`, process-wide: the request's `json()`
    parses its body once and caches the result on the request, where Starlette's `Request.json` does."""
    check_request_json()

    async def json(self: Any) -> Any:  # `self`: the next load's check reads the parameter names MLServer's has
        if not hasattr(self, JSON_CACHE):
            setattr(self, JSON_CACHE, parse(await self.body()))
        return getattr(self, JSON_CACHE)

    requests.Request.json = json


# -- MLServer's REST app in this process --------------------------------------------------------


def is_mlserver_app(app: object) -> bool:
    return isinstance(app, FastAPI) and any(getattr(route, "path", None) == INFER_PATH for route in app.routes)


def check_rest_apps() -> None:
    """The app MLServer builds is a FastAPI app with its infer route at INFER_PATH, by which it is found."""
    if not is_mlserver_app(probe_app()):
        raise IncompatibleMLServer("mlserver.rest.app.create_app", f"builds no FastAPI app with a route {INFER_PATH}")


def mlserver_rest_apps() -> list[FastAPI]:
    """MLServer's REST app(s) in this process, as `wrappers.launch` handed them over; none in a worker process
    (`parallel_workers` > 0) or a bare load. Each is checked to be the app MLServer builds."""
    apps = running.rest_apps()
    for app in apps:
        if not is_mlserver_app(app):
            raise IncompatibleMLServer(
                "mlserver.rest.server.RESTServer._app",
                f"is a {type(app).__name__} without a route {INFER_PATH}, not MLServer's REST app",
            )
    return apps


_probe: dict[str, FastAPI] = {}


def probe_app() -> FastAPI:
    """An app as MLServer's `create_app` builds it, never served (nor handed to `mlserver_rest_apps`): the
    checks read its routes. Built on first use, by `python -m wrappers.mlserver_compat` and the tests."""
    if "app" not in _probe:
        from mlserver.settings import Settings

        create_app = require_function(
            mlserver_app, "create_app", "mlserver.rest.app.create_app", ("settings", "data_plane", "model_repository_handlers")
        )
        _probe["app"] = create_app(Settings(), data_plane=object(), model_repository_handlers=object())
    return _probe["app"]


# -- a layer in front of the router -----------------------------------------------------------


@functools.cache  # once per process: wrap_router runs it at every load
def check_router_layer() -> None:
    """Starlette's router sends every request through its `middleware_stack`, which `wrap_router` wraps:
    checked by sending one through a router built here (synchronously: nothing in it awaits)."""
    router = Router()
    if not hasattr(router, "middleware_stack"):
        raise IncompatibleMLServer("starlette.routing.Router.middleware_stack", "does not exist")
    seen: list[dict] = []

    async def layer(scope: Any, receive: Any, send: Any) -> None:
        seen.append(scope)

    router.middleware_stack = layer
    dispatch: Any = router  # called without a connection: nothing behind the layer receives or sends
    call = dispatch({"type": "http", "path": "/", "method": "GET", "headers": []}, None, None)
    try:
        call.send(None)
    except StopIteration:
        pass
    finally:
        call.close()
    if not seen:
        raise IncompatibleMLServer("starlette.routing.Router.__call__", "does not call the router's middleware_stack")


def wrap_router(app: FastAPI, layer: type) -> None:
    """Put `layer(router's app)` between MLServer's middleware and its routes: inside its error handlers, so that
    what the layer raises is answered as MLServer answers errors; once per app (`layer` is a class)."""
    check_router_layer()
    router = app.router
    current = require(router, "middleware_stack", "starlette.routing.Router.middleware_stack")
    if not isinstance(current, layer):
        router.middleware_stack = layer(current)


# -- infer routes ahead of MLServer's ---------------------------------------------------------


def _infer_routes(app: FastAPI) -> dict[str, Any]:
    """MLServer's infer routes by path, checked: each can answer a request itself and reaches its data plane."""
    routes = {path: route for route in app.router.routes if (path := getattr(route, "path", None)) in INFER_PATHS}
    missing = [path for path in INFER_PATHS if path not in routes]
    if missing:
        raise IncompatibleMLServer("mlserver.rest.app.create_app", f"builds no REST routes {missing}")
    for route in routes.values():
        require_function(route, "handle", "starlette.routing.Route.handle", ("scope", "receive", "send"), is_async=True)
        endpoint = require(route, "endpoint", "mlserver.rest.app.APIRoute.endpoint")
        require(
            require(endpoint, "__self__", "mlserver.rest.endpoints.Endpoints.infer (a bound method)"),
            "_data_plane",
            "mlserver.rest.endpoints.Endpoints._data_plane",
        )
    return routes


def check_infer_routes() -> None:
    _infer_routes(probe_app())


class _InferRoute(Route):
    """A route `insert_infer_routes` put in an app: what tells an app that has them already."""


def insert_infer_routes(app: FastAPI, route_app: Callable[[Any, Any], Any]) -> bool:
    """Serve POSTs to MLServer's infer paths by `route_app(mlserver_route, data_plane)` ahead of MLServer's own
    routes, inside all of MLServer's middleware, once per app; the ASGI app it returns may hand a request on to
    `mlserver_route.handle` and calls `data_plane.infer(payload, name, version)` as MLServer's endpoint does.
    False where the app has them already."""
    if any(isinstance(route, _InferRoute) for route in app.router.routes):
        return False
    planes = {}
    for path, mlserver_route in _infer_routes(app).items():
        data_plane = mlserver_route.endpoint.__self__._data_plane
        require_function(data_plane, "infer", "mlserver.handlers.DataPlane.infer", ("payload", "name", "version"), is_async=True)
        planes[path] = (mlserver_route, data_plane)
    for path, (mlserver_route, data_plane) in planes.items():
        app.router.routes.insert(0, _InferRoute(path, route_app(mlserver_route, data_plane), methods=["POST"]))
    return True


def check_responses() -> None:
    """MLServer's JSON response, its JSON encoder and its V2 header helpers, as the fast infer route uses them."""
    if not (inspect.isclass(JsonResponse) and issubclass(JsonResponse, BinaryResponse)):
        raise IncompatibleMLServer("mlserver.rest.responses.Response", "is not a Starlette response class")
    require_function(mlserver_json, "encode_to_json_bytes", "mlserver.codecs.json.encode_to_json_bytes", ("v",))
    require_function(mlserver.utils, "insert_headers", "mlserver.utils.insert_headers", ("inference_request", "headers"))
    require_function(mlserver.utils, "extract_headers", "mlserver.utils.extract_headers", ("inference_response",))
