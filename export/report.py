"""The export report: typed rows, the JSON under `reports/`, a markdown table and a plot.

The pydantic models are the report's schema: the pipeline fills them, tests validate
written reports against them, and other tools can read `variants` and `chosen` safely.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel

from engine.cpu_limits import cpu_limit
from export.measure import SizeStats, SpeedStats
from export.model_source import Source
from export.pipeline import PRECISION, ExportConfig, ExportResult, Judged
from slipway import atomic
from slipway.reports import write_report


class Row(BaseModel):
    """One line of the table: a variant, or the baseline it is compared with."""

    name: str
    status: Literal["baseline", "accepted", "rejected"]
    reason: str
    path: str | None
    digest: str | None = None
    precision: str | None
    file_bytes: int
    gzip_bytes: int
    parameters: int
    nonzero_parameters: int
    accuracy: float | None
    accuracy_drop_points: float | None
    top1_agreement: float | None
    max_abs_diff: float | None
    latency_batch: int
    p50_latency_ms: float
    p95_latency_ms: float
    throughput_batch: int
    throughput: float
    size_vs_fp32: float | None = None
    latency_speedup_vs_fp32: float | None = None
    throughput_speedup_vs_fp32: float | None = None
    details: dict = {}
    outputs: dict[str, dict] = {}  # per named output, where the budget names outputs: disagreement, max abs diff, scale


class Chosen(BaseModel):
    name: str
    path: str
    reason: str


class ExportReport(BaseModel):
    model: str
    source: dict
    source_model: str | None  # the Keras file (the version store reads its training lineage from beside it)
    data_fingerprint: str | None
    evaluation: dict
    calibration: dict
    budget: dict
    optimize_for: str
    measurement: dict
    baseline: Row
    variants: list[Row]
    chosen: Chosen
    out_dir: str
    warnings: list[str] = []


def _speed_fields(speed: SpeedStats) -> dict:
    return {
        "latency_batch": speed.latency_batch,
        "p50_latency_ms": speed.p50_latency_ms,
        "p95_latency_ms": speed.p95_latency_ms,
        "throughput_batch": speed.throughput_batch,
        "throughput": speed.throughput,
    }


def _size_fields(size: SizeStats) -> dict:
    return {
        "file_bytes": size.file_bytes,
        "gzip_bytes": size.gzip_bytes,
        "parameters": size.parameters,
        "nonzero_parameters": size.nonzero_parameters,
    }


def _variant_row(judged: Judged, speed: SpeedStats, out_dir: Path, digest: str) -> Row:
    quality = judged.quality
    return Row(
        name=judged.built.variant.value,
        digest=digest,
        status="accepted" if judged.verdict.accepted else "rejected",
        reason=judged.verdict.reason,
        path=str(out_dir / judged.built.variant.value),
        precision=PRECISION[judged.built.variant],
        accuracy=quality.accuracy,
        accuracy_drop_points=quality.accuracy_drop_points,
        top1_agreement=quality.top1_agreement,
        max_abs_diff=quality.max_abs_diff,
        details=judged.built.details,
        outputs={output.name: output.as_dict() for output in judged.outputs},
        **_size_fields(judged.size),
        **_speed_fields(speed),
    )


def _with_ratios(row: Row, fp32: Row | None) -> Row:
    if fp32 is None:
        return row
    return row.model_copy(
        update={
            "size_vs_fp32": fp32.file_bytes / row.file_bytes,
            "latency_speedup_vs_fp32": fp32.p50_latency_ms / row.p50_latency_ms,
            "throughput_speedup_vs_fp32": row.throughput / fp32.throughput,
        }
    )


def build_report(source: Source, config: ExportConfig, result: ExportResult, warnings: list[str]) -> ExportReport:
    """Turn a finished export into its report (figures, conditions and the choice)."""
    rows = [
        _variant_row(j, result.speeds[j.built.variant.value], result.out_dir, result.digests[j.built.variant.value])
        for j in result.judged
    ]
    reference_accuracy = result.judged[0].quality.reference_accuracy
    baseline = Row(
        name=source.baseline_name,
        status="baseline",
        reason="Keras model run as a compiled tf.function"
        if source.kind == "keras"
        else (
            "the SavedModel as converted (tf2onnx, not optimised), in ONNX Runtime"
            if source.description.startswith("SavedModel")
            else "the ONNX file as imported, in ONNX Runtime"
        ),
        path=None,
        precision="fp32",
        accuracy=reference_accuracy,
        accuracy_drop_points=0.0 if reference_accuracy is not None else None,
        top1_agreement=1.0,
        max_abs_diff=0.0,
        **_size_fields(result.baseline_size),
        **_speed_fields(result.speeds[source.baseline_name]),
    )
    fp32 = next((row for row in rows if row.name == "fp32"), None)
    chosen_row = next(row for row in rows if row.name == result.chosen)
    assert chosen_row.path is not None, "the chosen variant is one that was written"
    return ExportReport(
        model=source.name,
        source={"kind": source.kind, "description": source.description, "sha256": source.sha256},
        source_model=str(source.keras_path) if source.keras_path else None,
        data_fingerprint=source.splits.fingerprint() if source.splits is not None else None,
        evaluation={"rows": len(source.reference), "labelled": source.labels is not None, "note": source.evaluation_note},
        calibration={
            "rows": len(next(iter(source.calibration.values()))),
            "synthetic": source.calibration_synthetic,
            "note": source.calibration_note,
            "method": config.calibration_method.value,
            "target": config.target.value,
        },
        budget={**config.budget.model_dump(), "basis": "accuracy drop" if source.labels is not None else "top-1 disagreement"},
        optimize_for=config.optimize_for,
        measurement={
            "rounds": config.measure_rounds,
            "seconds_per_round": config.measure_seconds,
            "interleaved": True,
            "session": f"engine.session defaults, {result.timed_on}",
            "cpu_limit": cpu_limit(),
        },
        baseline=_with_ratios(baseline, fp32),
        variants=[_with_ratios(row, fp32) for row in rows],
        chosen=Chosen(name=result.chosen, path=chosen_row.path, reason=result.reason),
        out_dir=str(result.out_dir),
        warnings=warnings,
    )


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value * 100:.2f}%"


def _num(value: float | None, fmt: str) -> str:
    return "n/a" if value is None else format(value, fmt)


def markdown(report: ExportReport) -> str:
    """The report as a markdown table, with the conditions it was measured under."""
    rows = [report.baseline, *report.variants]
    lines = [
        f"### Export variants: {report.model}",
        "",
        f"Evaluation: {report.evaluation['note']}. Calibration: {report.calibration['note']} "
        f"({report.calibration['method']}, target {report.calibration['target']}). "
        f"Latency at batch {rows[0].latency_batch}, throughput at batch {rows[0].throughput_batch}, "
        f"{report.measurement['rounds']} interleaved rounds.",
        "",
        "| variant | status | file KiB | gzip KiB | params | non-zero | accuracy | drop (pts) | agreement "
        "| max abs diff | p50 ms | rows/s | smaller vs fp32 | p50 speed-up | rows/s speed-up |",
        "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for row in rows:
        lines.append(
            f"| {row.name} | {row.status} | {row.file_bytes / 1024:,.1f} | {row.gzip_bytes / 1024:,.1f} "
            f"| {row.parameters:,} | {row.nonzero_parameters:,} | {_pct(row.accuracy)} | {_num(row.accuracy_drop_points, '.2f')} "
            f"| {_pct(row.top1_agreement)} | {_num(row.max_abs_diff, '.1e')} | {row.p50_latency_ms:.3f} | {row.throughput:,.0f} "
            f"| {_num(row.size_vs_fp32, '.2f')}x | {_num(row.latency_speedup_vs_fp32, '.2f')}x | {_num(row.throughput_speedup_vs_fp32, '.2f')}x |"
        )
    lines += ["", f"Chosen: **{report.chosen.name}** ({report.chosen.reason})."]
    lines += [f"Rejected {row.name}: {row.reason}." for row in report.variants if row.status == "rejected"]
    lines += [f"Warning: {warning}" for warning in report.warnings]
    return "\n".join(lines) + "\n"


def plot(report: ExportReport, path: Path) -> None:
    """Size vs latency (each point labelled with its accuracy or agreement) and throughput, one PNG."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    from slipway.plots import pyplot, save_png

    plt = pyplot()

    rows = [report.baseline, *report.variants]
    colours = {"baseline": "grey", "accepted": "tab:green", "rejected": "tab:red"}
    figure, (left, right) = plt.subplots(1, 2, figsize=(12, 4.8))
    for index, row in enumerate(rows):
        quality = row.accuracy if row.accuracy is not None else row.top1_agreement
        kind = "acc" if row.accuracy is not None else "agree"
        left.scatter(row.p50_latency_ms, row.file_bytes / 1024, s=70, color=colours[row.status], edgecolors="black")
        # Variants often share a size (pruned = fp32 on disk): stagger the labels so they stay readable.
        left.annotate(
            f"{row.name} ({kind} {_pct(quality)})",
            (row.p50_latency_ms, row.file_bytes / 1024),
            textcoords="offset points",
            xytext=(7, 10 - 11 * (index % 4)),
            fontsize=8,
        )
    left.set_xscale("log")
    left.set_yscale("log")
    left.margins(x=0.15, y=0.2)  # room for the labels of the outermost points
    for axis in (left.xaxis, left.yaxis):
        axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        axis.set_minor_formatter(NullFormatter())
        axis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    left.set_xlabel(f"p50 latency at batch {rows[0].latency_batch} (ms, log)")
    left.set_ylabel("file size (KiB, log)")
    left.set_title(f"{report.model}: size vs latency (green: within budget, red: rejected)", fontsize=10)
    right.barh([row.name for row in rows], [row.throughput for row in rows], color=[colours[row.status] for row in rows])
    right.invert_yaxis()
    right.xaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:,.0f}"))
    right.set_xlabel(f"rows/s at batch {rows[0].throughput_batch}")
    right.set_title(f"throughput (chosen: {report.chosen.name})", fontsize=10)
    save_png(figure, path)


def write_export_report(report: ExportReport, name: str = "export", reports_dir: Path | None = None) -> Path:
    """`reports/<name>.json`, `.md` and `.png`; returns the JSON's path."""
    path = write_report(name, report.model_dump(mode="json"), reports_dir)
    atomic.write_text(path.with_suffix(".md"), markdown(report))
    plot(report, path.with_suffix(".png"))
    return path


def console_table(report: ExportReport):
    """The table for the terminal (rich): the key figures; the markdown has them all."""
    from rich.table import Table

    labelled = report.evaluation["labelled"]
    table = Table(title=f"{report.model}: variants (chosen: {report.chosen.name})")
    for column in ("variant", "status", "KiB", "gzip KiB", "accuracy" if labelled else "agreement", "p50 ms", "rows/s"):
        table.add_column(column, justify="left" if column in ("variant", "status") else "right", no_wrap=True)
    for row in [report.baseline, *report.variants]:
        style = "bold green" if row.name == report.chosen.name else "red" if row.status == "rejected" else None
        table.add_row(
            row.name,
            row.status,
            f"{row.file_bytes / 1024:,.1f}",
            f"{row.gzip_bytes / 1024:,.1f}",
            _pct(row.accuracy if labelled else row.top1_agreement),
            f"{row.p50_latency_ms:.3f}",
            f"{row.throughput:,.0f}",
            style=style,
        )
    return table
