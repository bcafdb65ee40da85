"""The one door into MLServer's, Starlette's and grpc's internals (issue 29).

Slipway's serving speed comes from extending MLServer where it has no extension point: its gRPC
converters, its REST request class, its REST app's router and routes, its servers' construction,
its adaptive batching, grpc's poller thread. Everything that reaches past their public API lives in
this package, one named function per extension point, and nothing else in Slipway imports
`mlserver.grpc`, `mlserver.rest`, `mlserver.repository`, `mlserver.server`, `mlserver.cli`, `mlserver.context`,
`mlserver.codecs.json`, `starlette`, `uvicorn` or `grpc._cython`: `make lint` checks that with import-linter (the
`mlserver-door` contract in pyproject.toml's `[tool.importlinter]`).

Each function checks that its target is there with the shape it was written against (the attribute,
that it is callable or async, its parameter names) before it patches or reads it; a mismatch raises
`IncompatibleMLServer`, one line naming the symbol and the installed MLServer version, which fails the
model's load (or, for the fast paths a model lets fall back, turns that path off: `wrappers.transport.fast_paths`).
Nothing here is a silent no-op. `python -m wrappers.mlserver_compat` checks every extension point
against the installed MLServer in seconds, without patching anything: run it on a new MLServer release.

The submodules are split by what they import, so that importing one never pulls in another's protos:
`grpc_path` (MLServer's gRPC converters and servicers), `rest_app` (MLServer's REST app), `repository`
(the model repository API), `model` (adaptive batching), `grpc_threads` (grpc's poller thread, no MLServer),
`servers` (MLServer's server, built and started by `wrappers.launch`), `running` (the REST app and gRPC server
the launcher handed over; no MLServer), `shared_ports` (uvicorn's ports shared by several front ends and their
metrics summed, for `wrappers.frontends`), `model_context` (the model MLServer's context names, for
`wrappers.operations.json_logs`).
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from importlib import metadata
from typing import Any

# The MLServer releases the extension points were written against: pyproject.toml pins `mlserver==1.7.*`
# (tests/wrappers/test_mlserver_compat.py checks that the two agree).
SUPPORTED_MLSERVER = (1, 7)
SUPPORTED_TEXT = "1.7.x"
# Every release in that range, each checked by tests/wrappers/test_mlserver_compat.py (its own wheel, no deps).
SUPPORTED_RELEASES = ("1.7.0", "1.7.1")
PINNED = "mlserver==1.7.*"
_RELEASE = re.compile(r"^(\d+)\.(\d+)")


def mlserver_version() -> str:
    """The installed MLServer's version, as its package metadata says ("not installed" where it is not)."""
    try:
        return metadata.version("mlserver")
    except metadata.PackageNotFoundError:
        return "not installed"


class IncompatibleMLServer(RuntimeError):
    """An extension point's target is missing or has another shape than in the MLServer Slipway supports."""

    def __init__(self, symbol: str, problem: str) -> None:
        self.symbol = symbol
        super().__init__(
            f"MLServer {mlserver_version()}: {symbol} {problem}; Slipway extends MLServer {SUPPORTED_TEXT} "
            f"(pyproject pins {PINNED}): install that, or port wrappers/mlserver_compat to this release "
            "(python -m wrappers.mlserver_compat lists what breaks)"
        )


def check_version() -> None:
    """Refuse an MLServer outside the supported releases, before anything is patched."""
    version = mlserver_version()
    release = _RELEASE.match(version)
    if release is None or (int(release.group(1)), int(release.group(2))) != SUPPORTED_MLSERVER:
        raise IncompatibleMLServer("mlserver", "is not a supported release")


def require(owner: Any, name: str, symbol: str) -> Any:
    """`owner.name`, or IncompatibleMLServer naming `symbol`."""
    try:
        return getattr(owner, name)
    except AttributeError:
        raise IncompatibleMLServer(symbol, "does not exist") from None


def require_function(
    owner: Any, name: str, symbol: str, parameters: tuple[str, ...], *, is_async: bool | None = None
) -> Callable[..., Any]:
    """`owner.name` as a callable whose parameters are named `parameters` (as `inspect` reports them: a bound or
    class method without its first), async or not where `is_async` says; else IncompatibleMLServer."""
    target = require(owner, name, symbol)
    if not callable(target):
        raise IncompatibleMLServer(symbol, f"is a {type(target).__name__}, not a function")
    found = tuple(inspect.signature(target).parameters)
    if found != parameters:
        raise IncompatibleMLServer(symbol, f"takes ({', '.join(found)}), not ({', '.join(parameters)})")
    if is_async is not None and inspect.iscoroutinefunction(target) != is_async:
        raise IncompatibleMLServer(symbol, "is not async" if is_async else "is async")
    return target


def extension_points() -> dict[str, Callable[[], object]]:
    """Every extension point's check, by name: each raises IncompatibleMLServer where its target has moved.

    Imported here, not at the top: the gRPC checks import MLServer's V2 protos, which clash with tritonclient's
    in one process, and most of Slipway never needs them."""
    from wrappers.mlserver_compat import (
        connections,
        grpc_path,
        grpc_threads,
        model,
        model_context,
        repository,
        rest_app,
        servers,
        shared_ports,
    )

    return {
        "mlserver version": check_version,
        "server built and started by the launcher": servers.check_server_points,
        "gRPC server's first interceptor (the drain)": servers.check_grpc_interceptors,
        "gRPC raw converters": grpc_path.check_converters,
        "gRPC handlers on the running server": grpc_path.check_running_servers,
        "gRPC poller thread": grpc_threads.check_poller_thread,
        "REST request JSON parser": rest_app.check_request_json,
        "REST app as MLServer builds it": rest_app.check_rest_apps,
        "REST router layer": rest_app.check_router_layer,
        "REST infer routes ahead of MLServer's": rest_app.check_infer_routes,
        "REST responses and headers": rest_app.check_responses,
        "adaptive batching": model.check_adaptive_batching,
        "model repository guard": repository.check_guard_points,
        "model repository routes": repository.check_repository_routes,
        "ports shared by several front ends": shared_ports.check_shared_ports,
        "HTTP connection limits": connections.check_connection_points,
        "model context in log lines": model_context.check_model_context,
    }


def check_all() -> dict[str, str | None]:
    """Run every check; the problem found at each extension point, None where it is as expected."""
    problems: dict[str, str | None] = {}
    for name, check in extension_points().items():
        try:
            check()
            problems[name] = None
        except IncompatibleMLServer as err:
            problems[name] = str(err)
    return problems
