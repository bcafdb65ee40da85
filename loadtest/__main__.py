"""`python -m loadtest`: smoke-check a served model and load-test it with Locust."""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Iterator, Sequence
from pathlib import Path

from slipway.cli import UserError, console, exit_with
from slipway.paths import BUILD_DIR, DEMO_ARTIFACT_DIR
from slipway.reports import write_report


@contextlib.contextmanager
def _local_server(model_dir: Path) -> Iterator:
    """A real MLServer on loopback for `model_dir`, stopped by PID on the way out."""
    from wrappers.artifact import SETTINGS_FILE
    from wrappers.server import LocalServer, ServerError

    if not (model_dir / SETTINGS_FILE).is_file():
        raise UserError(f"{model_dir} is not an artifact folder (no {SETTINGS_FILE}); run `make demo` or pass --model-dir")
    try:
        with console.status(f"starting MLServer on {model_dir}"):
            server = LocalServer(model_dir).start()
    except ServerError as err:
        raise UserError(f"MLServer did not start: {err}") from err
    console.print(f"MLServer (pid {server.pid}) serving {server.model!r}: REST {server.http_url}, gRPC {server.grpc_target}")
    try:
        yield server
    finally:
        server.stop()


def cmd_smoke(args: argparse.Namespace) -> int:
    from loadtest.smoke import SmokeError, check_grpc, check_http

    with _local_server(args.model_dir) as server:
        try:
            rest = check_http(server.http_url, server.model, args.model_dir)
            grpc = check_grpc(server.grpc_target, server.model, args.model_dir)
        except SmokeError as err:
            raise UserError(str(err)) from err
    write_report("smoke", {"model": server.model, "model_dir": str(args.model_dir), "rest": rest.as_dict(), "grpc": grpc.as_dict()})
    for result in (rest, grpc):
        console.print(
            f"{result.protocol}: {result.rows} rows answered as exported (max abs diff {result.max_abs_diff:.1e}, "
            f"{result.latency_ms:.1f} ms)"
        )
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from loadtest.run import LoadTestError, run_locust

    out_dir = BUILD_DIR / "loadtest"
    with _local_server(args.model_dir) as server:
        try:
            result = run_locust(
                server.http_url, model=server.model, model_dir=args.model_dir,
                users=args.users, duration_s=args.duration, out_dir=out_dir,
            )
        except LoadTestError as err:
            raise UserError(str(err)) from err
    write_report(
        "loadtest",
        {"protocol": "rest", "model": server.model, "host": "local", "result": result.as_dict(),
         "locust_html": str(out_dir / "locust.html"), "locust_csv": str(out_dir / "locust_stats.csv")},
    )
    console.print(
        f"{result.requests} requests in {result.duration_s} s: {result.rps:.1f} req/s, p50 {result.p50_ms:.0f} ms, "
        f"p95 {result.p95_ms:.0f} ms, p99 {result.p99_ms:.0f} ms, {result.failures} failures"
    )
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m loadtest", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    smoke = commands.add_parser("smoke", help="serve MODEL_DIR, check REST and gRPC answers with tritonclient")
    smoke.add_argument("--model-dir", type=Path, default=DEMO_ARTIFACT_DIR)
    smoke.set_defaults(func=cmd_smoke)
    run = commands.add_parser("run", help="serve MODEL_DIR and load-test it with headless Locust")
    run.add_argument("--model-dir", type=Path, default=DEMO_ARTIFACT_DIR)
    run.add_argument("--users", type=int, default=4, help="concurrent users")
    run.add_argument("--duration", type=int, default=15, help="seconds of load (<= 600)")
    run.set_defaults(func=cmd_run)
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    exit_with(main)
