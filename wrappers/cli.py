"""`python -m wrappers`: serve an artifact folder, or a folder of them, with MLServer through Slipway's launcher
(`wrappers.launch`; the benchmarks are `python -m benchmarks`).

The launcher runs in the foreground, started with the command and environment `LocalServer` uses
(`slipway.server_process`), so that `slipway serve` serves exactly what the tests and benchmarks measured."""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

from slipway.child import stop_with_parent
from slipway.cli import UserError, dispatch
from slipway.local_server import ServerError, model_names
from slipway.paths import DEMO_ARTIFACT_DIR
from slipway.repository_access import RepositoryAccess
from slipway.runtime_settings import SettingsError
from slipway.server_process import FAILURE_FILE, failure_reason, launcher_command, server_env

PROG = "python -m wrappers"


def port(text: str) -> int:
    """A TCP port number: anything outside 1-65535 would be bound as some other port, or not at all."""
    try:
        number = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number: give 1-65535") from None
    if not 1 <= number <= 65535:
        raise argparse.ArgumentTypeError(f"{number} is not a port number: give 1-65535")
    return number


def serve_foreground(model_dir: Path, *, host: str, http_port: int, grpc_port: int, metrics_port: int) -> None:
    """Run the launcher on `model_dir` until Ctrl-C or SIGTERM, its log (stdout and stderr) on our stdout.

    A server that stops before it is asked to raises `ServerError` here, with the launcher's one line on why."""
    model_names(model_dir)  # fail early, in one line, on a folder that is not an artifact folder nor a folder of them
    try:
        RepositoryAccess.from_env(os.environ)  # the server would refuse to start on it: say why in one line
    except SettingsError as err:
        raise ServerError(str(err)) from err
    workdir = Path(tempfile.mkdtemp(prefix="slipway-serve-"))
    metrics_dir, failure_file = workdir / "metrics", workdir / FAILURE_FILE
    metrics_dir.mkdir()
    env = server_env(
        host=host,
        http_port=http_port,
        grpc_port=grpc_port,
        metrics_port=metrics_port,
        parallel_workers=0,
        metrics_dir=metrics_dir,
    )
    print(f"serving {model_dir} on http://{host}:{http_port} (gRPC {grpc_port}, metrics {metrics_port})", flush=True)
    # In its own process group, so that a terminal's Ctrl-C reaches only us; we pass it on as SIGTERM,
    # on which MLServer shuts down cleanly (on SIGINT, uvicorn's lifespan task dies with a traceback).
    server = subprocess.Popen(
        launcher_command(model_dir, failure_file), env=env, stderr=subprocess.STDOUT, process_group=0, preexec_fn=stop_with_parent
    )
    asked_to_stop: list[int] = []

    def forward(signum: int, _frame: object) -> None:
        asked_to_stop.append(signum)
        server.send_signal(signal.SIGTERM)

    previous = {signum: signal.signal(signum, forward) for signum in (signal.SIGINT, signal.SIGTERM)}
    try:
        status = server.wait()
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        if server.poll() is None:  # we failed, not the server: it must not outlive us
            server.kill()
            server.wait()
    try:
        if not asked_to_stop or status:
            raise ServerError(f"the server stopped: {failure_reason(failure_file, status)}")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def cmd_serve(args: argparse.Namespace) -> int:
    try:
        serve_foreground(
            args.model_dir,
            host=args.host,
            http_port=args.http_port,
            grpc_port=args.grpc_port,
            metrics_port=args.metrics_port,
        )
    except ServerError as err:
        raise UserError(str(err)) from err
    return 0


def register(commands: argparse._SubParsersAction) -> None:
    """Add `python -m wrappers`'s subcommands to `commands` (the `slipway` command reaches them through slipway.command)."""
    serve = commands.add_parser("serve", help="serve an artifact folder with MLServer in the foreground")
    serve.add_argument(
        "--model-dir", type=Path, default=DEMO_ARTIFACT_DIR, help="artifact folder, or a folder of them (default: the demo's)"
    )
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (default: loopback only)")
    serve.add_argument("--http-port", type=port, default=8080, help="V2 REST (default 8080)")
    serve.add_argument("--grpc-port", type=port, default=8081, help="V2 gRPC (default 8081)")
    serve.add_argument("--metrics-port", type=port, default=8082, help="Prometheus metrics (default 8082)")
    serve.set_defaults(func=cmd_serve)


def main(argv: Sequence[str] | None = None) -> int:
    return dispatch(PROG, __doc__, register, argv)
