"""`python -m benchmarks.defaults`: the serving settings chosen at load against the old fixed defaults and the
tuned settings, each as a share of raw ONNX Runtime's best (reports/bench-defaults.json).

Issue 31: users run the defaults, not `make tune`'s winners. Per model: the raw limit (`benchmarks.raw`, before
and after the servers, averaged), then one MLServer per configuration, loaded side by side and measured in
turn at each point (protocol x concurrency) so that all meet the same machine; the median round counts.
What each server chose at load is read back from its V2 model metadata.
"""

from __future__ import annotations

import json
import os
import time
import urllib.request
from collections.abc import Sequence
from contextlib import ExitStack

from benchmarks.load import GRPC, REST, run_load
from benchmarks.models import BENCH_DIR, MODELS, server_folder
from benchmarks.raw import measure_raw
from benchmarks.run import SLIPWAY_SETTINGS
from slipway.artifact import RUNTIME_IMPLEMENTATION
from slipway.cli import ArgumentParser, UserError, console, exit_with
from slipway.local_server import LocalServer
from slipway.reports import write_report

# The defaults before issue 31, spelled out: one run slot, no merging, inline under 0.5 ms (intra-op threads
# left unset: 1 for inline runs, else the CPU limit, as before).
OLD_DEFAULTS = {
    "max_batch_rows": 1,
    "inference_threads": 1,
    "inline_below_ms": 0.5,
    "busy_intra_op_threads": 0,
    "event_loop_spin_us": 0,
    "spin_within_runs": False,
}
CONFIGS = {
    "old defaults": lambda name: OLD_DEFAULTS,
    "chosen at load": lambda name: {},
    "tuned": lambda name: SLIPWAY_SETTINGS.get(name) or None,
}
RAW_BATCH_SIZES = [1, 8, 32]


def bench(models: list[str], *, seconds: float, rounds: int, raw_seconds: float) -> dict:
    results = {}
    for name in models:
        model = MODELS[name]()
        console.print(f"{name}: raw limit")
        raw_before = measure_raw(model.onnx_path, model.input_name, model.row, batch_sizes=RAW_BATCH_SIZES, seconds=raw_seconds)
        configs = {label: extra(name) for label, extra in CONFIGS.items()}
        configs = {label: extra for label, extra in configs.items() if extra is not None}
        inputs = {model.input_name: model.row}
        points = []
        chosen = {}
        with ExitStack() as stack:
            servers = {}
            for index, (label, extra) in enumerate(configs.items()):
                folder = server_folder(BENCH_DIR / "defaults", model, f"config{index}", RUNTIME_IMPLEMENTATION, extra)
                servers[label] = stack.enter_context(LocalServer(folder))
                chosen[label] = _metadata_parameters(servers[label].http_url, name)
            for protocol in (GRPC, REST):
                for concurrency in (1, 8):
                    console.print(f"{name}: {protocol} at concurrency {concurrency}")
                    summaries: dict[str, list[dict]] = {label: [] for label in servers}
                    for _ in range(rounds):  # alternate, so all meet the same machine
                        for label, server in servers.items():
                            result = run_load(
                                protocol=protocol,
                                server=server,
                                model=name,
                                inputs=inputs,
                                concurrency=concurrency,
                                seconds=seconds,
                                warmup_s=1.0,
                            )
                            summaries[label].append(result.summary())
                    for label, rounds_of in summaries.items():
                        median = sorted(rounds_of, key=lambda summary: summary["rows_per_s"])[len(rounds_of) // 2]
                        points.append(
                            {"config": label, **median, "rounds_rows_per_s": [summary["rows_per_s"] for summary in rounds_of]}
                        )
        raw_after = measure_raw(model.onnx_path, model.input_name, model.row, batch_sizes=RAW_BATCH_SIZES, seconds=raw_seconds)
        limit = max((first["rows_per_s"] + second["rows_per_s"]) / 2 for first, second in zip(raw_before, raw_after))
        for point in points:
            point["x_raw_limit"] = round(point["rows_per_s"] / limit, 3)
        results[name] = {
            "source": model.source,
            "raw_limit_rows_per_s": round(limit, 2),
            "raw_before": raw_before,
            "raw_after": raw_after,
            "settings": configs,
            "chosen_at_load": chosen,
            "points": points,
        }
    return results


def _metadata_parameters(http_url: str, model: str) -> dict:
    with urllib.request.urlopen(f"{http_url}/v2/models/{model}", timeout=30) as response:
        return json.loads(response.read()).get("parameters") or {}


def table(results: dict) -> str:
    lines = ["| model | config | protocol | concurrency | rows/s | x raw limit | p50 ms |", "|---|---|---|---|---|---|---|"]
    for name, result in results.items():
        for point in result["points"]:
            lines.append(
                f"| {name} | {point['config']} | {point['protocol']} | {point['concurrency']} | "
                f"{point['rows_per_s']:.1f} | {point['x_raw_limit']:.3f} | {point['p50_ms']:.2f} |"
            )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = ArgumentParser(prog="python -m benchmarks.defaults", description=__doc__)
    parser.add_argument("--models", nargs="+", default=list(MODELS), help="models to measure")
    parser.add_argument("--seconds", type=float, default=3.0, help="measured seconds per round of a point")
    parser.add_argument("--rounds", type=int, default=3, help="rounds per point, alternating the configurations")
    parser.add_argument("--raw-seconds", type=float, default=2.0, help="seconds per raw ONNX Runtime measurement")
    args = parser.parse_args(argv)
    unknown = sorted(set(args.models) - set(MODELS))
    if unknown:
        raise UserError(f"unknown models {unknown}: choose from {sorted(MODELS)}")
    if args.seconds <= 0 or args.raw_seconds <= 0 or args.rounds < 1:
        raise UserError("--seconds and --raw-seconds must be positive and --rounds at least 1")
    started, load_before = time.time(), os.getloadavg()
    results = bench(args.models, seconds=args.seconds, rounds=args.rounds, raw_seconds=args.raw_seconds)
    # The ratios hold only on a machine the benchmark has to itself: the load average says whether it had.
    load = {"before": [round(x, 2) for x in load_before], "after": [round(x, 2) for x in os.getloadavg()]}
    path = write_report(
        "bench-defaults",
        {"config": vars(args), "duration_s": round(time.time() - started, 1), "load_average": load, "models": results},
    )
    console.print(table(results))
    console.print(f"report {path}")
    return 0


if __name__ == "__main__":
    exit_with(main)
