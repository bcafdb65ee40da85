"""`python -m loadtest`: smoke-check a served model, load-test it with Locust, tune its serving spec."""

from __future__ import annotations

import argparse
import contextlib
import math
from collections.abc import Iterator, Sequence
from pathlib import Path

from rich.table import Table

from loadtest.tuning.cli import add_commands as add_tune_commands
from slipway import atomic
from slipway.cli import UserError, console, dispatch
from slipway.paths import BUILD_DIR, DEMO_ARTIFACT_DIR, DEMO_MODEL_NAME
from slipway.reports import write_report

PROG = "python -m loadtest"

EXIT_SLO_BROKEN = 1


@contextlib.contextmanager
def _local_server(model_dir: Path) -> Iterator:
    """A real MLServer on loopback for `model_dir`, stopped by PID on the way out."""
    from slipway.artifact import SETTINGS_FILE
    from slipway.local_server import LocalServer, ServerError

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
    write_report(
        "smoke", {"model": server.model, "model_dir": str(args.model_dir), "rest": rest.as_dict(), "grpc": grpc.as_dict()}
    )
    for result in (rest, grpc):
        console.print(
            f"{result.protocol}: {result.rows} rows answered as exported (max abs diff {result.max_abs_diff:.1e}, "
            f"{result.latency_ms:.1f} ms)"
        )
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from loadtest.config import ConfigError, build_shape, parse_host
    from loadtest.payloads import PayloadError
    from loadtest.run import MAX_PROCESSES, LoadTestError
    from slipway.slo import load_slo

    try:
        slo = load_slo(
            args.slo,
            p50_ms=args.p50_ms,
            p95_ms=args.p95_ms,
            p99_ms=args.p99_ms,
            max_error_rate=args.max_error_rate,
            min_rps=args.min_rps,
        )
        shape = build_shape(
            kind=args.shape,
            users=(1 if args.shape == "step" else None) if args.users is None else args.users,
            duration_s=args.duration,
            step_s=args.step_seconds,
            step_factor=args.step_factor,
            max_users=args.max_users,
            spike_users=args.spike_users,
            spike_s=args.spike_seconds,
            window_s=args.window_seconds,
        )
    except ConfigError as err:
        raise UserError(str(err)) from err
    if args.batch_size < 1 or not 0 < args.request_timeout < math.inf:
        raise UserError("--batch-size must be at least 1 and --request-timeout above 0 seconds")
    if not 0 <= args.processes <= MAX_PROCESSES:
        raise UserError(f"--processes must be between 0 and {MAX_PROCESSES}, got {args.processes}")
    if args.rest_body != "json" and args.protocol != "rest":
        raise UserError(f"--rest-body {args.rest_body} is for --protocol rest; gRPC already carries tensors as raw bytes")
    try:
        if args.host:
            endpoint = parse_host(
                args.host, protocol=args.protocol, model=args.model or DEMO_MODEL_NAME, version=args.model_version
            )
            return _load(args, endpoint, shape, slo, host=args.host, watch_pid=None, model_dir=args.model_dir)
        model_dir = args.model_dir or DEMO_ARTIFACT_DIR
        with _local_server(model_dir) as server:
            base = server.http_url if args.protocol == "rest" else server.grpc_target
            endpoint = parse_host(base, protocol=args.protocol, model=args.model or server.model, version=args.model_version)
            return _load(args, endpoint, shape, slo, host="local", watch_pid=server.pid, model_dir=model_dir)
    except (ConfigError, PayloadError, LoadTestError) as err:
        raise UserError(str(err)) from err


def _load(args, endpoint, shape, slo, *, host: str, watch_pid: int | None, model_dir: Path | None = None) -> int:
    from loadtest.config import LoadJob
    from loadtest.payloads import build_payload
    from loadtest.report import write_loadtest_report
    from loadtest.run import no_answer, run_locust
    from slipway.slo import judge

    out_dir = args.out_dir or BUILD_DIR / args.name
    if out_dir.exists() and not out_dir.is_dir():
        raise UserError(f"--out-dir {out_dir} is a file; name a folder for Locust's CSV, HTML and log (or leave it out)")
    body, payload = build_payload(
        endpoint, batch_size=args.batch_size, data=args.data, model_dir=model_dir, body_format=args.rest_body
    )
    try:  # only now that the target answered and the payload is built: a refused run leaves no empty folder
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise UserError(f"cannot create --out-dir {out_dir}: {err.strerror or err}; name a folder you can write to") from err
    suffix = ".pb" if endpoint.protocol == "grpc" else ".bin" if args.rest_body == "binary" else ".json"
    payload_file = out_dir / f"request{suffix}"
    atomic.write_bytes(payload_file, body)
    job = LoadJob(
        endpoint=endpoint,
        shape=shape,
        payload_file=payload_file,
        request_headers=payload["headers"],
        steps_file=out_dir / "steps.json",
        request_timeout_s=args.request_timeout,
        watch_pid=watch_pid,
    )
    body_kind = ", binary tensors" if args.rest_body == "binary" else ""
    console.print(
        f"load: {shape.kind} on {endpoint.describe()}{body_kind} "
        f"({payload['rows_per_request']} rows/request from {payload['source']})"
    )
    run = run_locust(job, out_dir, processes=args.processes)
    verdict = (
        None
        if slo.is_empty()
        else judge(slo, shape=shape.kind, steps=[step.as_dict() for step in run.steps], aggregate=run.aggregate.as_dict())
    )
    context = {
        "protocol": endpoint.protocol,
        "rest_body": args.rest_body if endpoint.protocol == "rest" else None,
        "model": endpoint.model,
        "version": endpoint.version,
        "host": host,
        "endpoint": endpoint.model_dump(),
        "shape": shape.model_dump(),
        "payload": payload,
        "processes": args.processes,
    }
    path = write_loadtest_report(run, name=args.name, context=context, verdict=verdict)
    _print_run(run)
    console.print(f"report: {path} (plot {path.with_suffix('.png')}, Locust HTML {run.files['locust_html']})")
    unanswered = no_answer(run)
    if unanswered:  # not a measurement of the server at all, whatever the SLO says
        raise UserError(
            f"{unanswered}; check that {endpoint.describe()} serves V2 inference (--host, --model, --protocol, "
            f"--model-version) and read {run.files['locust_log']}"
        )
    if verdict is None:
        return 0
    if verdict.passed:
        console.print(f"[green]SLO holds[/] on {verdict.judged_on}: {verdict.slo.model_dump(exclude_none=True)}")
        return 0
    console.print(f"[bold red]SLO broken[/] on {verdict.judged_on}:")
    for line in verdict.lines():
        console.print(f"  - {line}")
    return EXIT_SLO_BROKEN


def _print_run(run) -> None:
    table = Table(title=f"stopped: {run.stopped}" if run.stopped else None)
    for column in ("step", "users", "req/s", "p50 ms", "p95 ms", "p99 ms", "failures", "server cores"):
        table.add_column(column, justify="right")
    show = lambda value: "-" if value is None else f"{value:g}"  # noqa: E731
    for step in run.steps:
        table.add_row(
            step.name,
            str(step.users),
            f"{step.rps:.1f}",
            show(step.p50_ms),
            show(step.p95_ms),
            show(step.p99_ms),
            f"{step.failures}/{step.requests}",
            show(step.server_cpu_cores),
        )
    console.print(table)
    if run.saturation:
        console.print(
            ("saturation at {users} users, {rps:.0f} req/s: " if run.saturation["saturated"] else "").format(**run.saturation)
            + run.saturation["reason"]
        )
    result = run.aggregate
    console.print(
        f"whole run: {result.requests} requests, {result.rps:.1f} req/s, p50 {result.p50_ms:g} ms, "
        f"p95 {result.p95_ms:g} ms, p99 {result.p99_ms:g} ms, {result.failures} failures"
    )


def register(commands: argparse._SubParsersAction) -> None:
    """Add `python -m loadtest`'s subcommands to `commands` (the `slipway` command reaches them through slipway.command)."""
    smoke = commands.add_parser("smoke", help="serve MODEL_DIR, check REST and gRPC answers with tritonclient")
    smoke.add_argument("--model-dir", type=Path, default=DEMO_ARTIFACT_DIR)
    smoke.set_defaults(func=cmd_smoke)
    run = commands.add_parser(
        "run",
        help="load-test a V2 endpoint with headless Locust (a local MLServer on MODEL_DIR unless --host)",
        description="Load-test a V2 endpoint with headless Locust and gate the run on an SLO. Without --host, "
        "MLServer is started on --model-dir for the run and stopped after it. Exit codes: 0 passed, "
        f"{EXIT_SLO_BROKEN} SLO broken, 2 bad input (or a server that answered no request).",
    )
    target = run.add_argument_group("target")
    target.add_argument(
        "--host",
        help="endpoint: http(s)://HOST:PORT[/seldon/NAMESPACE/NAME] (REST) or "
        "HOST:PORT, grpc(s)://HOST:PORT[/seldon/NAMESPACE/NAME] (gRPC); default: a local server",
    )
    target.add_argument("--protocol", choices=["rest", "grpc"], default="rest")
    target.add_argument(
        "--model-dir", type=Path, help="artifact to serve locally (default: the demo's) and to take sample rows from"
    )
    target.add_argument("--model", help="model name (default: the artifact's, or digits with --host)")
    target.add_argument("--model-version", help="model version to address (/v2/models/NAME/versions/V)")
    target.add_argument(
        "--data",
        type=Path,
        help="sample rows: .npz of input arrays or a V2 .json request body "
        "(default: the artifact's input example, else random tensors from the model's metadata)",
    )
    target.add_argument("--batch-size", type=int, default=1, help="rows per request")
    target.add_argument(
        "--rest-body",
        choices=["json", "binary"],
        default="json",
        help="REST bodies: V2 JSON (any V2 server), or tensors as bytes after a JSON header (Triton's "
        "binary extension, tritonclient.http's default; served by Slipway's runtime, not by MLServer's own)",
    )
    target.add_argument("--request-timeout", type=float, default=30, help="seconds before a request counts as failed")
    load = run.add_argument_group("load shape")
    load.add_argument("--shape", choices=["constant", "step", "spike", "soak"], default="constant")
    load.add_argument("--users", type=int, help="constant/soak users (4); the step's first (1); the spike's base (4)")
    load.add_argument("--duration", type=float, default=15, help="seconds of constant, spike or soak load")
    load.add_argument("--step-seconds", type=float, default=5, help="step: seconds per step")
    load.add_argument("--step-factor", type=float, default=2, help="step: users grow by this factor")
    load.add_argument("--max-users", type=int, default=64, help="step: stop here if not saturated before")
    load.add_argument("--spike-users", type=int, help="spike: users during the spike (default 4x --users)")
    load.add_argument("--spike-seconds", type=float, help="spike: its length (default a third of --duration)")
    load.add_argument("--window-seconds", type=float, help="soak: one reported step per window")
    load.add_argument("--processes", type=int, default=0, help="Locust worker processes (distributed mode on this machine)")
    gate = run.add_argument_group("SLO gate (flags override the file)")
    gate.add_argument("--slo", type=Path, help="YAML with p50_ms, p95_ms, p99_ms, max_error_rate, min_rps")
    for flag, text in (
        ("--p50-ms", "p50 latency limit"),
        ("--p95-ms", "p95 latency limit"),
        ("--p99-ms", "p99 latency limit"),
        ("--max-error-rate", "failed fraction allowed (0-1)"),
        ("--min-rps", "throughput required"),
    ):
        gate.add_argument(flag, type=float, help=text)
    report = run.add_argument_group("output")
    report.add_argument("--name", default="loadtest", help="report name: reports/NAME.json and .png")
    report.add_argument("--out-dir", type=Path, help="Locust CSV/HTML/log folder (default build/NAME)")
    run.set_defaults(func=cmd_run)
    add_tune_commands(commands)


def main(argv: Sequence[str] | None = None) -> int:
    return dispatch(PROG, __doc__, register, argv)
