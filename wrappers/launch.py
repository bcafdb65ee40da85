"""`python -m wrappers.launch FOLDER`: serve an artifact folder, or a folder of them, with MLServer (issue 29).

It does what `mlserver start FOLDER` does, with the same settings (`MLSERVER_*` variables, a `settings.json`
in FOLDER, each model's `model-settings.json`), except that Slipway builds MLServer's server itself
(`wrappers.mlserver_compat.servers`): its REST app and gRPC server go straight to the runtime's fast paths
and guards, where they were found by walking the heap at every load. It also ends the way a command should:
where a model fails to load, a port is taken or the folder is not a model repository, it stops the server
and exits non-zero with one line naming the cause (MLServer logs a failed load and exits 0); and on SIGTERM it
stops accepting and answers the requests in flight for at most SLIPWAY_DRAIN_SECONDS before it exits 0
(`wrappers.mlserver_compat.servers.drain_on_signals`). The serving images, the manifests, `slipway serve` and
`slipway.local_server.LocalServer` run it.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from slipway import atomic
from slipway.cli import ArgumentParser, UserError, exit_with, first_line
from slipway.drain import DrainSettingError, drain_seconds
from slipway.model_repository import RepositoryError, check_unique, settings_files
from slipway.runtime_settings import SettingsError
from slipway.server_process import HOOK, HOOK_ENV
from wrappers import frontends, process_state
from wrappers.transport import grpc_transport

logger = logging.getLogger("mlserver")  # MLServer's log: the launcher's lines go where the server's go


class LaunchError(RuntimeError):
    """The server cannot start or serve; the message is the whole story, in one line."""


def main(argv: Sequence[str] | None = None) -> int:
    parser = ArgumentParser(prog="python -m wrappers.launch", description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path, help="an artifact folder, or a folder of artifact folders")
    parser.add_argument(
        "--failure-file", type=Path, help="where to write the one-line cause too, should the server fail (for a parent process)"
    )
    parser.add_argument(
        "--ready-file",
        type=Path,
        help="a file written once every model has loaded, and every front end serves (for a parent process)",
    )
    parser.add_argument(
        "--front-end",
        action="store_true",
        help="serve as one of a model's front ends (wrappers.frontends' supervisor starts them): bind the ports with "
        "SO_REUSEPORT beside the sibling front ends, and answer metrics scrapes with the sum of them all",
    )
    args = parser.parse_args(argv)
    if args.front_end:  # before the launcher builds MLServer's servers (wrappers.mlserver_compat.shared_ports)
        from wrappers.mlserver_compat import shared_ports

        shared_ports.share_uvicorn_ports()
        shared_ports.serve_metrics_of_all_processes()
    if frontends.supervises(args.folder):  # `frontends: N` > 1: a session host and N of these (wrappers.frontends)
        return frontends.supervise(args.folder, args.failure_file, args.ready_file)
    try:
        launch(args.folder, args.ready_file)
    except LaunchError as err:
        if args.failure_file is not None:
            atomic.write_text(args.failure_file, f"{err}\n")
        raise UserError(str(err)) from None
    return 0


def launch(folder: Path, ready_file: Path | None = None) -> None:
    """Serve `folder` until the server is stopped (SIGTERM, SIGINT); LaunchError where it cannot. `ready_file` is
    written once every model has loaded."""
    expected = _use_the_guard_and_count_models(folder)
    transport = grpc_transport.read_on_poller_thread()  # before MLServer imports grpc
    from wrappers.mlserver_compat import servers

    servers.prepare_process()
    try:
        asyncio.run(_serve(folder, expected, ready_file, transport))
    except SystemExit as exited:  # uvicorn exits where it cannot serve (it logs why)
        if exited.code not in (0, None):
            raise LaunchError(
                f"MLServer's REST server exited with status {exited.code} as it started (its log above says why)"
            ) from None


def _use_the_guard_and_count_models(folder: Path) -> int:
    """The number of settings files MLServer will read under `folder`, having checked that the model repository
    MLServer builds will be Slipway's guarded one (set where unset)."""
    try:
        expected = len(settings_files(folder))
    except RepositoryError as err:
        raise LaunchError(str(err)) from None
    chosen = os.environ.setdefault(HOOK_ENV, HOOK)
    if chosen != HOOK:
        raise LaunchError(
            f"{HOOK_ENV}={chosen}: Slipway serves models through {HOOK}, which guards MLServer's "
            "repository API (load, unload); unset the variable"
        )
    return expected


async def _serve(folder: Path, expected: int, ready_file: Path | None, transport: str) -> None:
    from wrappers import repository_api
    from wrappers.limits import body_budget
    from wrappers.limits.connection_rules import ConnectionLimits
    from wrappers.limits.grpc_drain import DrainGate
    from wrappers.mlserver_compat import IncompatibleMLServer, connections, servers

    state = process_state.begin()  # the process's registries, which the models loaded below reach (current())
    try:
        repository_api.install()  # before MLServer builds anything; MLServer's repository class calls it too
        settings, models = await servers.load_settings(str(folder))
        if settings.model_repository_implementation is not repository_api.GuardedRepository:
            raise LaunchError(
                f"{folder}/settings.json sets model_repository_implementation: Slipway serves models "
                f"through {HOOK}, which guards MLServer's repository API; remove the setting"
            )
        if settings.load_models_at_startup:  # else MLServer lists none, and loads them when asked
            _check_models(folder, models, expected)
        _check_ports(settings)
        connections.limit_http_connections(ConnectionLimits.from_env())  # every uvicorn server MLServer starts
        if settings.grpc_max_message_length is None:  # grpc's own receive limit, 4 MiB, refuses a single image batch
            settings.grpc_max_message_length = body_budget.sized_here()  # REST bodies' budget; MLSERVER_GRPC_MAX_... wins
        gate = DrainGate()  # the gRPC server's first interceptor: refuses new calls once the drain begins
        server = servers.build(settings, gate, on_unknown_model=state.metrics.count_unknown_model)
        servers.drain_on_signals(server, drain_seconds(), gate)
    except (repository_api.RepositoryApiError, IncompatibleMLServer, SettingsError, DrainSettingError) as err:
        raise LaunchError(first_line(err)) from None
    logger.info(transport)  # once MLServer has set up logging as its settings say (JSON lines, say)
    serving = asyncio.ensure_future(servers.serve(server))
    loading = asyncio.ensure_future(asyncio.gather(*(_load(servers, server, model) for model in models)))
    first: set[asyncio.Future[Any]] = {serving, loading}
    await asyncio.wait(first, return_when=asyncio.FIRST_COMPLETED)
    if not loading.done():  # the server stopped first: asked to (a signal), or it failed
        loading.cancel()
        _raise_if_failed(serving, "while the models loaded")
        return
    failures = [cause for cause in loading.result() if cause]
    if failures:
        try:
            await servers.stop(server)
        except Exception:  # the cause to report is the model's
            logger.exception("stopping the server after a failed load")
        await asyncio.wait({serving})
        more = f" (and {len(failures) - 1} more: see the log)" if len(failures) > 1 else ""
        raise LaunchError(failures[0] + more)
    if ready_file is not None:
        atomic.write_text(ready_file, "ready\n")
    await asyncio.wait({serving})
    _raise_if_failed(serving, "")


async def _load(servers: Any, server: Any, model_settings: Any) -> str | None:
    """Load one model; None, or why it failed in one line (the traceback goes to the log)."""
    try:
        await servers.load_model(server, model_settings)
    except Exception as err:
        logger.error("model %s failed to load; stopping the server", model_settings.name, exc_info=err)
        return f"model {model_settings.name} failed to load: {_described(err)}"
    return None


def _raise_if_failed(serving: asyncio.Future, when: str) -> None:
    error = None if serving.cancelled() else serving.exception()
    if error is not None:
        raise LaunchError(f"MLServer stopped serving{' ' + when if when else ''}: {_described(error)}")


def _described(err: BaseException) -> str:
    """`module.Type: first line`, as a traceback's last line names an exception."""
    kind = type(err)
    name = kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"
    return f"{name}: {first_line(err)}" if isinstance(err, Exception) else name


def _check_models(folder: Path, models: list[Any], expected: int) -> None:
    from wrappers.mlserver_compat import servers

    if len(models) != expected:
        raise LaunchError(
            f"MLServer read {len(models)} of the {expected} model-settings.json files under {folder}: "
            "its log above names the file it could not read and why; fix or remove it"
        )
    try:
        check_unique(servers.model_identity(model) for model in models)
    except RepositoryError as err:
        raise LaunchError(str(err)) from None


def _check_ports(settings: Any) -> None:
    """Refuse a port another process holds, or one given to two servers, naming it: MLServer's REST server
    would exit with no more than a log line, its gRPC server with a traceback."""
    ports = [("HTTP", "MLSERVER_HTTP_PORT", settings.http_port), ("gRPC", "MLSERVER_GRPC_PORT", settings.grpc_port)]
    if settings.metrics_endpoint and settings.metrics_port:
        ports.append(("metrics", "MLSERVER_METRICS_PORT", settings.metrics_port))
    numbers = [port for _, _, port in ports]
    for what, variable, port in ports:
        if numbers.count(port) > 1:
            raise LaunchError(f"{variable} is {port}, as another of MLServer's ports: give each server its own port")
        family, kind, proto, _, address = socket.getaddrinfo(settings.host, port, type=socket.SOCK_STREAM)[0]
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the servers bind: TIME_WAIT is free
            if frontends.shares_ports():  # sibling front ends hold the ports with SO_REUSEPORT, as this one will
                probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            try:
                probe.bind(address)
            except OSError as err:
                raise LaunchError(
                    f"cannot serve {what} on {address[:2]}: {(err.strerror or str(err)).lower()}; "
                    f"free the port or set {variable} to another"
                ) from None


if __name__ == "__main__":
    exit_with(main)
