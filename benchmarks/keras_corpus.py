"""`python -m benchmarks keras-corpus`: every corpus model through the export path, timed, sized and measured.

Each model of the Keras corpus (benchmarks/corpus_models.py: the small shapes users bring, and the
keras.applications architectures at 32x32) is built with random weights, saved as .keras with its rows as .npz,
and put through the two commands a user runs, in a process of its own per model: `export convert` (timed; its
report gives the parity on the rows and the ONNX size) and `export variants --variants fp32,int8,fp16,pruned`
(pruned where the model has training rows: which variants it makes, which are within the accuracy budget, and
the one it chooses). Then the variants' ONNX files are timed with ONNX
Runtime on the CPU, in the session the server builds, at batch 1 and batch 32: every variant and batch for
`--seconds` per round, the variants in turn within a round, `--rounds` rounds. A variant's figure is the median of
its rounds, and its speed over fp32 is the median of the per-round ratios (a burst of load from another process
falls on one round of all variants alike). Writes reports/keras-corpus.json, a PNG beside it, and the table
between the `keras-corpus` markers in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from export.tolerance import FP32_TOLERANCE
from slipway.cli import UserError

VARIANTS = ("fp32", "int8", "fp16", "pruned")  # pruned: where the model has training rows (write_training_rows)
BATCHES = (1, 32)


def corpus_names() -> list[str]:
    """Every corpus model, then every keras.applications architecture (named `app-<name>`)."""
    from benchmarks.corpus_models import APPLICATIONS, CORPUS

    return [*CORPUS, *(f"app-{name}" for name in APPLICATIONS)]


@contextmanager
def reports_in(folder: Path) -> Iterator[None]:
    """The export commands' reports go to `folder` while they run here, not over reports/convert.json and export.json
    (the commands write where slipway.reports says; a user's run writes to reports/)."""
    from unittest import mock

    import slipway.reports

    folder.mkdir(parents=True, exist_ok=True)
    with mock.patch.object(slipway.reports, "REPORTS_DIR", folder):
        yield


@dataclass(frozen=True)
class BuiltModel:
    """A corpus model saved as a user would hand it over: the .keras file, its rows, the extra command options
    (--custom-objects for the model with a layer of the user's own), and its training rows for the pruned variant
    (None, with the reason, where it has none)."""

    keras_path: Path
    rows_path: Path
    options: list[str]
    train_path: Path | None
    no_training: str | None


def build_model(name: str, folder: Path) -> BuiltModel:
    """Build `name` and save it as folder/<name>.keras, with its rows and training rows as .npz."""
    from benchmarks import corpus_models

    folder.mkdir(parents=True, exist_ok=True)
    keras_path, rows_path, options = folder / f"{name}.keras", folder / f"{name}.npz", []
    builders: dict[str, Any] = corpus_models.CORPUS  # their signatures differ: the custom-layer one takes the layers
    layers = None
    try:
        if name.startswith("app-"):
            model, rows = corpus_models.application(name.removeprefix("app-"))
        elif name in corpus_models.CUSTOM_SOURCES:
            source = folder / f"{name.replace('-', '_')}_layers.py"
            source.write_text(corpus_models.CUSTOM_SOURCES[name])
            layers = corpus_models.import_source(source, source.stem)
            options = ["--custom-objects", f"{source}:CUSTOM_OBJECTS"]
            model, rows = builders[name](layers)
        else:
            model, rows = builders[name]()
        model.save(keras_path)
        np.savez(rows_path, **rows)
        train_path, no_training = write_training_rows(name, model, layers, folder / f"{name}-train.npz")
    finally:
        if layers is not None:  # registered while Keras saves the model; the user's module stays theirs
            sys.modules.pop(layers.__name__, None)
    return BuiltModel(keras_path, rows_path, options, train_path, no_training)


def write_training_rows(name: str, model, layers, path: Path) -> tuple[Path | None, str | None]:
    """More rows of the model's kind, labelled with the model's own answers (the corpus has no labels: a pruned
    variant fine-tunes to answer as the model it was cut from), saved as the .npz `--train` reads. A model with an
    output that is not floating-point has no gradient to fine-tune through: (None, why)."""
    from benchmarks.corpus_models import training_inputs
    from export.keras_io import read_interface

    interface = read_interface(model)
    inputs = training_inputs(name, model, layers)
    answers = interface.call(model, [inputs[spec.name] for spec in interface.inputs])
    targets = {output: np.asarray(answer) for output, answer in answers.items()}
    integral = [output for output, target in targets.items() if not np.issubdtype(target.dtype, np.floating)]
    if integral:
        return None, f"output {', '.join(integral)} is not floating-point: no gradient to fine-tune a pruned variant on"
    arrays: dict[str, Any] = {**inputs, **targets}
    np.savez(path, **arrays)
    return path, None


def run_export(argv: list[str], reports: Path, report: str) -> tuple[float, dict[str, Any] | None, str | None]:
    """`python -m export ARGV` in this process: (seconds, its report or None, the one-line refusal or None)."""
    from export.cli import main

    started = time.perf_counter()
    with reports_in(reports):
        try:
            code, error = main(argv), None
        except UserError as err:  # refused in one line, as a user sees it
            code, error = 2, str(err).splitlines()[0]
        except Exception as err:  # a traceback a user would see: kept in the report, the other models still run
            code, error = 1, f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
    seconds = time.perf_counter() - started
    if error:
        from slipway.cli import console

        console.print(f"export {argv[0]} {argv[1]}: {error}", style="red", soft_wrap=True, markup=False)
    path = reports / f"{report}.json"
    if code != 0 or not path.exists():
        return seconds, None, error or f"exit status {code}"
    return seconds, json.loads(path.read_text()), None


def batch_feeds(rows: dict[str, np.ndarray], batch: int) -> dict[str, np.ndarray]:
    """`batch` rows for the model's inputs, the corpus rows repeated as needed."""
    return {name: np.resize(array, (batch, *array.shape[1:])) for name, array in rows.items()}


def rows_per_s(run: Callable[[dict[str, np.ndarray]], object], feeds: dict[str, np.ndarray], seconds: float) -> float:
    """Rows per second of `run` on `feeds`, calling it for about `seconds` (at least twice)."""
    batch = len(next(iter(feeds.values())))
    calls, started = 0, time.perf_counter()
    while True:
        run(feeds)
        calls += 1
        elapsed = time.perf_counter() - started
        if elapsed >= seconds and calls >= 2:
            return calls * batch / elapsed


def measure_variants(
    paths: dict[str, Path], rows: dict[str, np.ndarray], *, rounds: int, seconds: float, on_round: Callable[[], None]
) -> dict[str, dict[str, Any]]:
    """rows/s of each variant at each batch: per round (the variants in turn), their median, and the median of the
    per-round ratios over fp32."""
    from export.measure import onnx_runner

    runners = {name: onnx_runner(path.read_bytes()) for name, path in paths.items()}
    feeds = {batch: batch_feeds(rows, batch) for batch in BATCHES}
    for run in runners.values():  # warm up: the first calls build ONNX Runtime's kernels and arenas
        for feed in feeds.values():
            run(feed)
    samples: dict[tuple[str, int], list[float]] = {(name, batch): [] for name in runners for batch in BATCHES}
    for _ in range(rounds):
        for name, run in runners.items():
            for batch, feed in feeds.items():
                samples[name, batch].append(rows_per_s(run, feed, seconds))
        on_round()
    measured = {}
    for name in runners:
        figures: dict[str, Any] = {}
        for batch in BATCHES:
            rounds_seen = samples[name, batch]
            figures[f"batch_{batch}"] = {
                "rows_per_s": statistics.median(rounds_seen),
                "rows_per_s_rounds": [round(value, 1) for value in rounds_seen],
            }
            if "fp32" in runners and name != "fp32":
                ratios = [value / base for value, base in zip(rounds_seen, samples["fp32", batch])]
                figures[f"batch_{batch}"]["vs_fp32"] = statistics.median(ratios)
                figures[f"batch_{batch}"]["vs_fp32_rounds"] = [round(ratio, 3) for ratio in ratios]
        measured[name] = figures
    return measured


def bench_model(name: str, work: Path, args: argparse.Namespace, on_step: Callable[..., None]) -> dict[str, Any]:
    """One model through convert, variants and the timing rounds: its entry of the report."""
    folder = work / name
    built = build_model(name, folder)
    rows = dict(np.load(built.rows_path))
    on_step()
    common = [str(built.keras_path), "--data", str(built.rows_path), "--name", name, *built.options]
    seconds, convert, error = run_export(["convert", *common, "--out", str(folder / "artifact")], folder / "reports", "convert")
    on_step()
    entry: dict[str, Any] = {
        "model": name,
        "rows": len(next(iter(rows.values()))),
        "inputs": {key: {"dtype": str(array.dtype), "shape": ["N", *array.shape[1:]]} for key, array in rows.items()},
    }
    if convert is None:
        entry["convert_error"] = error
        on_step(args.rounds + 1)
        return entry
    entry["convert_seconds"] = seconds
    entry["parity"] = convert["parity"]
    entry["onnx_bytes"] = convert["onnx_bytes"]
    variants_argv = [
        "variants",
        *common,
        "--variants",
        ",".join(variant for variant in VARIANTS if variant != "pruned" or built.train_path),
        "--out",
        str(folder / "variants"),
        "--report",
        "variants",
        "--measure-rounds",
        str(args.export_rounds),
        "--measure-seconds",
        str(args.export_seconds),
    ]
    if built.train_path:  # fine-tuned towards the model's own answers: a squared error on every output
        variants_argv += ["--train", str(built.train_path), "--loss", "mse", "--fine-tune-epochs", str(args.fine_tune_epochs)]
    else:
        entry["pruned_skipped"] = built.no_training
    entry["variants_seconds"], report, error = run_export(variants_argv, folder / "reports", "variants")
    on_step()
    if report is None:
        entry["variants_error"] = error
        on_step(args.rounds)
        return entry
    entry["chosen"] = report["chosen"]["name"]
    entry["chosen_reason"] = report["chosen"]["reason"]
    entry["budget"] = report["budget"]
    made = {row["name"]: row for row in report["variants"] if row.get("path")}
    entry["variants"] = {
        variant: {
            "status": row["status"],
            "reason": row["reason"],
            "file_bytes": row["file_bytes"],
            "top1_agreement": row["top1_agreement"],
            "max_abs_diff": row["max_abs_diff"],
        }
        for variant, row in made.items()
    }
    paths = {variant: Path(row["path"]) / "model.onnx" for variant, row in made.items()}
    measured = measure_variants(paths, rows, rounds=args.rounds, seconds=args.seconds, on_round=lambda: on_step())
    for variant, figures in measured.items():
        entry["variants"][variant].update(figures)
    return entry


@dataclass(frozen=True)
class _Steps:
    """bench_model's `on_step` in a process of its own: each advance sent to the parent's progress bar."""

    queue: Any

    def __call__(self, steps: int = 1) -> None:
        self.queue.put(steps)


def bench_model_apart(name: str, work: Path, args: argparse.Namespace, on_step: Callable[..., None]) -> dict[str, Any]:
    """`bench_model` in a fresh process: TensorFlow keeps what each conversion and fine-tune allocated until its
    process ends (one process through the whole corpus grew past 20 GB), so each model's memory is returned with it."""
    import multiprocessing
    import queue
    from concurrent.futures import ProcessPoolExecutor

    context = multiprocessing.get_context("spawn")
    with context.Manager() as manager, ProcessPoolExecutor(max_workers=1, mp_context=context) as pool:
        steps = manager.Queue()
        future = pool.submit(bench_model, name, work, args, _Steps(steps))
        while not future.done():
            try:
                on_step(steps.get(timeout=0.5))
            except queue.Empty:
                continue
        while not steps.empty():  # what it advanced after the last read
            on_step(steps.get())
        return future.result()


def run(args: argparse.Namespace, on_step: Callable[..., None] = lambda steps=1: None) -> dict[str, Any]:
    """The whole benchmark over `args.models`: the report's payload."""
    from benchmarks.models import BENCH_DIR

    work = BENCH_DIR / "keras-corpus"
    shutil.rmtree(work, ignore_errors=True)
    load_before = os.getloadavg()[0]
    started = time.perf_counter()
    models = [bench_model_apart(name, work, args, on_step) for name in args.models]
    return {
        "variants": list(VARIANTS),
        "batches": list(BATCHES),
        "rounds": args.rounds,
        "seconds_per_round": args.seconds,
        "export_measure": {"rounds": args.export_rounds, "seconds": args.export_seconds},
        "fine_tune_epochs": args.fine_tune_epochs,
        "fp32_tolerance": FP32_TOLERANCE,  # export convert's and export variants' one default (export.tolerance)
        "load_average": {"before": load_before, "after": os.getloadavg()[0]},
        "cores": os.cpu_count(),
        "wall_seconds": time.perf_counter() - started,
        "models": models,
    }


def steps(args: argparse.Namespace) -> int:
    """How many times `run` advances its progress: build, convert and variants, then each timing round, per model."""
    return len(args.models) * (3 + args.rounds)


def _kib(value: float | None) -> str:
    return "n/a" if value is None else f"{value / 1024:,.1f}"


def _rate(variant: dict[str, Any] | None, batch: int) -> str:
    if not variant or f"batch_{batch}" not in variant:
        return "n/a"
    figures = variant[f"batch_{batch}"]
    ratio = f" ({figures['vs_fp32']:.2f}x)" if "vs_fp32" in figures else ""
    return f"{figures['rows_per_s']:,.0f}{ratio}"


def markdown(payload: dict[str, Any]) -> str:
    """The report as the docs' table: a line per model, the figures of each variant side by side."""
    load = payload["load_average"]
    lines = [
        f"Measured by `make bench-keras` on {payload['cores']} CPU cores (load average {load['before']:.1f} before, "
        f"{load['after']:.1f} after the run: above the core count means the cores were shared), "
        f"{payload['created_at'][:10]}. rows/s: ONNX Runtime on the CPU in the server's session, median of "
        f"{payload['rounds']} interleaved rounds of {payload['seconds_per_round']:g} s per variant and batch; "
        "in brackets, the median per-round ratio over fp32. Parity: the largest abs difference between ONNX and "
        "Keras on the model's rows (`export convert`); chosen: what `export variants` picks within its accuracy budget. "
        f"pruned: 75% of the Conv/Dense weights zeroed, fine-tuned {payload['fine_tune_epochs']} epochs (squared error) "
        "towards the model's own answers on four more draws of its kind of rows.",
        "",
        "| model | convert s | parity (max abs diff) | top-1 same | ONNX KiB | int8 KiB | "
        + " | ".join(f"{variant} rows/s b{batch}" for batch in BATCHES for variant in VARIANTS)
        + " | within budget | chosen |",
        "|---|--:|--:|:-:|--:|--:|" + "--:|" * (len(BATCHES) * len(VARIANTS)) + "---|---|",
    ]
    for entry in payload["models"]:
        if "convert_error" in entry:
            lines.append(f"| {entry['model']} | refused: {entry['convert_error']} |" + " |" * (6 + len(BATCHES) * len(VARIANTS)))
            continue
        parity = entry["parity"]
        variants = entry.get("variants", {})
        accepted = ", ".join(name for name in VARIANTS if variants.get(name, {}).get("status") == "accepted") or "none"
        cells = [
            entry["model"],
            f"{entry['convert_seconds']:.1f}",
            f"{parity['max_abs_diff']:.1e}",
            "yes" if parity["identical_predictions"] else "no",
            _kib(entry["onnx_bytes"]),
            _kib(variants.get("int8", {}).get("file_bytes")),
            *(_rate(variants.get(variant), batch) for batch in BATCHES for variant in VARIANTS),
            accepted if "variants_error" not in entry else f"variants refused: {entry['variants_error']}",
            f"**{entry['chosen']}**" if "chosen" in entry else "n/a",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    rejected = [
        f"{entry['model']} {name}: {row['reason']}"
        for entry in payload["models"]
        for name, row in entry.get("variants", {}).items()
        if row["status"] == "rejected"
    ]
    if rejected:
        lines += ["", "Rejected by the accuracy budget:", "", *(f"- {line}" for line in rejected)]
    skipped = [f"{entry['model']}: {entry['pruned_skipped']}" for entry in payload["models"] if entry.get("pruned_skipped")]
    if skipped:
        lines += ["", "No pruned variant:", "", *(f"- {line}" for line in skipped)]
    return "\n".join(lines) + "\n"


def plot(payload: dict[str, Any], path: Path) -> None:
    """rows/s per model and variant, batch 1 and batch 32 side by side (log scale: the models differ by 1000x)."""
    from slipway.plots import pyplot, save_png

    plt = pyplot()
    models = [entry for entry in payload["models"] if entry.get("variants")]
    figure, axes = plt.subplots(1, len(BATCHES), figsize=(12, 0.42 * len(models) + 1.6), sharey=True)
    height = 0.8 / len(VARIANTS)
    positions = np.arange(len(models))
    for axis, batch in zip(axes, BATCHES):
        for index, variant in enumerate(VARIANTS):
            values = [entry["variants"].get(variant, {}).get(f"batch_{batch}", {}).get("rows_per_s", 0.0) for entry in models]
            axis.barh(positions + (index - (len(VARIANTS) - 1) / 2) * height, values, height, label=variant)
        axis.set_xscale("log")
        axis.set_xlabel(f"rows/s at batch {batch} (CPU, ONNX Runtime)")
        axis.grid(axis="x", alpha=0.3)
    axes[0].set_yticks(positions, [f"{entry['model']} ({entry.get('chosen', 'n/a')})" for entry in models])
    axes[0].invert_yaxis()
    axes[0].legend(loc="lower right", fontsize=8)
    figure.suptitle("Keras corpus: rows/s per variant (the variant export chose in brackets)", fontsize=10)
    save_png(figure, path)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--models",
        nargs="+",
        default=None,
        metavar="MODEL",
        help="corpus models to run (default: all; app-* are keras.applications)",
    )
    parser.add_argument("--rounds", type=int, default=3, help="interleaved timing rounds per model (default 3)")
    parser.add_argument("--seconds", type=float, default=0.2, help="seconds per variant, batch and round (default 0.2)")
    parser.add_argument(
        "--export-rounds", type=int, default=3, help="`export variants --measure-rounds`: its own timing for its choice"
    )
    parser.add_argument("--export-seconds", type=float, default=0.1, help="`export variants --measure-seconds` (default 0.1)")
    parser.add_argument(
        "--fine-tune-epochs", type=int, default=4, help="`export variants --fine-tune-epochs` for pruned (default 4)"
    )
    parser.add_argument(
        "--report", default="keras-corpus", help="report name: reports/<name>.json and .png (default keras-corpus)"
    )
    parser.add_argument("--no-docs", dest="update_docs", action="store_false", help="leave docs/benchmarks.md alone")


def check_arguments(args: argparse.Namespace) -> None:
    names = corpus_names()
    args.models = args.models or names
    unknown = sorted(set(args.models) - set(names))
    if unknown:
        raise UserError(f"unknown corpus models {unknown}: choose from {names}")
    if args.rounds < 1 or args.export_rounds < 1 or args.fine_tune_epochs < 1 or args.seconds <= 0 or args.export_seconds <= 0:
        raise UserError(
            "--rounds, --export-rounds and --fine-tune-epochs must be at least 1, --seconds and --export-seconds positive"
        )
