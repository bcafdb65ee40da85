"""`make bench-export`: both models through the export pipeline in one run, checked against the figures to reach.

Each model's run writes its own report (`reports/bench-export-<model>.json/.md/.png`);
this module adds the targets table (`reports/bench-export.json/.md`) and puts it into
the benchmarks page's export section (docs/benchmarks.md), between markers, so a re-run on a quiet machine
refreshes the published figures in one command.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from export.report import ExportReport, Row, markdown
from slipway import atomic
from slipway.readme import replace_section
from slipway.reports import write_report

PAGE_SECTION = "bench-export"


@dataclass(frozen=True)
class Target:
    figure: str
    value: float | None
    target: str
    met: bool

    def as_dict(self) -> dict:
        return {"figure": self.figure, "value": self.value, "target": self.target, "met": self.met}


def _row(report: ExportReport, name: str) -> Row | None:
    if report.baseline.name == name:
        return report.baseline
    return next((row for row in report.variants if row.name == name), None)


def targets(digits: ExportReport, mobilenet: ExportReport) -> list[Target]:
    """The issue's figures to reach, computed from the two reports of this run."""
    found: list[Target] = []
    fp32, int8, slim, keras = (_row(digits, name) for name in ("fp32", "int8", "slim", "keras"))
    if fp32 and int8:
        ratio = fp32.file_bytes / int8.file_bytes
        found.append(Target("digits: int8 file size vs fp32 (x smaller)", ratio, ">= 3.5", ratio >= 3.5))
        drop = int8.accuracy_drop_points
        found.append(Target("digits: int8 accuracy drop (points)", drop, "<= 0.5", drop is not None and drop <= 0.5))
    m_fp32, m_int8, m_keras = (_row(mobilenet, name) for name in ("fp32", "int8", "keras"))
    if m_fp32 and m_int8:
        ratio = m_int8.throughput / m_fp32.throughput
        found.append(Target("mobilenetv2: int8 vs fp32 throughput at batch 32", ratio, ">= 1.3", ratio >= 1.3))
    for label, onnx_row, keras_row in (("digits", fp32, keras), ("mobilenetv2", m_fp32, m_keras)):
        if onnx_row and keras_row:
            ratio = keras_row.p50_latency_ms / onnx_row.p50_latency_ms
            found.append(
                Target(f"{label}: fp32 ONNX Runtime vs Keras tf.function, p50 at batch 1", ratio, ">= 1.5", ratio >= 1.5)
            )
    if fp32 and slim:
        latency = fp32.p50_latency_ms / slim.p50_latency_ms
        throughput = slim.throughput / fp32.throughput
        found.append(Target("digits: slim (half the filters) vs fp32, p50 at batch 1", latency, ">= 1.6", latency >= 1.6))
        found.append(
            Target("digits: slim (half the filters) vs fp32, throughput at batch 32", throughput, ">= 1.6", throughput >= 1.6)
        )
        drop = slim.accuracy_drop_points
        found.append(Target("digits: slim accuracy drop (points)", drop, "<= 1", drop is not None and drop <= 1.0))
    return found


def targets_markdown(found: list[Target], load: dict) -> str:
    lines = [
        f"Measured by `make bench-export` on {os.cpu_count()} CPU cores (load average {load['before']:.1f} before, "
        f"{load['after']:.1f} after the run: above the core count means the cores were shared).",
        "",
        "| figure | measured | target | met |",
        "|---|--:|--:|:-:|",
    ]
    for target in found:
        value = "n/a" if target.value is None else f"{target.value:.2f}"
        lines.append(f"| {target.figure} | {value} | {target.target} | {'yes' if target.met else '**no**'} |")
    return "\n".join(lines) + "\n"


def write_bench(digits: ExportReport, mobilenet: ExportReport, load: dict, page: Path | None) -> tuple[Path, list[Target]]:
    """Targets JSON + markdown (and the docs page's section); returns the JSON path and the targets."""
    found = targets(digits, mobilenet)
    summary = targets_markdown(found, load)
    path = write_report(
        "bench-export",
        {
            "targets": [t.as_dict() for t in found],
            "all_met": all(t.met for t in found),
            "load_average": load,
            "reports": {"digits": "bench-export-digits", "mobilenetv2": "bench-export-mobilenetv2"},
        },
    )
    full = "\n".join([summary, markdown(digits), markdown(mobilenet)])
    atomic.write_text(path.with_suffix(".md"), full)
    if page is not None:  # its `###` model headings sit under the page's `## Export variants`
        replace_section(page, PAGE_SECTION, full)
    return path, found
