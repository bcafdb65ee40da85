"""`python -m benchmarks`: how fast Slipway's runtime serves (`serving`, `make bench`), against KServe and PyTriton
(`peers`, `make bench-peers`), one model on CPU vs CUDA vs TensorRT (`gpu`, `make bench-gpu`), and one front end
vs N (`frontends`), this tree's runtime vs another commit's (`against`), what one large JSON request costs in
memory (`body-memory`), what hostile clients make a server spend (`hostile-load`), and every Keras corpus model
through the export path (`keras-corpus`, `make bench-keras`).
`slipway bench`, `slipway bench-peers`, `slipway bench-gpu` and `slipway bench-keras` run the same commands."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from pydantic import ValidationError
from rich.progress import Progress

from slipway import atomic
from slipway.cli import UserError, console, dispatch, one_line
from slipway.paths import REPORTS_DIR
from slipway.readme import BENCHMARKS_PAGE, replace_section
from slipway.reports import read_report, write_report

PROG = "python -m benchmarks"


def cmd_serving(args: argparse.Namespace) -> int:
    import onnxruntime as ort

    from benchmarks.models import MODELS
    from benchmarks.report import markdown, plot
    from benchmarks.run import PROVIDERS, BenchConfig, parse_cpus, run_bench

    unknown = sorted(set(args.models) - set(MODELS))
    if unknown:
        raise UserError(f"unknown models {unknown}: choose from {sorted(MODELS)}")
    if args.seconds <= 0:
        raise UserError("--seconds must be positive")
    if args.rounds < 1:
        raise UserError("--rounds must be at least 1")
    try:
        server_cpus = parse_cpus(args.server_cpus, "--server-cpus") if args.server_cpus else None
        client_cpus = parse_cpus(args.client_cpus, "--client-cpus") if args.client_cpus else None
    except ValueError as err:
        raise UserError(str(err)) from None
    if server_cpus and client_cpus and set(server_cpus) & set(client_cpus):
        raise UserError(
            f"--server-cpus and --client-cpus share CPUs {sorted(set(server_cpus) & set(client_cpus))}: "
            "give each its own, or leave both out"
        )
    provider = PROVIDERS[args.provider]
    if provider != "CUDAExecutionProvider" and "CUDAExecutionProvider" in ort.get_available_providers():
        console.print("[yellow]this host has CUDA: measuring the CPU provider only (--provider cuda for the GPU)[/]")
    payload = run_bench(
        BenchConfig(
            models=args.models,
            seconds=args.seconds,
            rounds=args.rounds,
            provider=provider,
            server_cpus=server_cpus,
            client_cpus=client_cpus,
        )
    )
    path = write_report("bench", payload)
    plot(payload, REPORTS_DIR / "bench.png")
    table = markdown({**payload, "created_at": time.strftime("%Y-%m-%d")}, "Serving throughput")
    atomic.write_text(REPORTS_DIR / "bench.md", table)
    if args.update_docs and replace_section(BENCHMARKS_PAGE, "bench", table):
        console.print(f"benchmark table in {BENCHMARKS_PAGE} updated from {path}")
    for figure in payload["figures"]:
        mark = "[green]met[/]" if figure["met"] else "[red]not met[/]"
        console.print(f"{figure['figure']}: {figure['value']:.2f} (target {figure['target']}) {mark}")
    console.print(f"report {path}, plot {REPORTS_DIR / 'bench.png'}")
    return 0


def cmd_gpu(args: argparse.Namespace) -> int:
    from benchmarks.gpu import GpuBenchConfig, markdown, plot, require_gpu, run_gpu_bench, steps
    from benchmarks.models import BENCH_DIR, mobilenet_model
    from slipway.artifact import sha256_file

    if args.seconds <= 0 or any(batch < 1 for batch in args.batch_sizes):
        raise UserError("--seconds and --batch-sizes must be positive")
    if not args.allow_no_gpu and (missing := require_gpu()):
        raise UserError(missing)
    model = args.model or mobilenet_model().onnx_path
    if not Path(model).is_file():
        raise UserError(f"no ONNX model at {model}: pass --model FILE")
    work_dir = BENCH_DIR / "gpu" / sha256_file(Path(model))[:12]  # fp16/int8 graphs and engines of this model
    config = GpuBenchConfig(model=Path(model), work_dir=work_dir, batch_sizes=tuple(args.batch_sizes), seconds=args.seconds)
    with Progress() as progress:
        task = progress.add_task("bench-gpu", total=steps(config))
        payload = run_gpu_bench(config, on_step=lambda steps: progress.advance(task, steps))
    # A run without a GPU checks the fallbacks; it must not replace a GPU machine's record (kept in git).
    name = "gpu" if payload["gpu"] else "gpu-cpu-only"
    path = write_report(name, payload)
    plot(payload, REPORTS_DIR / f"{name}.png")
    table = markdown(payload)
    atomic.write_text(REPORTS_DIR / f"{name}.md", table)
    if payload["gpu"] is None:
        console.print(
            "[yellow]no GPU here: only the CPU rows were measured (docs/benchmarks.md left as it is); run "
            "`make bench-gpu` on a GPU machine (make setup GPU=1) for CUDA and TensorRT[/]"
        )
    elif args.update_docs and replace_section(BENCHMARKS_PAGE, "gpu", table):
        console.print(f"GPU table in {BENCHMARKS_PAGE} updated")
    console.print(f"report {path}, plot {REPORTS_DIR / name}.png")
    return 0


def cmd_peers(args: argparse.Namespace) -> int:
    from benchmarks.models import MODELS
    from benchmarks.peers.harness import PeersConfig, run_peers, wrong_answers
    from benchmarks.peers.report import markdown
    from benchmarks.report import plot

    unknown = sorted(set(args.models) - set(MODELS))
    if unknown:
        raise UserError(f"unknown models {unknown}: choose from {sorted(MODELS)}")
    try:
        config = PeersConfig(
            models=args.models,
            concurrency=args.concurrency,
            seconds=args.seconds,
            rounds=args.rounds,
            raw_seconds=args.seconds,
            skip=args.skip,
        )
    except ValidationError as err:
        raise UserError(one_line(err, "bench-peers")) from None
    payload = run_peers(config, on_line=lambda line: console.print(line, markup=False))
    path = write_report("bench-peers", payload)
    plot(payload, REPORTS_DIR / "bench-peers.png")
    table = markdown({**payload, "created_at": time.strftime("%Y-%m-%d")})
    if args.update_docs and replace_section(BENCHMARKS_PAGE, "bench-peers", table):
        console.print(f"bench-peers table in {BENCHMARKS_PAGE} updated from {path}")
    sys.stdout.write(table)
    console.print(f"report {path}, plot {REPORTS_DIR / 'bench-peers.png'}")
    wrong = wrong_answers(payload)
    for line in wrong:
        console.print(f"[red]{line}[/]")
    return 1 if wrong else 0


def cmd_frontends(args: argparse.Namespace) -> int:
    from benchmarks.frontends import run

    return run(args)


def split_doc() -> str:
    from benchmarks.split import __doc__ as doc

    return doc or ""


def cmd_split(args: argparse.Namespace) -> int:
    from benchmarks.split import SplitBenchError, run_split_bench

    if min(args.concurrency) < 1 or args.rows < 1 or args.rounds < 1 or not 0 < args.seconds <= 60:
        raise UserError("--concurrency, --rows and --rounds must be at least 1 and --seconds within 0-60")
    try:
        payload = run_split_bench(
            args.executor,
            models=args.models,
            rows=args.rows,
            concurrency=args.concurrency,
            seconds=args.seconds,
            rounds=args.rounds,
        )
    except SplitBenchError as err:
        raise UserError(str(err).splitlines()[0]) from err
    path = write_report("bench-split", payload)
    for model in payload["models"]:
        for line in model["summary"]:
            console.print(
                f"{model['model']} x{line['concurrency']}: one-pod {line['one-pod_requests_per_s']} req/s "
                f"p50 {line['one-pod_p50_ms']} ms; split {line['split_requests_per_s']} req/s p50 "
                f"{line['split_p50_ms']} ms (x{line['split_over_one_pod_requests_per_s']} req/s)",
                soft_wrap=True,
            )
    console.print(f"report {path}")
    return 0


def cmd_body_memory(args: argparse.Namespace) -> int:
    from benchmarks import body_memory

    if args.mib < 1 or args.rounds < 1:
        raise UserError("--mib and --rounds must be at least 1")
    payload = body_memory.run(args)
    path = write_report("body-memory", payload)
    body_memory.plot(payload, REPORTS_DIR / "body-memory.png")
    for side, figures in payload["servers"].items():
        during = figures["small_requests"]["during_the_large_body"]
        console.print(
            f"{side}: {figures['median_bytes_held_per_byte_sent']} bytes held per byte of a JSON body; small "
            f"requests meanwhile p99 {during['p99_ms']} ms (alone {figures['small_requests']['alone']['p99_ms']} ms)"
        )
    console.print(f"report {path}, plot {REPORTS_DIR / 'body-memory.png'}")
    return 0


def cmd_hostile_load(args: argparse.Namespace) -> int:
    from benchmarks import hostile_load

    if min(args.mib, args.trickling, args.unknown_names, args.malformed, args.clients, args.sigterm_runs) < 1:
        raise UserError("--mib, --trickling, --unknown-names, --malformed, --clients and --sigterm-runs must be at least 1")
    tier = hostile_load.tier_of(args)
    from benchmarks.against import resolve

    against = tuple(resolve(rev) for rev in args.against)
    with Progress(console=console, transient=True) as progress:
        task = progress.add_task("hostile-load", total=hostile_load.steps(tier, against, args.memory_only))
        payload = hostile_load.run(tier, against, on_step=lambda: progress.advance(task), memory_only=args.memory_only)
    if args.memory_only:
        payload = hostile_load.merged(read_report("hostile-load"), payload)
    path = write_report("hostile-load", payload)
    hostile_load.plot(payload, REPORTS_DIR / "hostile-load.png")
    for side, figures in payload["servers"].items():
        console.print(
            f"{side}: {figures['rss']['bytes_held_per_byte_sent']} bytes held per byte of a {tier.body_mib} MiB body "
            f"(INT64: {figures['rss_int64']['bytes_held_per_byte_sent']}, "
            f"BYTES: {figures['rss_bytes']['bytes_held_per_byte_sent']}); "
            f"small requests' p99 during it {figures['small_requests']['during_the_large_body']['p99_ms']} ms; "
            f"{figures['slowloris']['held_by_the_server']} of {tier.trickling} trickling connections held; "
            f"{figures['unknown_models']['series_after']} metric series after {2 * tier.unknown_names} unknown names; "
            f"log bytes per malformed request REST {figures['malformed']['rest_log_bytes_per_request']}, "
            f"gRPC {figures['malformed']['grpc_log_bytes_per_request']}; lost on SIGTERM {figures['sigterm']['lost']}",
            soft_wrap=True,
        )
    for side, figures in payload["rss_at"].items():
        console.print(
            f"{side}: {figures['rss']['bytes_held_per_byte_sent']} bytes held per byte of a {tier.body_mib} MiB body "
            f"(INT64: {figures['rss_int64']['bytes_held_per_byte_sent']}, "
            f"BYTES: {figures.get('rss_bytes', {}).get('bytes_held_per_byte_sent', 'not measured')})"
        )
    console.print(f"report {path}, plot {REPORTS_DIR / 'hostile-load.png'}")
    return 0


def cmd_against(args: argparse.Namespace) -> int:
    from benchmarks import against

    with Progress() as progress:
        task = progress.add_task(f"against {args.rev}", total=against.steps(args))
        payload = against.run(args, on_step=lambda: progress.advance(task))
    path = write_report("bench-against", payload)
    against.plot(payload, REPORTS_DIR / "bench-against.png")
    if args.update_docs and replace_section(BENCHMARKS_PAGE, "bench-against", against.markdown(payload)):
        console.print(f"table in {BENCHMARKS_PAGE} updated from {path}")
    for name, model in payload["models"].items():
        for point in model["points"]:
            console.print(
                f"{name} {point['protocol']} c={point['concurrency']}: this tree / {payload['rev'][:12]} "
                f"rows/s x{point['rows_per_s_ratio']:.3f} (rounds {point['rows_per_s_ratio_rounds']}), "
                f"server CPU per request x{point['cpu_per_request_ratio']:.3f}",
                soft_wrap=True,
            )
    console.print(f"report {path}, plot {REPORTS_DIR / 'bench-against.png'}")
    return 0


def cmd_keras_corpus(args: argparse.Namespace) -> int:
    from benchmarks import keras_corpus

    keras_corpus.check_arguments(args)
    with Progress(console=console, transient=True) as progress:
        task = progress.add_task("keras-corpus", total=keras_corpus.steps(args))
        payload = keras_corpus.run(args, on_step=lambda steps=1: progress.advance(task, steps))
    path = write_report(args.report, payload)
    payload = json.loads(path.read_text())  # stamped with the time and the machine
    keras_corpus.plot(payload, path.with_suffix(".png"))
    table = keras_corpus.markdown(payload)
    if args.update_docs and args.report == "keras-corpus" and replace_section(BENCHMARKS_PAGE, "keras-corpus", table):
        console.print(f"table in {BENCHMARKS_PAGE} updated from {path}")
    sys.stdout.write(table)
    console.print(f"report {path}, plot {REPORTS_DIR / path.with_suffix('.png').name}")
    failed = [entry["model"] for entry in payload["models"] if "convert_error" in entry or "variants_error" in entry]
    for name in failed:
        console.print(f"[red]{name}: not measured (see the table)[/]")
    return 1 if failed else 0


def register(commands: argparse._SubParsersAction) -> None:
    """Add `python -m benchmarks`'s subcommands to `commands` (the `slipway` command reaches them through slipway.command)."""
    bench = commands.add_parser(
        "serving", help="raw ONNX Runtime vs a plain MLServer runtime vs the wrappers runtime (reports/bench.json)"
    )
    bench.add_argument("--models", nargs="+", default=["digits", "mobilenetv2"], help="models to measure")
    bench.add_argument("--seconds", type=float, default=3.0, help="measured seconds per round of a point (default 3)")
    bench.add_argument(
        "--rounds", type=int, default=3, help="rounds per point, alternating the runtimes; the median round counts (default 3)"
    )
    bench.add_argument(
        "--provider",
        choices=("cpu", "cuda"),
        default="cpu",
        help="where the raw limit and every server run (default cpu, also on a GPU host)",
    )
    bench.add_argument(
        "--server-cpus",
        metavar="LIST",
        help="keep the raw limit and the servers on these CPUs "
        "(taskset's form, e.g. 0-7); with --client-cpus, server and client never share a core",
    )
    bench.add_argument("--client-cpus", metavar="LIST", help="keep the load's clients on these CPUs (e.g. 8-15)")
    bench.add_argument(
        "--no-docs", dest="update_docs", action="store_false", help="do not rewrite the benchmark table in docs/benchmarks.md"
    )
    bench.set_defaults(func=cmd_serving)

    peers = commands.add_parser(
        "peers", help="raw ONNX Runtime vs plain MLServer vs Slipway vs KServe vs PyTriton, one client (reports/bench-peers.json)"
    )
    peers.add_argument("--models", nargs="+", default=["digits", "mobilenetv2"], help="models to measure")
    peers.add_argument("--concurrency", type=int, nargs="+", default=[1, 8], help="concurrent clients per point")
    peers.add_argument(
        "--seconds", type=float, default=2.0, help="measured seconds per load, and per raw ONNX Runtime setting (default 2)"
    )
    peers.add_argument(
        "--rounds",
        type=int,
        default=3,
        help="rounds per point (at least 2), the servers in turn; the median round counts (default 3)",
    )
    peers.add_argument(
        "--skip",
        nargs="+",
        default=[],
        metavar="PEER",
        help="peers not to install or run (kserve, pytriton): reported as not run",
    )
    peers.add_argument(
        "--no-docs", dest="update_docs", action="store_false", help="do not rewrite the bench-peers table in docs/benchmarks.md"
    )
    peers.set_defaults(func=cmd_peers)

    gpu = commands.add_parser("gpu", help="CPU vs CUDA vs TensorRT, fp32/fp16/int8, with/without IOBinding (reports/gpu.json)")
    gpu.add_argument("--model", type=Path, help="fp32 ONNX model (default: MobileNetV2, built if needed)")
    gpu.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 32])
    gpu.add_argument("--seconds", type=float, default=2.0, help="measured seconds per row (default 2)")
    gpu.add_argument(
        "--allow-no-gpu",
        action="store_true",
        help="without a CUDA GPU, measure the CPU rows and say why the others are missing (else refused)",
    )
    gpu.add_argument(
        "--no-docs", dest="update_docs", action="store_false", help="do not rewrite the GPU table in docs/benchmarks.md"
    )
    gpu.set_defaults(func=cmd_gpu)
    from benchmarks.frontends import add_arguments as frontends_arguments

    frontends = commands.add_parser(
        "frontends", help="one front end vs N per model, side by side over gRPC (reports/bench-frontends.json)"
    )
    frontends_arguments(frontends)
    frontends.set_defaults(func=cmd_frontends)
    split = commands.add_parser(
        "split",
        help="the CPU/GPU split form through Seldon's executor vs the one-pod form (reports/bench-split.json)",
        description=split_doc(),
    )
    split.add_argument("--executor", type=Path, required=True, help="Seldon Core's executor binary, v1.17.1")
    split.add_argument("--models", nargs="+", default=["digits", "mobilenetv2"], help="models to measure")
    split.add_argument("--rows", type=int, default=1, help="images per request (default 1)")
    split.add_argument("--concurrency", type=int, nargs="+", default=[1, 8], help="concurrent clients per point")
    split.add_argument("--seconds", type=float, default=3.0, help="measured seconds per round of a point (default 3)")
    split.add_argument("--rounds", type=int, default=3, help="rounds per point, the forms in turn (default 3)")
    split.set_defaults(func=cmd_split)
    from benchmarks.against import add_arguments as against_arguments

    against = commands.add_parser(
        "against", help="this tree's runtime vs another commit's, side by side (reports/bench-against.json)"
    )
    against_arguments(against)
    against.set_defaults(func=cmd_against)
    from benchmarks.body_memory import add_arguments as body_memory_arguments

    body_memory = commands.add_parser(
        "body-memory",
        help="peak server memory per byte of one large JSON request, Slipway vs plain MLServer (reports/body-memory.json)",
    )
    body_memory_arguments(body_memory)
    body_memory.set_defaults(func=cmd_body_memory)
    from benchmarks.hostile_load import add_arguments as hostile_load_arguments

    hostile = commands.add_parser(
        "hostile-load",
        help="what hostile clients make a server spend (memory, stalls, connections, series, log bytes, requests lost "
        "on SIGTERM), Slipway vs plain MLServer (reports/hostile-load.json)",
    )
    hostile_load_arguments(hostile)
    hostile.set_defaults(func=cmd_hostile_load)
    from benchmarks.keras_corpus import add_arguments as keras_corpus_arguments

    corpus = commands.add_parser(
        "keras-corpus",
        help="every Keras corpus model: conversion time, parity, ONNX size, fp32/int8/fp16 rows/s, the chosen variant "
        "(reports/keras-corpus.json)",
    )
    keras_corpus_arguments(corpus)
    corpus.set_defaults(func=cmd_keras_corpus)


def main(argv: Sequence[str] | None = None) -> int:
    return dispatch(PROG, __doc__, register, argv)
