"""`make bench`: the wrappers runtime against the raw limit and against a plain MLServer runtime.

For each model: ONNX Runtime alone in this process (the limit, measured before and after
the servers' loads and averaged), then real MLServer processes side by side, the plain
runtime (`benchmarks.plain_runtime`) and the wrappers runtime, loaded in turn at each
point (protocol x concurrency) so that both meet the same machine, and over gRPC a bare gRPC
server (`benchmarks.transport`): what the transport alone costs. Writes reports/bench.json,
reports/bench.png, reports/bench.md and the benchmark table of docs/benchmarks.md.
"""

from __future__ import annotations

import os
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from benchmarks.load import GRPC, GRPC_SHARED_MEMORY, REST, REST_BINARY, pinned, run_load
from benchmarks.models import BENCH_DIR, MODELS, BenchModel, server_folder
from benchmarks.raw import SPINNING, measure_raw, measure_side_by_side
from benchmarks.transport import BareGrpcServer
from engine.providers import CPU
from slipway.artifact import RUNTIME_IMPLEMENTATION
from slipway.local_server import LocalServer
from slipway.reports import wakeup_round_trip_us

PLAIN = "plain"
SLIPWAY = "slipway"
# gRPC alone (`benchmarks.transport`), holding each request so that its p50 matches the wrappers runtime's of the
# same round: its CPU per request is the floor under the servers' event-loop and other-thread CPU at about their rate.
# It serves nothing, so it has no share of the raw limit.
TRANSPORT = "grpc transport alone (no MLServer, no model)"
IMPLEMENTATIONS = {PLAIN: "benchmarks.plain_runtime.PlainOnnxRuntime", SLIPWAY: RUNTIME_IMPLEMENTATION}
# The wrappers runtime's settings per model, as a user would put them in model-settings.json.
SLIPWAY_SETTINGS = {
    "digits": {},  # the defaults: tiny runs go inline on the event loop
    # Throughput mode: single-threaded runs, one run slot more than cores, merging what queues behind them.
    "mobilenetv2": {"max_batch_rows": 2, "inference_threads": 3, "intra_op_threads": 1},
}
# The same runtime set for latency (a per-model choice: it costs CPU at low load, which a CPU-based HPA counts):
# the event loop polls for 1 ms after each inline run instead of sleeping, so that the next request finds its
# CPU awake. Measured beside the defaults at every point, so that both are on record against the same figures.
SLIPWAY_LATENCY = "slipway, latency settings"
LATENCY_SETTINGS = {"digits": {"event_loop_spin_us": 1000}}
RAW_BATCH_SIZES = [1, 8, 32]


@dataclass(frozen=True)
class BenchConfig:
    models: list[str] = field(default_factory=lambda: list(MODELS))
    protocols: list[str] = field(default_factory=lambda: [GRPC, REST, GRPC_SHARED_MEMORY, REST_BINARY])
    concurrency: list[int] = field(default_factory=lambda: [1, 8])
    seconds: float = 3.0
    rounds: int = 3  # each point is measured this many times, alternating runtimes; the median counts
    warmup_s: float = 1.0
    raw_seconds: float = 3.0
    # The CPU unless asked: on a GPU host, ONNX Runtime (and the runtime's defaults) would otherwise pick the GPU.
    provider: str = CPU
    server_cpus: list[int] | None = None  # the raw limit and every server on these; None: anywhere
    client_cpus: list[int] | None = None  # the load's clients on these; None: anywhere


PROVIDERS = {"cpu": CPU, "cuda": "CUDAExecutionProvider"}


def parse_cpus(text: str, option: str) -> list[int]:
    """A CPU list as taskset writes one ("0-3,8"), each CPU one this process may use; ValueError saying what to send."""
    available = sorted(os.sched_getaffinity(0))
    cpus: set[int] = set()
    try:
        for part in text.split(","):
            first, _, last = part.strip().partition("-")
            cpus.update(range(int(first), int(last or first) + 1))
    except ValueError:
        raise ValueError(f"{option} {text!r}: give CPUs as taskset lists them, e.g. 0-3 or 0,2,4-7") from None
    missing = sorted(cpus - set(available))
    if not cpus or missing:
        raise ValueError(
            f"{option} {text!r}: CPUs {missing or 'none'} are not this process's to use "
            f"(it may use {available[0]}-{available[-1]})"
            if available
            else f"{option}: no CPU"
        )
    return sorted(cpus)


def _runtimes_for(protocol: str, runtimes: list[str]) -> list[str]:
    """Shared memory and Triton's binary REST extension are the wrappers runtime's alone (with its main settings;
    MLServer has neither); the bare transport is gRPC's; the rest is measured for all."""
    if protocol in (GRPC_SHARED_MEMORY, REST_BINARY):
        return [SLIPWAY]
    return [runtime for runtime in runtimes if runtime != TRANSPORT or protocol == GRPC]


def _steps(config: BenchConfig) -> int:
    def loads(name: str) -> int:
        runtimes = [PLAIN, SLIPWAY, TRANSPORT] + ([SLIPWAY_LATENCY] if name in LATENCY_SETTINGS else [])
        per_point = config.rounds * len(config.concurrency)
        return per_point * sum(len(_runtimes_for(protocol, runtimes)) for protocol in config.protocols)

    return sum(2 * len(SPINNING) * len(RAW_BATCH_SIZES) + 1 + loads(name) + 1 for name in config.models)


def bench_model(model: BenchModel, config: BenchConfig, advance, work_dir: Path = BENCH_DIR / "servers") -> dict:
    """Raw limit, both runtimes at every point, raw limit again; for one model (server folders under `work_dir`)."""
    providers = (config.provider,)

    def raw_sweep() -> list[dict]:
        with pinned(config.server_cpus):
            return measure_raw(
                model.onnx_path,
                model.input_name,
                model.row,
                batch_sizes=RAW_BATCH_SIZES,
                seconds=config.raw_seconds,
                on_step=advance,
                providers=providers,
            )

    raw_before = raw_sweep()
    with pinned(config.server_cpus):
        side_by_side = measure_side_by_side(
            model.onnx_path, model.input_name, model.row, batch=8, callers=2, seconds=config.raw_seconds, providers=providers
        )
    advance()
    # Shared memory on, so that its path can be measured too: the other paths do not change with it.
    settings = {**SLIPWAY_SETTINGS.get(model.name, {}), "shared_memory": True, "providers": [config.provider]}
    folders = {
        PLAIN: server_folder(work_dir, model, PLAIN, IMPLEMENTATIONS[PLAIN], {"providers": [config.provider]}),
        SLIPWAY: server_folder(work_dir, model, SLIPWAY, IMPLEMENTATIONS[SLIPWAY], settings),
    }
    if model.name in LATENCY_SETTINGS:
        folders[SLIPWAY_LATENCY] = server_folder(
            work_dir,
            model,
            "slipway-latency",
            IMPLEMENTATIONS[SLIPWAY],
            {**LATENCY_SETTINGS[model.name], "providers": [config.provider]},
        )
    inputs = {model.input_name: model.row}
    points = []
    with ExitStack() as stack:
        servers: dict[str, LocalServer | BareGrpcServer] = {
            runtime: stack.enter_context(LocalServer(folder, launcher=runtime != PLAIN, cpus=config.server_cpus))
            for runtime, folder in folders.items()
        }
        transport = stack.enter_context(BareGrpcServer.answering_as(servers[SLIPWAY], model.name, inputs, work_dir))
        servers[TRANSPORT] = transport
        advance()
        for protocol in config.protocols:
            for concurrency in config.concurrency:
                runtimes = _runtimes_for(protocol, list(servers))
                rounds: dict[str, list[dict]] = {runtime: [] for runtime in runtimes}
                for _ in range(config.rounds):  # alternate, so all meet the same machine
                    for runtime in runtimes:
                        if runtime == TRANSPORT:
                            hold_ms = transport_hold_ms(rounds[SLIPWAY][-1], rounds[TRANSPORT])
                            transport.hold(hold_ms)
                        result = run_load(
                            protocol=protocol,
                            server=servers[runtime],
                            model=model.name,
                            inputs=inputs,
                            concurrency=concurrency,
                            seconds=config.seconds,
                            warmup_s=config.warmup_s,
                            client_cpus=config.client_cpus,
                        )
                        summary = result.summary()
                        if runtime == TRANSPORT:
                            summary["hold_ms"] = hold_ms
                        rounds[runtime].append(summary)
                        advance()
                for runtime, summaries in rounds.items():
                    point = {"runtime": runtime, **_median_round(summaries)}
                    point["rounds_rows_per_s"] = [summary["rows_per_s"] for summary in summaries]
                    point["rounds_p50_ms"] = [summary["p50_ms"] for summary in summaries]
                    points.append(point)
    raw = _mean_of_sweeps(raw_before, raw_sweep())
    limit = max(result["rows_per_s"] for result in raw)
    for point in points:
        if point["runtime"] != TRANSPORT:
            point["x_raw_limit"] = round(point["rows_per_s"] / limit, 3)
            point["rounds_x_raw_limit"] = [round(rows / limit, 3) for rows in point["rounds_rows_per_s"]]
    return {
        "source": model.source,
        "raw": raw,
        "raw_limit_rows_per_s": limit,
        "raw_two_single_threaded_callers_rows_per_s": side_by_side,
        "slipway_settings": settings,
        "points": points,
    }


def transport_hold_ms(served: dict, earlier: list[dict]) -> float:
    """How long the bare transport holds each request this round, so that its p50, and with it its request
    rate, matches the wrappers runtime's round just before: the served p50, less the transport's own latency
    as its previous round measured it (none before the first)."""
    own_ms = earlier[-1]["p50_ms"] - earlier[-1]["hold_ms"] if earlier else 0.0
    return round(max(0.0, served["p50_ms"] - own_ms), 3)


def _mean_of_sweeps(before: list[dict], after: list[dict]) -> list[dict]:
    """Each raw setting's mean of the sweeps before and after the servers' loads, so that a
    machine whose speed drifts during the run biases neither side of the ratio."""
    mean = []
    for first, second in zip(before, after, strict=True):
        runs = [first["rows_per_s"], second["rows_per_s"]]
        mean.append(
            {
                **first,
                "rows_per_s": round(sum(runs) / 2, 2),
                "rows_per_s_before_after": runs,
                "cpu_ms_per_row": round((first["cpu_ms_per_row"] + second["cpu_ms_per_row"]) / 2, 4),
            }
        )
    return mean


def _median_round(summaries: list[dict]) -> dict:
    """The round with the median throughput (its latencies and CPU come with it)."""
    return sorted(summaries, key=lambda summary: summary["rows_per_s"])[len(summaries) // 2]


def _point(models: dict, model: str, runtime: str, protocol: str, concurrency: int) -> dict | None:
    for point in models.get(model, {}).get("points", []):
        if (point["runtime"], point["protocol"], point["concurrency"]) == (runtime, protocol, concurrency):
            return point
    return None


def figures(models: dict) -> list[dict]:
    """The issue's figures to reach, each with its measured value (from the median rounds) and whether it is
    met, and the same ratio in each round, paired (the runtimes' loads alternate): how far noise moves it."""
    out = []

    def add(name: str, value: float | None, target: float, rounds: list[float] | None, higher_is_better: bool = True) -> None:
        if value is None:
            return
        met = value >= target if higher_is_better else value <= target
        figure = {
            "figure": name,
            "value": round(value, 3),
            "comparison": ">=" if higher_is_better else "<=",
            "target": target,
            "met": met,
        }
        if rounds:
            figure["rounds"] = [round(ratio, 3) for ratio in rounds]
        out.append(figure)

    def paired(ours: dict, theirs: dict, key: str) -> list[float] | None:
        if key not in ours or key not in theirs:
            return None
        return [mine / other for mine, other in zip(ours[key], theirs[key], strict=True)]

    for protocol, target in ((GRPC, 0.90), (REST, 0.30)):
        point = _point(models, "mobilenetv2", SLIPWAY, protocol, 8)
        if point:
            add(
                f"mobilenetv2 {protocol} c8: served images/s / raw limit",
                point["x_raw_limit"],
                target,
                point.get("rounds_x_raw_limit"),
            )
    for runtime, label in ((SLIPWAY, ""), (SLIPWAY_LATENCY, " (latency settings)")):  # each must meet both
        for protocol in (GRPC, REST):
            ours, plain = _point(models, "digits", runtime, protocol, 8), _point(models, "digits", PLAIN, protocol, 8)
            if ours and plain:
                add(
                    f"digits {protocol} c8: requests/s / plain runtime's{label}",
                    ours["requests_per_s"] / plain["requests_per_s"],
                    1.3,
                    paired(ours, plain, "rounds_rows_per_s"),
                )
            ours, plain = _point(models, "digits", runtime, protocol, 1), _point(models, "digits", PLAIN, protocol, 1)
            if ours and plain:
                add(
                    f"digits {protocol} c1: p50 latency / plain runtime's{label}",
                    ours["p50_ms"] / plain["p50_ms"],
                    1.0,
                    paired(ours, plain, "rounds_p50_ms"),
                    higher_is_better=False,
                )
    return out


def run_bench(config: BenchConfig) -> dict:
    """Measure everything in `config` and return the report's payload."""
    load_before, wakeup_before = os.getloadavg(), wakeup_round_trip_us()
    started = time.time()
    models: dict = {}
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns) as progress:
        task = progress.add_task("bench", total=_steps(config))
        for name in config.models:
            progress.update(task, description=f"bench {name}: preparing the model")
            model = MODELS[name]()
            progress.update(task, description=f"bench {name}")
            models[name] = bench_model(model, config, lambda: progress.advance(task))
    return {
        "config": config.__dict__,
        "load_average": {"before": [round(x, 2) for x in load_before], "after": [round(x, 2) for x in os.getloadavg()]},
        "cpu_count": os.cpu_count(),
        # How long the machine takes to wake an idle CPU (threads ping-ponging, us per round trip): latency at
        # low load moves with it from host to host, and the ratios less.
        "wakeup_round_trip_us": {"before": wakeup_before, "after": wakeup_round_trip_us()},
        "duration_s": round(time.time() - started, 1),
        "client": "closed loop, one prepared request per client (gRPC: raw_input_contents, or inputs in the client's "
        "own shared-memory region; REST: V2 JSON, or Triton's binary extension), same machine",
        "provider": config.provider,
        "server_cpus": config.server_cpus,
        "client_cpus": config.client_cpus,
        "models": models,
        "figures": figures(models),
    }
