"""`python -m wrappers`: serve an artifact folder, or a folder of them, with MLServer through Slipway's launcher
(`wrappers.launch`; the benchmarks are `python -m benchmarks`)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from slipway.cli import ArgumentParser, UserError, exit_with
from slipway.paths import DEMO_ARTIFACT_DIR
from wrappers.server import ServerError, serve_foreground


def port(text: str) -> int:
    """A TCP port number: anything outside 1-65535 would be bound as some other port, or not at all."""
    try:
        number = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number: give 1-65535") from None
    if not 1 <= number <= 65535:
        raise argparse.ArgumentTypeError(f"{number} is not a port number: give 1-65535")
    return number


def cmd_serve(args: argparse.Namespace) -> int:
    try:
        serve_foreground(
            args.model_dir, host=args.host, http_port=args.http_port,
            grpc_port=args.grpc_port, metrics_port=args.metrics_port,
        )
    except ServerError as err:
        raise UserError(str(err)) from err
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = ArgumentParser(prog="python -m wrappers", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="serve an artifact folder with MLServer in the foreground")
    serve.add_argument("--model-dir", type=Path, default=DEMO_ARTIFACT_DIR,
                       help="artifact folder, or a folder of them (default: the demo's)")
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (default: loopback only)")
    serve.add_argument("--http-port", type=port, default=8080, help="V2 REST (default 8080)")
    serve.add_argument("--grpc-port", type=port, default=8081, help="V2 gRPC (default 8081)")
    serve.add_argument("--metrics-port", type=port, default=8082, help="Prometheus metrics (default 8082)")
    serve.set_defaults(func=cmd_serve)

    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    exit_with(main)
