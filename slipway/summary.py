"""The demo's closing table: one line per step, read back from the reports each step wrote."""

from __future__ import annotations

from typing import Any

from rich.table import Table

from slipway.reports import read_report


def summary_table() -> Table:
    """What each step of the road produced, from `reports/*.json`; missing steps say so."""
    table = Table(title="Slipway: the road, once", show_lines=False)
    table.add_column("step")
    table.add_column("result")
    train = read_report("train")
    export = read_report("convert")
    variants = read_report("export")
    smoke = read_report("smoke")
    load = read_report("loadtest")
    manifests = read_report("manifests")
    table.add_row(
        "train",
        f"test accuracy {train['test_accuracy']:.4f}, {train['parameters']:,} parameters, "
        f"{train['epochs_run']} epochs ({train['train_seconds']:.0f} s)"
        if train
        else "not run",
    )
    table.add_row(
        "convert",
        f"ONNX opset {export['opset']}, {export['onnx_bytes'] / 1024:.0f} KiB, predictions identical: "
        f"{export['parity']['identical_predictions']}, max abs diff {export['parity']['max_abs_diff']:.1e}"
        if export
        else "not run",
    )
    if variants:
        table.add_row(
            "variants",
            f"{variants['model']}: {len(variants['variants'])} variants, chosen {variants['chosen']['name']} "
            f"({variants['chosen']['path']})",
        )
    table.add_row(
        "serve",
        f"REST and gRPC (tritonclient) answer as exported; max abs diff "
        f"{max(smoke['rest']['max_abs_diff'], smoke['grpc']['max_abs_diff']):.1e}"
        if smoke
        else "not run",
    )
    if load:
        result = load["result"]
        text = (
            f"{result['rps']:.0f} req/s, p50 {result['p50_ms']:.0f} ms, p95 {result['p95_ms']:.0f} ms, "
            f"p99 {result['p99_ms']:.0f} ms, {result['failures']} failures / {result['requests']}"
        )
    else:
        text = "not run"
    table.add_row("load test", text)
    table.add_row(
        "manifests",
        _manifests_text(manifests) if manifests else "not run",
    )
    return table


def _manifests_text(manifests: dict[str, Any]) -> str:
    """What was rendered and how far it was validated: checks skipped (no CRD schema here) are counted too."""
    validation = manifests["validation"]
    skipped = f", {len(validation['skipped'])} skipped" if validation.get("skipped") else ""
    return f"{len(manifests['files'])} resources in {manifests['out_dir']}, valid ({len(validation['checked'])} checked{skipped})"
