"""The export commands beyond train and convert: variants, import, profile, bench.

Argument parsing lives in `__main__`; here each command turns its arguments into typed
configuration once, runs the pipeline under a progress bar and maps every user mistake
to a `UserError` (one line, non-zero exit). Heavy imports stay inside the functions.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from export.tolerance import FP16_TOLERANCE, FP32_TOLERANCE
from slipway import atomic
from slipway.cli import UserError, console, one_line
from slipway.paths import BUILD_DIR

VARIANTS_DIR = BUILD_DIR / "variants"
PROFILES_DIR = BUILD_DIR / "profiles"
KERAS_MODELS = ("digits", "mobilenetv2")
ALL_VARIANTS = "fp32,int8,fp16,pruned,pruned-int8,slim,slim-int8"
FLOAT_VARIANTS = "fp32,int8,fp16"


def _variant_list(text: str) -> list:
    from export.pipeline import Variant

    names = [name.strip() for name in text.split(",") if name.strip()]
    known = [v.value for v in Variant]
    unknown = [name for name in names if name not in known]
    if unknown or not names:
        raise UserError(f"unknown variant(s) {unknown or [text]}: choose from {', '.join(known)} (comma-separated)")
    return [Variant(name) for name in dict.fromkeys(names)]


def export_config(args: argparse.Namespace, default_variants: str):
    """The typed export configuration from the command line, with pydantic's complaint as one line."""
    from pydantic import ValidationError

    from export.pipeline import ExportConfig
    from export.selection import Budget

    try:
        return ExportConfig(
            variants=_variant_list(args.variants or default_variants),
            target=args.target,
            calibration_method=args.calibration_method,
            calibration_rows=args.calibration_rows,
            sparsity=args.sparsity,
            slim_fraction=args.slim_fraction,
            fine_tune_epochs=args.fine_tune_epochs,
            fine_tune_learning_rate=args.fine_tune_learning_rate,
            budget=Budget.model_validate(
                {
                    "accuracy_points": args.accuracy_budget,
                    "fp32_tolerance": args.fp32_tolerance,
                    "fp16_tolerance": args.fp16_tolerance,
                    "outputs": output_limits(getattr(args, "output_budget", None), getattr(args, "output_tolerance", None)),
                }
            ),
            optimize_for=args.optimize_for,
            measure_rounds=args.measure_rounds,
            measure_seconds=args.measure_seconds,
            opset=args.opset,
            gpu_report=getattr(args, "gpu_report", None),
        )
    except ValidationError as err:
        raise UserError(f"invalid export options: {one_line(err, whole='options')}") from err


def output_limits(budgets: list[str] | None, tolerances: list[str] | None) -> dict[str, dict[str, float]]:
    """`--output-budget NAME=POINTS` and `--output-tolerance NAME=DIFF` (each repeatable) as limits per output."""
    limits: dict[str, dict[str, float]] = {}
    for flag, key, texts, example in (
        ("--output-budget", "points", budgets, "label=1"),
        ("--output-tolerance", "tolerance", tolerances, "value=0.01"),
    ):
        for text in texts or []:
            name, _, value = text.partition("=")
            try:
                number = float(value)
            except ValueError:
                number = float("nan")
            if not name.strip() or not number >= 0:
                raise UserError(f"{flag} {text!r} is not NAME=NUMBER (a number >= 0): write e.g. {flag} {example}")
            if key in limits.setdefault(name.strip(), {}):
                raise UserError(f"{flag} names output {name.strip()!r} twice: give each output one {flag}")
            limits[name.strip()][key] = number
    return limits


def run_and_report(source, config, out: Path, report_name: str, warnings: list[str]):
    """Run the export pipeline under a progress bar, write the report, print the table; returns the report."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    from export.optimize import OptimizeError
    from export.pipeline import ExportPlanError, run_export, step_count
    from export.prune import PruneError
    from export.quantize import QuantizeError
    from export.report import build_report, console_table, write_export_report
    from export.selection import NoGpuMeasurement, NoVariantWithinBudget

    for warning in warnings:
        console.print(f"[bold yellow]warning:[/] {warning}", soft_wrap=True)
    try:
        total = step_count(source, config)
        with Progress(
            SpinnerColumn(),
            TextColumn("[bold]export[/] {task.description:<24}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
            transient=True,
        ) as progress:
            task = progress.add_task("starting", total=total)
            result = run_export(source, config, out, step=lambda text: progress.update(task, advance=1, description=text))
    except (ExportPlanError, NoVariantWithinBudget, NoGpuMeasurement, PruneError, QuantizeError, OptimizeError) as err:
        raise UserError(str(err)) from err
    report = build_report(source, config, result, warnings)
    path = write_export_report(report, report_name)
    console.print(console_table(report))
    console.print(f"chosen [bold]{report.chosen.name}[/]: {report.chosen.reason}", soft_wrap=True)
    console.print(f"artifacts in {out}; report {path} (+ .md, .png)", soft_wrap=True)
    return report


def keras_source(model: str, keras_model: Path, config):
    """The digits CNN or MobileNetV2 as an export source, converted to ONNX."""
    from export.sources import digits_source, mobilenet_source

    with console.status(f"loading {model} and converting it to ONNX"):
        try:
            if model == "digits":
                return digits_source(keras_model, opset=config.opset, calibration_rows=config.calibration_rows)
            return mobilenet_source(opset=config.opset)
        except (FileNotFoundError, ValueError) as err:
            raise UserError(str(err)) from err


def synthetic_warning(source) -> list[str]:
    if not source.calibration_synthetic:
        return []
    return [f"int8 is calibrated on synthetic data ({source.calibration_note}): its accuracy on real data is unknown"]


def cmd_variants(args: argparse.Namespace) -> int:
    from export.pipeline import check_out_dir

    if args.model in KERAS_MODELS and not Path(args.model).exists():
        if args.data or args.train or args.calibration or args.signature or args.split:
            raise UserError(
                f"--data, --train, --calibration, --signature and --split are for your own model: pass its path instead "
                f"of {args.model!r}"
            )
        config = export_config(args, ALL_VARIANTS if args.model == "digits" else FLOAT_VARIANTS)
        out = args.out or VARIANTS_DIR / args.model
        check_out_dir(out)  # before the model is loaded and converted
        source = keras_source(args.model, args.keras_model, config)
        warnings = synthetic_warning(source)
    else:
        source, warnings, out, config = user_model_source(args)
    report = run_and_report(source, config, out, args.report, warnings)
    console.print(
        f"publish it with: python -m export versions publish {report.chosen.path} --model {source.name}", soft_wrap=True
    )
    return 0


def user_model_source(args: argparse.Namespace):
    """The user's .keras / .h5 / SavedModel with their rows, as an export source: (source, warnings, out, config).

    Everything that can be wrong with the files is found before the conversion and the fine-tunes.
    """
    from export.convert import UnsupportedOpsError
    from export.keras_load import ModelLoadError, default_name, load_model, read_custom_objects
    from export.onnx_import import ImportCheckError, check_name
    from export.pipeline import check_out_dir
    from export.prune import can_slim
    from export.sources import keras_file_source
    from export.split_variants import SplitError, split_source
    from export.user_source import training_rows, user_rows

    path = Path(args.model)
    if not path.exists():
        raise UserError(
            f"no model {args.model!r}: choose {' or '.join(KERAS_MODELS)}, or pass the path of your model "
            "(a .keras file, an .h5 file or a SavedModel folder) with --data"
        )
    if args.data is None:
        raise UserError(
            f"pass --data HELD-OUT.npz for {path}: held-out rows, one array per model input named like it, "
            "optionally 'labels' (the variants are judged on them)"
        )
    if args.loss and not args.train:
        raise UserError("--loss is the loss pruned and slim variants fine-tune under: pass --train TRAIN.npz with it")
    try:
        name = check_name(args.name or default_name(path))
        out = args.out or VARIANTS_DIR / name
        check_out_dir(out)
        custom = read_custom_objects(args.custom_objects) if args.custom_objects else None
        with console.status(f"loading {path} and checking its data"):
            model = load_model(path, custom_objects=custom, signature=args.signature)
            rows = user_rows(args.data, model, what="held-out")
            calibration = user_rows(args.calibration, model, what="calibration") if args.calibration else None
            training = training_rows(args.train, model, loss=args.loss) if args.train else None
        defaults = FLOAT_VARIANTS
        if training is not None:
            defaults += ",pruned,pruned-int8" + (",slim,slim-int8" if can_slim(model.keras_model) else "")
        config = export_config(args, defaults)
        with console.status(f"converting {path} to ONNX"):
            source, warnings = keras_file_source(
                model,
                name,
                rows,
                calibration=calibration,
                training=training,
                opset=config.opset,
                calibration_rows=config.calibration_rows,
            )
        if args.split:
            with console.status(f"cutting {path}'s preprocessing and softmax/argmax into graphs of their own (--split)"):
                source.split = split_source(model, rows.feeds, source.calibration, config.opset, config.budget.fp32_tolerance)
    except (ModelLoadError, ImportCheckError, UnsupportedOpsError, SplitError) as err:
        raise UserError(str(err)) from err
    if args.variants is None and training is not None and not can_slim(model.keras_model):
        warnings.append(
            f"{path} has no filters that can be removed (each reaches an input, an output or a layer "
            "filter pruning does not know): slim is left out; pruned (magnitude) is made"
        )
    return source, warnings, out, config


def cmd_bench(args: argparse.Namespace) -> int:
    """Both models, every variant, one run: the figures of the benchmarks page (docs/benchmarks.md)."""
    from export.bench import write_bench
    from export.pipeline import check_out_dir

    for model in KERAS_MODELS:  # both, before minutes of work on the first
        check_out_dir(VARIANTS_DIR / model)
    before = os.getloadavg()[0]
    reports = {}
    for model, variants, seconds in (
        ("digits", ALL_VARIANTS, args.measure_seconds),
        ("mobilenetv2", FLOAT_VARIANTS, args.measure_seconds * 2),
    ):
        run_args = argparse.Namespace(**{**vars(args), "variants": variants, "measure_seconds": seconds})
        config = export_config(run_args, variants)
        source = keras_source(model, args.keras_model, config)
        reports[model] = run_and_report(source, config, VARIANTS_DIR / model, f"bench-export-{model}", synthetic_warning(source))
    load = {"before": before, "after": os.getloadavg()[0]}
    path, found = write_bench(reports["digits"], reports["mobilenetv2"], load, None if args.no_docs else args.page)
    from rich.table import Table

    table = Table(title="figures to reach")
    for column in ("figure", "measured", "target", "met"):
        table.add_column(column)
    for target in found:
        table.add_row(
            target.figure,
            "n/a" if target.value is None else f"{target.value:.2f}",
            target.target,
            "[green]yes[/]" if target.met else "[red]no[/]",
        )
    console.print(table)
    console.print(
        f"report {path} (+ .md); load average {load['before']:.1f} -> {load['after']:.1f} on {os.cpu_count()} cores"
        + ("" if args.no_docs else f"; section updated in {args.page}"),
        soft_wrap=True,
    )
    return 0


def cmd_bench_slim(args: argparse.Namespace) -> int:
    """MobileNetV2 (or a .keras image model) and its half-width copy, timed side by side: reports/bench-slim.* + docs."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    from export.slim_bench import SlimBenchError, check_page, compare, step_count, write
    from export.sources import MOBILENET_SHAPE, mobilenet_keras, synthetic_images

    if not 0 < args.fraction < 1:
        raise UserError(f"--fraction must be between 0 and 1 (exclusive), got {args.fraction}: 0.5 removes half the channels")
    if args.batch_size < 1 or args.rounds < 2 or args.calls < 1:
        raise UserError(
            f"--batch-size and --calls must be at least 1 and --rounds at least 2 (a spread needs two), got "
            f"{args.batch_size}, {args.calls} and {args.rounds}"
        )
    if not args.no_docs:
        try:
            check_page(args.page)
        except SlimBenchError as err:
            raise UserError(str(err)) from err
    before = os.getloadavg()[0]
    with console.status(f"building {args.model}"):
        if args.model == "mobilenetv2":
            model, shape = mobilenet_keras(args.seed), MOBILENET_SHAPE
        else:
            from export.keras_load import ModelLoadError, load_model

            try:
                loaded = load_model(Path(args.model))
            except ModelLoadError as err:
                raise UserError(str(err)) from err
            dims = [int(d) for d in loaded.inputs[0].shape[1:] if d is not None]  # a None: not a fixed image size
            if loaded.keras_model is None or len(loaded.inputs) != 1 or len(dims) != 3 or len(loaded.inputs[0].shape) != 4:
                raise UserError(
                    f"{args.model} is not a one-input Keras image model (.keras or .h5, input [N, H, W, C]): "
                    "bench-slim times image models; pass mobilenetv2 or such a file"
                )
            model, shape = loaded.keras_model, (dims[0], dims[1], dims[2])
    images = synthetic_images(args.batch_size, shape, args.seed + 1)
    try:
        with Progress(
            SpinnerColumn(),
            TextColumn("[bold]bench-slim[/] {task.description:<20}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
            transient=True,
        ) as progress:
            task = progress.add_task("starting", total=step_count(args.rounds))
            result = compare(
                model,
                images,
                fraction=args.fraction,
                rounds=args.rounds,
                calls=args.calls,
                opset=args.opset,
                step=lambda text: progress.update(task, advance=1, description=text),
            )
        load = {"before": before, "after": os.getloadavg()[0], "cores": os.cpu_count()}
        path = write(result, load, None if args.no_docs else args.page)
    except SlimBenchError as err:
        raise UserError(str(err)) from err
    spread = result.spread()
    console.print(
        f"{result.model}: {result.fraction:.0%} of the channels removed -> {result.ratio:.2f}x the images/s at batch {result.batch} "
        f"(rounds {spread['min']:.2f}-{spread['max']:.2f}x, target >= 1.6x), graphs valid "
        f"{result.full.graph_valid and result.slim.graph_valid}, same output shapes {result.same_output_shapes}: "
        + ("[green]goal met[/]" if result.met else "[red]goal not met[/]")
        + f"; report {path} (+ .png, .md)"
        + ("" if args.no_docs else f"; section updated in {args.page}"),
        soft_wrap=True,
    )
    return 0


def cmd_profile(args: argparse.Namespace) -> int:
    """ORT's profiler on one variant: operators by time, and the trace kept for Perfetto."""
    from rich.table import Table

    from export.profile import profile_artifact
    from slipway.artifact import ArtifactError
    from slipway.reports import write_report

    folder = Path(args.variant)
    if not folder.is_dir():
        family = args.variants_dir / args.model
        folder = family / args.variant
        if not folder.is_dir():
            have = (
                sorted(p.name for p in family.iterdir() if p.is_dir() and not p.name.startswith(".")) if family.is_dir() else []
            )
            raise UserError(
                f"no variant {args.variant!r} in {family}"
                + (f" (it has {', '.join(have)})" if have else "")
                + f": run `make export MODEL={args.model}` first, or pass an artifact folder"
            )
    if args.batch_size < 1 or args.runs < 1:
        raise UserError("--batch-size and --runs must be at least 1")
    trace = args.trace or PROFILES_DIR / f"{folder.parent.name}-{folder.name}-b{args.batch_size}.json"
    if trace.is_dir():
        raise UserError(f"--trace {trace} is a folder: name the trace file, e.g. --trace {trace / 'profile.json'}")
    if blocked := atomic.file_in_the_way(trace):
        raise UserError(f"--trace {trace} cannot be written: {blocked} is a file, not a folder; choose another --trace")
    try:
        with console.status(f"profiling {folder} ({args.runs} runs at batch {args.batch_size})"):
            times = profile_artifact(folder, trace, batch_size=args.batch_size, runs=args.runs)
    except ArtifactError as err:
        raise UserError(str(err)) from err
    table = Table(title=f"{folder}: where the time goes (batch {args.batch_size}, {args.runs} runs)")
    for column in ("operator", "calls", "total ms", "mean us", "share"):
        table.add_column(column, justify="left" if column == "operator" else "right")
    for entry in times[: args.top]:
        table.add_row(
            entry.op_type, str(entry.calls), f"{entry.total_us / 1e3:.2f}", f"{entry.mean_us:.1f}", f"{entry.share:.1%}"
        )
    console.print(table)
    path = write_report(
        "profile",
        {
            "artifact": str(folder),
            "batch_size": args.batch_size,
            "runs": args.runs,
            "trace": str(trace),
            "operators": [{"op_type": t.op_type, "calls": t.calls, "total_us": t.total_us, "share": t.share} for t in times],
        },
    )
    console.print(f"trace {trace} (open it in https://ui.perfetto.dev); report {path}", soft_wrap=True)
    return 0


def cmd_import(args: argparse.Namespace) -> int:
    from export.onnx_import import ImportCheckError, check_name, onnx_source
    from export.pipeline import Variant, check_out_dir
    from export.quantize import quantizable_operators

    config = export_config(args, "fp32,int8,fp16")
    try:
        name = check_name(args.name)
        out = args.out or VARIANTS_DIR / name
        check_out_dir(out)  # before the model is read and checked
        with console.status(f"checking {args.model} and its data"):
            source, warnings = onnx_source(
                args.model, name, calibration=args.calibration, labels=args.labels, max_calibration_rows=config.calibration_rows
            )
    except ImportCheckError as err:
        raise UserError(str(err)) from err
    if Variant.int8 in config.variants and not quantizable_operators(source.onnx_model):
        raise UserError(
            f"{args.model} has no operator ONNX Runtime can quantize to int8 (Conv, MatMul, Gemm, ...): "
            "leave int8 out of --variants (e.g. --variants fp32,fp16)"
        )
    report = run_and_report(source, config, out, args.report, warnings)
    console.print(f"publish it with: python -m export versions publish {report.chosen.path} --model {name}", soft_wrap=True)
    return 0


def add_export_options(parser: argparse.ArgumentParser, *, variants_help: str | None) -> None:
    """Options shared by `variants`, `import` and `bench`: what to build, the budget, how to time.

    `variants_help=None` leaves out the choice of variants and of output places (the benchmark fixes them).
    """
    if variants_help is not None:
        parser.add_argument("--variants", help=variants_help)
        parser.add_argument("--out", type=Path, help="folder for the variant artifact folders (default build/variants/<model>)")
        parser.add_argument("--report", default="export", help="report name: reports/<name>.json, .md and .png")
    parser.add_argument(
        "--target",
        choices=["cpu", "tensorrt", "gpu"],
        default="cpu",
        help="cpu: int8 with uint8 activations (U8S8, x86), chosen by CPU timing; tensorrt: symmetric "
        "int8 (S8S8); gpu: S8S8, and the variant to deploy with the gpu overlay chosen by a GPU's "
        "timing (this machine's, else --gpu-report's)",
    )
    parser.add_argument(
        "--gpu-report",
        type=Path,
        metavar="GPU.json",
        help="--target gpu on a machine without a GPU: the `make bench-gpu` report that ranks "
        "fp32/fp16/int8 (default reports/gpu.json)",
    )
    parser.add_argument("--calibration-method", choices=["minmax", "entropy", "percentile"], default="minmax")
    parser.add_argument("--calibration-rows", type=int, default=256, help="rows to calibrate int8 on (at most)")
    parser.add_argument(
        "--accuracy-budget",
        type=float,
        default=0.5,
        help="largest accuracy drop in points (top-1 disagreement when there are no labels)",
    )
    parser.add_argument(
        "--output-budget",
        action="append",
        metavar="NAME=POINTS",
        help="a budget of output NAME's own (repeatable): the largest top-1 disagreement with the source model, in points, "
        "for every variant; on the first output it replaces --accuracy-budget",
    )
    parser.add_argument(
        "--output-tolerance",
        action="append",
        metavar="NAME=DIFF",
        help="the largest abs difference on output NAME (repeatable) against the model a variant was made from, times "
        "max(1, its largest value), for every variant (int8 too): for outputs without classes (scores, values)",
    )
    parser.add_argument(
        "--fp32-tolerance",
        type=float,
        default=FP32_TOLERANCE,
        help=f"max abs diff allowed for fp32 variants, times max(1, the output's largest value) (default {FP32_TOLERANCE:g}, "
        "as export convert's --parity-tolerance)",
    )
    parser.add_argument(
        "--fp16-tolerance",
        type=float,
        default=FP16_TOLERANCE,
        help=f"max abs diff allowed for fp16 variants, times max(1, the output's largest value) (default {FP16_TOLERANCE:g})",
    )
    parser.add_argument(
        "--optimize-for",
        choices=["latency", "throughput"],
        default="latency",
        help="pick the variant with the lowest p50 latency at batch 1, or the highest throughput at batch 32",
    )
    parser.add_argument("--measure-rounds", type=int, default=5, help="interleaved timing rounds")
    parser.add_argument("--measure-seconds", type=float, default=0.3, help="seconds per model, batch and round")


def _floats(text: str, flag: str) -> tuple[float, ...]:
    try:
        values = tuple(float(item) for item in text.split(",") if item.strip())
    except ValueError as err:
        raise UserError(f"{flag} {text!r} is not a list of numbers: write e.g. {flag} 0.485,0.456,0.406") from err
    if not values:
        raise UserError(f"{flag} is empty: write one number, or one per channel separated by commas")
    return values


def cmd_uint8_input(args: argparse.Namespace) -> int:
    """An artifact whose graph takes uint8 NHWC pixels, normalised in the graph (4x fewer bytes per request).

    Scale, mean and std default to the artifact's own `preprocess` settings (else `ImagePreprocessing`'s
    defaults): the numbers the runtime would apply to decoded images are the ones moved into the graph.
    """
    from pydantic import ValidationError

    from export.uint8_input import Normalisation, Uint8InputError, write_uint8_artifact
    from slipway.artifact import SETTINGS_FILE, ArtifactError, is_artifact_folder
    from slipway.files import FileProblem, read_json
    from slipway.runtime_settings import ImagePreprocessing

    source = Path(args.artifact)
    if not is_artifact_folder(source):
        raise UserError(f"{source} is not an artifact folder (no manifest.json): pass a folder `python -m export` wrote")
    out = Path(args.out) if args.out else source.with_name(f"{source.name}-uint8")
    if out.resolve() == source.resolve():
        raise UserError(f"--out {out} is the source artifact: choose another folder")
    atomic.check_replaceable(out, owns=is_artifact_folder)
    try:
        settings = read_json(source / SETTINGS_FILE, f"model settings {source / SETTINGS_FILE}")
        preprocess = ((settings.get("parameters") or {}).get("extra") or {}).get("preprocess") or {}
        if isinstance(preprocess, dict) and "graph" in preprocess:
            raise UserError(
                f"{source} was exported with --split (its preprocessing is a graph of its own): uint8-input "
                "rewrites an artifact converted without --split"
            )
        defaults = ImagePreprocessing.model_validate(preprocess)
        normalisation = Normalisation(
            scale=args.scale if args.scale is not None else defaults.scale,
            mean=_floats(args.mean, "--mean") if args.mean else tuple(defaults.mean),
            std=_floats(args.std, "--std") if args.std else tuple(defaults.std),
        )
        with console.status(f"moving the normalisation of {source} into its graph"):
            manifest = write_uint8_artifact(source, out, normalisation, args.input)
    except ValidationError as err:
        raise UserError(f"invalid preprocess settings in {source / SETTINGS_FILE}: {one_line(err, whole='preprocess')}") from err
    except (Uint8InputError, ArtifactError, FileProblem) as err:
        raise UserError(str(err)) from err
    console.print(
        f"{out}: input takes UINT8 NHWC pixels (scale {normalisation.scale:g}, mean {list(normalisation.mean)}, "
        f"std {list(normalisation.std)}); digest {manifest.digest[:12]}",
        soft_wrap=True,
    )
    return 0
