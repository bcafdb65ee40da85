"""`python -m loadtest tune` and `tune-check`: flags in, typed space and SLO out, then search and report."""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import ValidationError

from slipway import atomic
from slipway.cli import UserError, console, one_line
from slipway.paths import BUILD_DIR, DEMO_ARTIFACT_DIR, REPORTS_DIR
from slipway.reports import write_report

if TYPE_CHECKING:
    from loadtest.tuning.machine import Provider

EXIT_CHECK_FAILED = 1


def _choices(field: str, convert, example: str):
    """An argparse type for a comma-separated list of `field`'s choices, each checked against the space's floor here,
    so a bad one is named with its flag."""
    from loadtest.tuning.space import refused_choices

    kind = "integers" if convert is int else "numbers"

    def parse(text: str) -> list:
        try:
            values = [convert(part) for part in text.split(",") if part.strip()]
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of {kind}, e.g. {example}") from None
        if not values:
            raise argparse.ArgumentTypeError(f"{text!r} holds no value; give at least one, e.g. {example}")
        refused = refused_choices(field, values)
        if refused:
            shown, floor = refused
            raise argparse.ArgumentTypeError(f"{shown} not allowed: each choice must be {floor}, e.g. {example}")
        return values

    return parse


def _providers(text: str) -> list[str]:
    from loadtest.tuning.machine import AUTO, ORT_PROVIDERS

    names = [part.strip() for part in text.split(",") if part.strip()]
    unknown = [name for name in names if name not in (*ORT_PROVIDERS, AUTO)]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"{text!r}: choose from cpu, cuda, tensorrt (comma-separated), or auto")
    return list(dict.fromkeys(names))


def _bucket_sets(text: str) -> list[tuple[int, ...]]:
    from loadtest.tuning.space import parse_buckets

    try:
        sets = [parse_buckets(part.strip()) for part in text.split(",") if part.strip()]
    except ValueError:
        sets = []
    if not sets or any(size < 1 for buckets in sets for size in buckets):
        raise argparse.ArgumentTypeError(
            f"{text!r}: give bucket sets separated by commas, each `none` or positive row "
            "counts joined by dots, e.g. none,8,1.8.32"
        )
    return sets


def _switches(text: str) -> list[bool]:
    values = {"off": False, "on": True}
    names = [part.strip() for part in text.split(",") if part.strip()]
    if not names or any(name not in values for name in names):
        raise argparse.ArgumentTypeError(f"{text!r}: give off, on or off,on")
    return [values[name] for name in dict.fromkeys(names)]


def _variant(text: str) -> tuple[str, Path]:
    name, sep, folder = text.partition("=")
    if not sep or not name or not folder:
        raise argparse.ArgumentTypeError(f"{text!r}: give a variant as NAME=ARTIFACT_DIR, e.g. int8=build/variants/digits/int8")
    return name, Path(folder)


def add_commands(commands) -> None:
    for name, func, text in (
        ("tune", cmd_tune, "search serving specs with Optuna (TPE), measuring each with a real step load"),
        ("tune-check", cmd_tune_check, "measure the whole grid and check the tuner against it on the same numbers"),
    ):
        parser = commands.add_parser(
            name,
            help=text,
            description=text + ". Measurements run one at a time; "
            "wrap them in `flock /tmp/slipway-bench.lock` on a shared machine.",
        )
        space = parser.add_argument_group("search space")
        space.add_argument(
            "--variant",
            type=_variant,
            action="append",
            default=[],
            metavar="NAME=DIR",
            help="an artifact folder to serve (repeat: fp32=..., int8=...); default: fp32/int8 from "
            "reports/export.json, else --model-dir as fp32",
        )
        space.add_argument("--model-dir", type=Path, default=DEMO_ARTIFACT_DIR, help="the fp32 artifact when no variant is known")
        space.add_argument(
            "--workers", type=_choices("parallel_workers", int, "0,1"), default=[0, 1], help="MLServer parallel_workers choices"
        )
        space.add_argument(
            "--batch-sizes",
            type=_choices("max_batch_size", int, "1,8,32"),
            default=[1, 8, 32],
            help="max_batch_size choices (1: off)",
        )
        space.add_argument(
            "--batch-times-ms",
            type=_choices("max_batch_time_ms", float, "1,5"),
            default=[1, 5],
            help="max_batch_time choices, ms",
        )
        space.add_argument(
            "--intra",
            type=_choices("intra_op_threads", int, "1,2"),
            help="intra_op_threads choices (default 1,2; 1,2,4 with one variant)",
        )
        space.add_argument("--inter", type=_choices("inter_op_threads", int, "1"), default=[1], help="inter_op_threads choices")
        space.add_argument(
            "--run-slots",
            type=_choices("inference_threads", int, "1,2"),
            default=[1],
            help="inference_threads choices: runs side by side (for models that do not run inline)",
        )
        space.add_argument(
            "--merge-rows",
            type=_choices("max_batch_rows", int, "1,4"),
            default=[1],
            help="max_batch_rows choices: rows merged into one run, no window (1: off)",
        )
        space.add_argument(
            "--providers",
            type=_providers,
            default=["cpu"],
            help="execution providers: cpu (default), or cuda,tensorrt (objective: rows/s per GPU; "
            "refused where this machine lacks them), or auto (the GPU ones this machine runs, else cpu)",
        )
        space.add_argument(
            "--batch-buckets",
            type=_bucket_sets,
            default=[()],
            help="batch_buckets choices: sets of row counts runs are padded to, e.g. none,8,1.8.32",
        )
        space.add_argument(
            "--cuda-graphs", type=_switches, default=[False], help="CUDA graph choices (cuda, with buckets): off,on"
        )
        space.add_argument(
            "--frontends",
            type=_choices("frontends", int, "1,2"),
            default=[1],
            help="front-end processes per GPU choices (the runtime's `frontends`)",
        )
        slo = parser.add_argument_group("SLO (a trial is infeasible when no step holds it)")
        slo.add_argument("--slo", type=Path, help="YAML with p50_ms, p95_ms, p99_ms, max_error_rate")
        slo.add_argument("--p95-ms", type=float, help="p95 latency limit (default 50 unless --slo or --p99-ms gives one)")
        slo.add_argument("--p99-ms", type=float)
        slo.add_argument("--max-error-rate", type=float, default=0.01)
        load = parser.add_argument_group("measurement")
        load.add_argument("--step-seconds", type=float, default=3, help="seconds per load step (users 1, 2, 4, ...)")
        load.add_argument("--max-users", type=int, default=16)
        load.add_argument("--protocol", choices=["rest", "grpc"], default="rest")
        search = parser.add_argument_group("search")
        search.add_argument("--patience", type=int, default=4, help="stop after this many configs without improvement")
        search.add_argument("--seed", type=int, default=0)
        search.add_argument("--sampler", choices=["tpe", "random"], default="tpe", help="Optuna sampler (tpe: TPE, the default)")
        if name == "tune":
            search.add_argument("--trials", type=int, default=12, help="most configs to measure")
            search.add_argument("--no-known-good", action="store_true", help="do not start from the known-good settings")
            search.add_argument(
                "--hpa-metric",
                choices=["cpu", "rps"],
                default="cpu",
                help="what the tuned HPA scales on: CPU utilization, or requests/s per pod (prometheus-adapter)",
            )
            parser.add_argument("--out-dir", type=Path, default=BUILD_DIR / "tune", help="best/ settings and overlay/ go here")
        else:
            search.add_argument(
                "--budget-fraction", type=float, default=0.25, help="tuner trials allowed, as a share of the grid"
            )
            search.add_argument("--target", type=float, default=0.95, help="share of the grid's best the tuner must reach")
            parser.add_argument("--out-dir", type=Path, default=BUILD_DIR / "tune-check")
            parser.add_argument(
                "--no-docs",
                dest="update_docs",
                action="store_false",
                help="do not rewrite the tuning figures in docs/benchmarks.md",
            )
        parser.set_defaults(func=func)


def _providers_here(args: argparse.Namespace) -> tuple[list[Provider], list[bool], list[str]]:
    """(providers, CUDA graph choices, report lines): GPU providers this machine lacks refused, or skipped under auto."""
    from loadtest.tuning.machine import MachineError, available_providers, gpu_name, resolve_providers

    if args.providers == ["cpu"]:
        return ["cpu"], args.cuda_graphs, []
    try:
        providers, notes = resolve_providers(args.providers, available_providers(), gpu_name())
    except MachineError as err:
        raise UserError(str(err)) from err
    graphs = args.cuda_graphs
    if "cuda" not in providers and True in graphs:
        graphs = [False]
        notes.append("cuda graphs skipped: the cuda provider is not tuned here")
    return providers, graphs, notes


def _space_and_slo(args: argparse.Namespace):

    from loadtest.config import ConfigError
    from loadtest.tuning.space import GPU_VARIANTS, TUNABLE_VARIANTS, SearchSpace, discover_variants
    from slipway.slo import load_slo

    providers, graphs, notes = _providers_here(args)
    names = TUNABLE_VARIANTS if providers == ["cpu"] else GPU_VARIANTS
    variants = dict(args.variant) if args.variant else discover_variants(args.model_dir, names=names)
    intra = args.intra or ([1, 2] if len(variants) > 1 else [1, 2, 4])
    try:
        space = SearchSpace(
            variants=variants,
            parallel_workers=args.workers,
            max_batch_size=args.batch_sizes,
            max_batch_time_ms=args.batch_times_ms,
            intra_op_threads=intra,
            inter_op_threads=args.inter,
            inference_threads=args.run_slots,
            max_batch_rows=args.merge_rows,
            providers=providers,
            batch_buckets=args.batch_buckets,
            cuda_graphs=graphs,
            frontends=args.frontends,
        )
        slo = load_slo(args.slo, p95_ms=args.p95_ms, p99_ms=args.p99_ms, max_error_rate=args.max_error_rate)
    except ValidationError as err:
        raise UserError(f"invalid search space: {one_line(err)}") from err
    except ConfigError as err:
        raise UserError(str(err)) from err
    if slo.p95_ms is None and slo.p99_ms is None:
        slo = slo.model_copy(update={"p95_ms": 50.0})
    if slo.min_rps is not None:
        raise UserError("min_rps has no place in tuning: the tuner maximizes throughput; give latency and error limits")
    for note in notes:
        console.print(f"[yellow]note:[/] {note}", soft_wrap=True)
    return space, slo, notes


def _measurer(args, space, slo):

    from loadtest.tuning.measure import LiveMeasurer

    try:
        return LiveMeasurer(
            space,
            slo,
            step_s=args.step_seconds,
            max_users=args.max_users,
            protocol=args.protocol,
            workdir=args.out_dir / "trials",
            show_progress=False,
        )
    except ValidationError as err:
        text = one_line(err, whole="--step-seconds")  # the shape's own checks are about step length
        for field, flag in (("step_s", "--step-seconds"), ("max_users", "--max-users")):
            text = text.replace(f"{field}:", f"{flag}:")
        raise UserError(f"invalid measurement settings: {text}") from err
    except ValueError as err:
        raise UserError(f"invalid measurement settings: {err}") from err


def _say(measurement, prefix: str = "") -> None:
    unit = "rows/s/GPU" if measurement.config.on_gpu else "req/s/core"
    text = (
        f"{measurement.capacity_rps:7.1f} req/s, p95 {measurement.p95_ms:g} ms, {measurement.cpu_cores or 0:.2f} cores "
        f"-> {measurement.objective:7.1f} {unit}"
        if measurement.feasible
        else f"infeasible: {measurement.reason}"
    )
    console.print(f"{prefix}{measurement.config.key:32s} {text}")


def cmd_tune(args: argparse.Namespace) -> int:
    from loadtest.tuning.outputs import write_tune_outputs
    from loadtest.tuning.search import search

    space, slo, notes = _space_and_slo(args)
    if args.trials < 1 or args.patience < 1:
        raise UserError("--trials and --patience must be at least 1")
    measurer = _measurer(args, space, slo)
    console.print(
        f"tuning {', '.join(f'{k}={v}' for k, v in space.variants.items())}: {len(space.grid())} configs, "
        f"at most {args.trials} measured, SLO {slo.model_dump(exclude_none=True)}"
    )
    with console.status("measuring") as status:
        counter = {"n": 0}

        def progress(measurement):
            counter["n"] += 1
            _say(measurement, f"[{counter['n']:2d}] ")
            status.update(f"measuring (trial {counter['n'] + 1} of at most {args.trials})")

        result = search(
            space,
            measurer,
            budget=args.trials,
            patience=args.patience,
            seed=args.seed,
            start_from_known=not args.no_known_good,
            sampler=args.sampler,
            on_measurement=progress,
        )
    path = write_tune_outputs(
        result, space, slo, out_dir=args.out_dir, settings=_settings(args), hpa_metric=args.hpa_metric, notes=notes
    )
    console.print(f"stopped: {result.stopped}")
    if result.best is None:
        console.print(f"[bold red]no config held the SLO[/]; report: {path}")
        return EXIT_CHECK_FAILED
    best = result.best
    per = "rows/s per GPU" if best.config.on_gpu else "req/s per core"
    console.print(
        f"[green]best[/] {best.config.key}: {best.capacity_rps:.0f} req/s at p95 {best.p95_ms:g} ms on "
        f"{best.cpu_cores or 0:.2f} cores ({best.objective:.0f} {per})"
    )
    console.print(
        f"report: {path}; settings: {args.out_dir / 'best' / 'model-settings.json'}; overlay: {args.out_dir / 'overlay'}"
    )
    return 0


def cmd_tune_check(args: argparse.Namespace) -> int:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from loadtest.tuning.check import CheckError, check_grid_size, check_markdown, plot_check, run_check
    from slipway.readme import BENCHMARKS_PAGE, replace_section

    space, slo, notes = _space_and_slo(args)
    try:
        size = check_grid_size(space)
    except CheckError as err:
        raise UserError(str(err)) from err
    if not 0 < args.budget_fraction <= 1 or not 0 < args.target <= 1:
        raise UserError("--budget-fraction and --target must be in (0, 1]")
    measurer = _measurer(args, space, slo)
    load_before, started = os.getloadavg()[0], time.monotonic()
    with Progress(TextColumn("grid"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=console) as progress:
        task = progress.add_task("grid", total=size)

        def advance(measurement):
            progress.console.print(
                measurement.config.key, f"{measurement.objective:.1f}" if measurement.feasible else "infeasible"
            )
            progress.advance(task)

        result = run_check(
            space,
            measurer,
            budget_fraction=args.budget_fraction,
            target=args.target,
            patience=args.patience,
            seed=args.seed,
            sampler=args.sampler,
            on_grid_measurement=advance,
        )
    plot = REPORTS_DIR / "tune-check.png"
    plot_check(result, plot)
    path = write_report(
        "tune-check",
        {
            **result.as_dict(),
            "slo": slo.model_dump(exclude_none=True),
            "settings": _settings(args),
            "plot": str(plot),
            **({"notes": notes} if notes else {}),
        },
    )
    table = check_markdown(
        result,
        cpu_count=os.cpu_count(),
        load_before=load_before,
        minutes=(time.monotonic() - started) / 60,
        day=time.strftime("%Y-%m-%d"),
    )
    atomic.write_text(REPORTS_DIR / "tune-check.md", table)
    if args.update_docs and replace_section(BENCHMARKS_PAGE, "tune-check", table):
        console.print(f"tuning figures in {BENCHMARKS_PAGE} updated")
    summary = (
        f"grid best {result.as_dict()['grid_best']} ({result.as_dict()['grid_best_config']}, {len(result.grid)} trials); "
        f"tuner {result.as_dict()['tuner_best']} ({result.as_dict()['tuner_best_config']}) in {len(result.tuner)} trials "
        f"(budget {result.budget}): {result.ratio:.1%} of the best"
    )
    console.print(("[green]check passed[/]: " if result.passed else "[bold red]check failed[/]: ") + summary)
    console.print(f"report: {path}")
    return 0 if result.passed else EXIT_CHECK_FAILED


def _settings(args: argparse.Namespace) -> dict:
    keep = ("step_seconds", "max_users", "protocol", "patience", "seed", "sampler", "trials", "budget_fraction", "target")
    return {key: getattr(args, key) for key in keep if hasattr(args, key)}
