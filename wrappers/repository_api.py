"""MLServer's model repository API (index, load, unload), guarded over REST and gRPC.

Who is admitted is `slipway.repository_access`'s decision (`SLIPWAY_REPOSITORY_API`, closed by
default); this module is the one place that puts it in front of MLServer 1.7's repository routes
and methods, checking at start-up that they are where it expects and refusing to start otherwise.

When: MLServer builds its REST app and its gRPC server (whose handlers hold the servicer's methods
as they are then) before any model loads, and starts serving while the models load: a guard put in
place by the runtime's `load` would miss gRPC entirely and leave REST open until then. So MLServer
imports it through its own setting for the model repository class, which it reads before it builds
anything: `MLSERVER_MODEL_REPOSITORY_IMPLEMENTATION=wrappers.repository_api.GuardedRepository`
(`wrappers.launch`, which the images, the manifests and `slipway.local_server` run, sets it where unset,
refuses another value, and installs the guard itself before it builds MLServer's server).
`GuardedRepository` is MLServer's own repository (folders with a `model-settings.json`); creating
it reads the setting (a bad value stops the server, saying why) and guards:

- REST: one ASGI middleware on MLServer's app, outside its others, refusing any path under
  `/v2/repository` with HTTP 403 and `{"error": "..."}`. Every route MLServer binds to its
  repository endpoints must lie under that prefix, or the server refuses to start.
- gRPC: every `Repository*` method of MLServer's two servicers (`inference.GRPCInferenceService` and
  the deprecated `inference.model_repository.ModelRepositoryService`) is wrapped, on the classes,
  before MLServer registers them: a refused call ends with PERMISSION_DENIED. MLServer offers no way
  to add a gRPC interceptor, and the servers' handlers cannot be changed once registered.

`OnnxRuntime.load` calls `check_guarded`: a model of ours does not load in a server whose repository
API was left unguarded (MLServer started without the setting).
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import MutableMapping
from typing import Any

import grpc
from fastapi import FastAPI
from fastapi.responses import JSONResponse

from slipway.repository_access import DENIED_STATUS, RepositoryAccess, grpc_peer_address
from slipway.server_process import HOOK, HOOK_ENV
from wrappers.mlserver_compat import IncompatibleMLServer, check_version, running
from wrappers.mlserver_compat import repository as mlserver_repository
from wrappers.transport.api_docs import ApiDocsGate, route_path

logger = logging.getLogger(__name__)

REST_PREFIX = mlserver_repository.REST_PREFIX
GRPC_METHODS = mlserver_repository.GRPC_METHODS


class RepositoryApiError(RuntimeError):
    """The guard cannot be put in place: this MLServer is not the one it was written against, or it came too late."""


class _State:
    access: RepositoryAccess | None = None  # set once the guard is in place, before any server exists


def _access() -> RepositoryAccess:
    if _State.access is None:
        raise RepositoryApiError("the repository API guard was used before it was installed")
    return _State.access


class GuardedRepository(mlserver_repository.MLServerRepository):
    """MLServer's own model repository; creating it guards the repository API of this process's servers."""

    def __init__(self, *args, **kwargs) -> None:
        install()
        super().__init__(*args, **kwargs)


def install() -> RepositoryAccess:
    """Read the setting and guard the REST app and gRPC servicers MLServer will build (once per process)."""
    if _State.access is not None:
        return _State.access
    access = RepositoryAccess.from_env(os.environ)  # SettingsError: the server stops, saying why
    try:  # MLServer is starting: the first moment Slipway runs in its process
        check_version()
        mlserver_repository.check_guard_points()
    except IncompatibleMLServer as err:
        raise RepositoryApiError(str(err)) from None
    built = _servers_in_process()
    if built:
        raise RepositoryApiError(
            f"MLServer built its servers ({', '.join(built)}) before the repository API guard was installed: "
            f"start it with {HOOK_ENV}={HOOK}, which MLServer imports first"
        )
    _guard_grpc_servicers()
    _guard_rest_server()
    _State.access = access
    return access


def check_guarded(in_worker_process: bool) -> None:
    """Raise RepositoryApiError where this process serves MLServer's repository API unguarded, or may: a server
    `mlserver start` began (it hands Slipway neither its REST app nor its gRPC server: `wrappers.launch` must
    start it), the launcher's without the guard, or (in an MLServer worker process, whose servers are its
    parent's) one started without the setting.

    A bare load, with no server in the process, has no repository API to guard."""
    if not in_worker_process and running.started_by_mlserver_cli() and not running.launched():
        raise RepositoryApiError(
            "this server was started by `mlserver start`, which hands Slipway neither its REST app nor its gRPC server "
            "(nor guards the model repository API): start it with `python -m wrappers.launch FOLDER` (slipway serve, "
            "the serving images and the rendered manifests do)"
        )
    unguarded = os.environ.get(HOOK_ENV) != HOOK if in_worker_process else (_State.access is None and running.launched())
    if unguarded:
        raise RepositoryApiError(
            f"this MLServer answers the model repository API (load, unload) unguarded: start it with "
            f"{HOOK_ENV}={HOOK} (python -m wrappers serve, the serving images and the rendered manifests set it)"
        )


def _describe(access: RepositoryAccess) -> str:
    if access.api == "closed":
        return "closed (every call refused)"
    return "open to loopback callers" + (" and bearer-token holders" if access.token is not None else " only")


def _servers_in_process() -> list[str]:
    try:
        return mlserver_repository.servers_built()
    except IncompatibleMLServer as err:
        raise RepositoryApiError(str(err)) from None


# -- REST ------------------------------------------------------------------------------------


def _guard_rest_server() -> None:
    def guard(app: FastAPI) -> None:
        guard_rest_app(app)
        # MLServer has set up its logging by now (it had not when the guard was installed)
        mlserver_repository.mlserver_logger.info("model repository API (REST and gRPC): %s", _describe(_access()))

    mlserver_repository.on_rest_app_built(guard)


def guard_rest_app(app: FastAPI) -> None:
    """Put the guard in front of `app`, having checked that its repository routes are all under REST_PREFIX."""
    if not isinstance(app, FastAPI):
        raise RepositoryApiError(
            f"MLServer's REST server holds a {type(app).__name__}, not a FastAPI app: "
            "wrappers.repository_api knows MLServer 1.7's; check it against this MLServer"
        )
    try:
        mlserver_repository.check_repository_routes(app)
    except IncompatibleMLServer as err:
        raise RepositoryApiError(str(err)) from None
    app.add_middleware(RepositoryGuard)
    app.add_middleware(ApiDocsGate)  # MLServer's Swagger UI and OpenAPI schemas: off unless asked (wrappers.transport.api_docs)


_under_prefix = mlserver_repository.under_prefix


class RepositoryGuard:
    """ASGI middleware: requests for paths under REST_PREFIX go on only where the setting admits the caller."""

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope: MutableMapping[str, Any], receive, send) -> None:
        if scope["type"] == "http" and _under_prefix(route_path(scope)):
            client = scope.get("client")
            headers = [(key.decode("latin-1"), value.decode("latin-1")) for key, value in scope["headers"]]
            refusal = _access().refusal(client[0] if client else None, headers)
            if refusal is not None:
                logger.warning("refused %s %s from %s: %s", scope["method"], scope["path"], client, refusal)
                await JSONResponse({"error": refusal}, status_code=DENIED_STATUS)(scope, receive, send)
                return
        await self.app(scope, receive, send)


# -- gRPC ------------------------------------------------------------------------------------


def _guard_grpc_servicers() -> None:
    try:  # any other Repository* method a newer MLServer adds is refused alike
        mlserver_repository.wrap_repository_methods(_guarded_method)
    except IncompatibleMLServer as err:
        raise RepositoryApiError(str(err)) from None


def _guarded_method(method, name: str):
    @functools.wraps(method)
    async def guarded(self, request, context):
        refusal = _access().refusal(grpc_peer_address(context.peer()), context.invocation_metadata() or ())
        if refusal is not None:
            logger.warning("refused gRPC %s from %s: %s", name, context.peer(), refusal)
            await context.abort(grpc.StatusCode.PERMISSION_DENIED, refusal)
        return await method(self, request, context)

    return guarded
