"""`python -m wrappers serve`: serve an artifact folder with MLServer in the foreground."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from slipway.cli import UserError, exit_with
from slipway.paths import DEMO_ARTIFACT_DIR
from wrappers.server import ServerError, serve_foreground


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m wrappers", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="serve an artifact folder with MLServer in the foreground")
    serve.add_argument("--model-dir", type=Path, default=DEMO_ARTIFACT_DIR, help="artifact folder (default: the demo's)")
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (default: loopback only)")
    serve.add_argument("--http-port", type=int, default=8080)
    serve.add_argument("--grpc-port", type=int, default=8081)
    serve.add_argument("--metrics-port", type=int, default=8082)
    args = parser.parse_args(argv)
    try:
        serve_foreground(
            args.model_dir, host=args.host, http_port=args.http_port,
            grpc_port=args.grpc_port, metrics_port=args.metrics_port,
        )
    except ServerError as err:
        raise UserError(str(err)) from err
    return 0


if __name__ == "__main__":
    exit_with(main)
