"""`python -m benchmarks`: how fast Slipway's runtime serves (`serving`, `make bench`) and one model on CPU vs
CUDA vs TensorRT (`gpu`, `make bench-gpu`). `slipway bench` and `slipway bench-gpu` run the same commands."""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from pathlib import Path

from slipway import atomic
from slipway.cli import ArgumentParser, UserError, console, exit_with


def cmd_serving(args: argparse.Namespace) -> int:
    from benchmarks.models import MODELS
    from benchmarks.report import markdown, plot
    from benchmarks.run import BenchConfig, run_bench
    from slipway.paths import REPORTS_DIR
    from slipway.readme import BENCHMARKS_PAGE, replace_section
    from slipway.reports import write_report

    unknown = sorted(set(args.models) - set(MODELS))
    if unknown:
        raise UserError(f"unknown models {unknown}: choose from {sorted(MODELS)}")
    if args.seconds <= 0:
        raise UserError("--seconds must be positive")
    if args.rounds < 1:
        raise UserError("--rounds must be at least 1")
    payload = run_bench(BenchConfig(models=args.models, seconds=args.seconds, rounds=args.rounds))
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
    from rich.progress import Progress

    from benchmarks.gpu import GpuBenchConfig, markdown, plot, run_gpu_bench, steps
    from benchmarks.models import BENCH_DIR, mobilenet_model
    from slipway.artifact import sha256_file
    from slipway.paths import REPORTS_DIR
    from slipway.readme import BENCHMARKS_PAGE, replace_section
    from slipway.reports import write_report

    if args.seconds <= 0 or any(batch < 1 for batch in args.batch_sizes):
        raise UserError("--seconds and --batch-sizes must be positive")
    model = args.model or mobilenet_model().onnx_path
    if not Path(model).is_file():
        raise UserError(f"no ONNX model at {model}: pass --model FILE")
    work_dir = BENCH_DIR / "gpu" / sha256_file(Path(model))[:12]  # fp16/int8 graphs and engines of this model
    config = GpuBenchConfig(model=Path(model), work_dir=work_dir, batch_sizes=tuple(args.batch_sizes),
                            seconds=args.seconds)
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
        console.print("[yellow]no GPU here: only the CPU rows were measured (docs/benchmarks.md left as it is); run "
                      "`make bench-gpu` on a GPU machine (make setup GPU=1) for CUDA and TensorRT[/]")
    elif args.update_docs and replace_section(BENCHMARKS_PAGE, "gpu", table):
        console.print(f"GPU table in {BENCHMARKS_PAGE} updated")
    console.print(f"report {path}, plot {REPORTS_DIR / name}.png")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = ArgumentParser(prog="python -m benchmarks", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    bench = commands.add_parser(
        "serving", help="raw ONNX Runtime vs a plain MLServer runtime vs the wrappers runtime (reports/bench.json)"
    )
    bench.add_argument("--models", nargs="+", default=["digits", "mobilenetv2"], help="models to measure")
    bench.add_argument("--seconds", type=float, default=3.0, help="measured seconds per round of a point (default 3)")
    bench.add_argument("--rounds", type=int, default=3,
                       help="rounds per point, alternating the runtimes; the median round counts (default 3)")
    bench.add_argument("--no-docs", dest="update_docs", action="store_false",
                       help="do not rewrite the benchmark table in docs/benchmarks.md")
    bench.set_defaults(func=cmd_serving)

    gpu = commands.add_parser(
        "gpu", help="CPU vs CUDA vs TensorRT, fp32/fp16/int8, with/without IOBinding (reports/gpu.json)"
    )
    gpu.add_argument("--model", type=Path, help="fp32 ONNX model (default: MobileNetV2, built if needed)")
    gpu.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 32])
    gpu.add_argument("--seconds", type=float, default=2.0, help="measured seconds per row (default 2)")
    gpu.add_argument("--no-docs", dest="update_docs", action="store_false",
                     help="do not rewrite the GPU table in docs/benchmarks.md")
    gpu.set_defaults(func=cmd_gpu)
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    exit_with(main)
