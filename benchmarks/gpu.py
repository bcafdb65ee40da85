"""`make bench-gpu`: one model on CPU vs CUDA vs TensorRT, fp32/fp16/int8, with and without IOBinding.

A prepared script for a machine with an NVIDIA GPU and `make setup GPU=1`: it measures
rows/s and p50 latency at batch 1 and 32 for every (provider, precision, IOBinding), and
CUDA graphs, with each variant's answers against CPU fp32's; then the model served through
MLServer on CUDA (`benchmarks.gpu_served`), and served rows/s as a share of the in-process CUDA
fp32 limit at gRPC concurrency 32 with 1-row requests, for fp32 and uint8 inputs and for one front
end against `--frontends N` (default 4), p99 beside it.
It writes reports/gpu.json, reports/gpu.png and the GPU table of docs/benchmarks.md. Without a
CUDA GPU the command refuses (`require_gpu`); with `--allow-no-gpu` it still runs: the missing
rows say "unavailable" or "fell back" and why, and the CPU rows are measured, so it checks the
fallback paths on any machine (into reports/gpu-cpu-only.*).

Precisions: fp32 is the model as exported; fp16 is converted with float16 weights and
float32 inputs/outputs (onnxconverter-common), and for TensorRT it is TensorRT's own fp16
mode on the fp32 graph; int8 is a static QDQ graph with symmetric int8 activations and
per-channel weights (what TensorRT 10 reads its scales from), calibrated on synthetic rows.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TypedDict

import numpy as np

from benchmarks.gpu_served import (
    DEFAULTS,
    POINTS,
    frontends_plan,
    input_plan,
    measure_frontends,
    measure_inputs,
    measure_served,
    served_configs,
)
from export.uint8_input import Uint8InputError
from loadtest.tuning.machine import available_providers, gpu_name, missing_for
from benchmarks.models import BenchModel
from engine.providers import CPU, CUDA, TENSORRT
from engine.runner import SessionRunner
from engine.session import create_session
from engine.tensor_specs import DYNAMIC, TensorSpec
from engine.tensorrt import tensorrt_batch_profile
from slipway.runtime_settings import CudaOptions, RuntimeSettings, TensorrtOptions

PROVIDERS = (CPU, CUDA, TENSORRT)
PRECISIONS = ("fp32", "fp16", "int8")
CALIBRATION_ROWS = 16
MAX_RUNS = 10_000
logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class GpuBenchConfig:
    model: Path
    work_dir: Path
    batch_sizes: tuple[int, ...] = (1, 32)
    seconds: float = 2.0
    warmup_runs: int = 3


def require_gpu() -> str | None:
    """Why this machine cannot run the GPU measurements (one line), or None where it can."""
    missing = missing_for("cuda", available_providers(), gpu_name())
    return (
        None
        if missing is None
        else (
            f"bench-gpu needs a CUDA GPU, and this machine lacks {missing}; run it on a "
            "GPU machine, or pass --allow-no-gpu to measure the CPU rows and the fallbacks"
        )
    )


def fp16_model(fp32: Path, out: Path) -> Path:
    """float16 weights, float32 inputs and outputs; cached beside the other variants."""
    if not out.is_file():
        import onnx
        from onnxconverter_common import float16

        from slipway import atomic

        converted = float16.convert_float_to_float16(onnx.load(fp32), keep_io_types=True)
        atomic.write_bytes(out, converted.SerializeToString())
    return out


def int8_model(fp32: Path, out: Path, input_name: str, row_shape: tuple[int, ...]) -> Path:
    """Static QDQ int8 (symmetric activations, per-channel weights), calibrated on synthetic rows."""
    if not out.is_file():
        from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

        class Synthetic(CalibrationDataReader):
            def __init__(self) -> None:
                rng = np.random.default_rng(0)
                self._rows = iter(
                    {input_name: rng.uniform(-1, 1, (1, *row_shape)).astype(np.float32)} for _ in range(CALIBRATION_ROWS)
                )

            def get_next(self):
                return next(self._rows, None)

        staging = out.with_suffix(".staging.onnx")
        quantize_static(
            str(fp32),
            str(staging),
            Synthetic(),
            quant_format=QuantFormat.QDQ,
            per_channel=True,
            activation_type=QuantType.QInt8,
            weight_type=QuantType.QInt8,
            extra_options={"ActivationSymmetric": True, "WeightSymmetric": True},
        )
        staging.replace(out)
    return out


def _variant(precision: str, provider: str, config: GpuBenchConfig, input_name: str, row_shape) -> tuple[Path, TensorrtOptions]:
    """The graph file and TensorRT options for one (precision, provider)."""
    trt = TensorrtOptions(
        engine_cache_path=str(config.work_dir / "trt-engines"),
        timing_cache_path=str(config.work_dir / "trt-timing"),
        extra_options=dict(
            tensorrt_batch_profile([TensorSpec(input_name, "FP32", (DYNAMIC, *row_shape))], max(config.batch_sizes))
        ),
    )
    if precision == "fp32":
        return config.model, trt
    if precision == "fp16":
        if provider == TENSORRT:  # TensorRT picks fp16 kernels itself from the fp32 graph
            return config.model, trt.model_copy(update={"fp16": True})
        return fp16_model(config.model, config.work_dir / "model.fp16.onnx"), trt
    path = int8_model(config.model, config.work_dir / "model.int8.onnx", input_name, row_shape)
    return path, trt.model_copy(update={"int8": True})


def measure(runner: SessionRunner, feeds: dict[str, np.ndarray], seconds: float, warmup_runs: int, expected: np.ndarray) -> dict:
    """Rows/s and latency percentiles of back-to-back runs (the first run, engine builds included, apart),
    and how far the last run's first output is from `expected` (CPU fp32's)."""
    output_names = [output.name for output in runner.session.get_outputs()]
    started = time.perf_counter()
    runner.run(output_names, feeds)
    first_run_s = time.perf_counter() - started
    for _ in range(warmup_runs):
        runner.run(output_names, feeds)
    latencies: list[float] = []
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline and len(latencies) < MAX_RUNS:
        started = time.perf_counter()
        outputs = runner.run(output_names, feeds)
        latencies.append(time.perf_counter() - started)
    rows = next(iter(feeds.values())).shape[0]
    return {
        "rows_per_s": round(rows * len(latencies) / sum(latencies), 2),
        "p50_ms": round(1000 * float(np.percentile(latencies, 50)), 3),
        "p99_ms": round(1000 * float(np.percentile(latencies, 99)), 3),
        "first_run_s": round(first_run_s, 3),
        "runs": len(latencies),
        **agreement(outputs[0], expected),
    }


def agreement(output: np.ndarray, reference: np.ndarray) -> dict:
    """How far a variant's first output is from CPU fp32's on the same rows: fp16 and int8 trade some of it."""
    figures = {"max_abs_diff": float(np.max(np.abs(output.astype(np.float64) - reference)))}
    if reference.ndim == 2 and reference.shape[1] > 1:
        figures["top1_agreement"] = float(np.mean(output.argmax(axis=1) == reference.argmax(axis=1)))
    return figures


@dataclass(frozen=True)
class Case:
    """One session configuration; a CUDA-graph case needs IOBinding and one session per batch size."""

    provider: str
    precision: str
    cuda_graph: bool = False

    @property
    def io_bindings(self) -> tuple[str, ...]:
        return ("on",) if self.cuda_graph else ("off", "on")


CASES = (
    *(Case(provider, precision) for provider in PROVIDERS for precision in PRECISIONS),
    *(Case(CUDA, precision, cuda_graph=True) for precision in ("fp32", "fp16")),
)


def steps(config: GpuBenchConfig) -> int:
    """Progress steps: one per measured row, one per served point."""
    served = len(POINTS) * len(served_configs(CUDA)) + len(input_plan()) + len(frontends_plan())
    return sum(len(case.io_bindings) * len(config.batch_sizes) for case in CASES) + served


def run_gpu_bench(config: GpuBenchConfig, on_step=None) -> dict:
    """Every case at every batch size; unavailable ones say why instead of failing."""
    import onnxruntime as ort

    config.work_dir.mkdir(parents=True, exist_ok=True)
    available = ort.get_available_providers()
    reference = ort.InferenceSession(str(config.model), providers=[CPU])
    model_input = reference.get_inputs()[0]
    row_shape = tuple(model_input.shape[1:])
    if not all(isinstance(dim, int) for dim in row_shape):
        raise ValueError(f"input {model_input.name} has dynamic dimensions {model_input.shape}: give a fixed-size model")
    feeds = {
        batch: {model_input.name: np.random.default_rng(batch).uniform(-1, 1, (batch, *row_shape)).astype(np.float32)}
        for batch in config.batch_sizes
    }
    expected = {batch: reference.run(None, feed)[0].astype(np.float64) for batch, feed in feeds.items()}
    first = min(config.batch_sizes)
    served_model = BenchModel(
        config.model.stem, config.model, model_input.name, feeds[first][model_input.name][:1], str(config.model)
    )
    rows = []
    for case in CASES:
        base = {"provider": case.provider, "precision": case.precision, "cuda_graph": case.cuda_graph}
        case_steps = len(case.io_bindings) * len(config.batch_sizes)
        if case.provider not in available:
            rows.append(
                {
                    **base,
                    "status": "unavailable",
                    "reason": f"this onnxruntime build has {available} (install onnxruntime-gpu: make setup GPU=1)",
                }
            )
            _advance(on_step, case_steps)
            continue
        try:
            path, trt = _variant(case.precision, case.provider, config, model_input.name, row_shape)
        except ImportError as err:
            rows.append(
                {**base, "status": "skipped", "reason": f"{err.name} is not installed (it builds the {case.precision} graph)"}
            )
            _advance(on_step, case_steps)
            continue
        settings = RuntimeSettings(providers=[case.provider], tensorrt=trt, cuda=CudaOptions(enable_cuda_graph=case.cuda_graph))
        shared, done = None, 0
        for batch in config.batch_sizes:
            session = shared
            if session is None:
                session, fell_back = _session_on(case.provider, path, settings)
                if fell_back:
                    rows.append({**base, "status": "fell back", "providers_used": session.get_providers(), "reason": fell_back})
                    _advance(on_step, case_steps - done)
                    break
                if not case.cuda_graph:  # a captured CUDA graph holds one set of shapes: a session per batch
                    shared = session
            for io_binding in case.io_bindings:
                row = {**base, "io_binding": io_binding, "batch": batch}
                runner = SessionRunner(session, io_binding=io_binding)
                try:
                    figures = measure(runner, feeds[batch], config.seconds, config.warmup_runs, expected[batch])
                    rows.append({**row, "status": "measured", **figures})
                except Exception as err:  # one failing kernel must not lose the other rows
                    rows.append({**row, "status": "failed", "reason": str(err)})
                _advance(on_step, 1)
                done += 1
    return {
        "model": str(config.model),
        "gpu": gpu_name(),
        "available_providers": available,
        "onnxruntime": ort.__version__,
        "config": {"batch_sizes": list(config.batch_sizes), "seconds": config.seconds, "warmup_runs": config.warmup_runs},
        "rows": rows,
        "served": _served(config, rows, served_model, expected[first][:1], on_step),
    }


def _served(config: GpuBenchConfig, rows: list[dict], model: BenchModel, expected_first_row: np.ndarray, on_step) -> dict:
    """The served measurements on CUDA where CUDA ran fp32 here, each point against the in-process best: the configs,
    then front-end counts under the defaults, then fp32 against uint8 inputs at the chosen count."""
    cuda = [
        row["rows_per_s"]
        for row in rows
        if row["provider"] == CUDA and row["precision"] == "fp32" and row["status"] == "measured"
    ]
    configs = served_configs(CUDA)
    if not cuda:
        _advance(on_step, len(POINTS) * len(configs) + len(input_plan()) + len(frontends_plan()))
        return {"status": "skipped", "reason": "CUDA did not run fp32 here, so there is no GPU to serve from"}
    servers = config.work_dir / "servers"
    measured = []
    for name, settings in configs.items():
        measured.append(
            measure_served(model, name, settings, expected_first_row, seconds=config.seconds, work_dir=servers, on_step=on_step)
        )
    try:  # a server that fails loses this comparison, not the rows measured above
        frontends = measure_frontends(model, configs[DEFAULTS], seconds=config.seconds, work_dir=servers, on_step=on_step)
    except RuntimeError as err:
        _advance(on_step, len(frontends_plan()))
        frontends = {"status": "failed", "reason": str(err).splitlines()[0] if str(err) else type(err).__name__}
    chosen = frontends.get("chosen", 1)
    try:
        inputs = measure_inputs(
            model, {**configs[DEFAULTS], "frontends": chosen}, seconds=config.seconds, work_dir=servers, on_step=on_step
        )
    except Uint8InputError as err:
        _advance(on_step, len(input_plan()))
        inputs = {"status": "skipped", "reason": f"no uint8 input for this graph: {err}"}
    served = with_cuda_ratios(
        {"status": "measured", "cuda_limit_rows_per_s": max(cuda), "configs": measured, "frontends": frontends, "inputs": inputs}
    )
    served["goals"] = goals(served)
    return served


def with_cuda_ratios(served: dict) -> dict:
    """Every served point's rows/s as a share of the in-process CUDA fp32 limit (`x_cuda_limit`), in place."""
    limit = served["cuda_limit_rows_per_s"]
    for point in _served_points(served):
        point["x_cuda_limit"] = round(point["rows_per_s"] / limit, 3)
    return served


def _served_points(served: dict) -> list[dict]:
    points = [point for measured in served["configs"] for point in measured["points"]]
    points += served.get("inputs", {}).get("points", [])
    return points + served.get("frontends", {}).get("points", [])


# Issue 46's goals, each a ratio from one run: served 1-row gRPC c32 against the in-process CUDA fp32 limit, fp32 and
# uint8 rows; no served config slower under load than alone; no long tail; the server's CPU per request at c32.
SERVED_SHARE, UINT8_SHARE, TAIL_RATIO, CPU_MS_AT_C32 = 0.5, 0.6, 3.0, 3.0


class Goal(TypedDict):
    """One goal of `goals`: what it measures, its target in words, this run's figure, and whether it met it."""

    goal: str
    target: str
    value: float
    met: bool


def goals(served: dict) -> list[Goal]:
    """Each goal with its figure, target and whether this run met it."""
    concurrency, rows = 32, 1
    at_point = [
        point
        for point in _served_points(served)
        if point["concurrency"] == concurrency and point["rows_per_request"] == rows and point.get("requests")
    ]
    fp32 = [point for point in at_point if point.get("input", "fp32") == "fp32"]
    uint8 = [point for point in at_point if point.get("input") == "uint8"]
    fp32_share = max((point["x_cuda_limit"] for point in fp32), default=0.0)
    uint8_share = max((point["x_cuda_limit"] for point in uint8), default=0.0)
    found: list[Goal] = [
        {
            "goal": f"served 1-row gRPC c{concurrency} fp32 / CUDA limit",
            "target": f">= {SERVED_SHARE}",
            "value": fp32_share,
            "met": fp32_share >= SERVED_SHARE,
        },
        {
            "goal": f"served 1-row gRPC c{concurrency} uint8 / CUDA limit",
            "target": f">= {UINT8_SHARE}",
            "value": uint8_share,
            "met": uint8_share >= UINT8_SHARE,
        },
    ]
    for measured in served["configs"]:
        by_point = {(point["concurrency"], point["rows_per_request"]): point["rows_per_s"] for point in measured["points"]}
        alone = by_point.get((1, 1), 0.0)
        slowest = min((by_point.get((load, 1), 0.0) for load in (8, 32)), default=0.0)
        found.append(
            {
                "goal": f"`{measured['name']}` at c8 and c32 / c1 (1-row)",
                "target": ">= 1",
                "value": round(slowest / alone, 3) if alone else 0.0,
                "met": bool(alone) and slowest >= alone,
            }
        )
    tails = [point["p99_ms"] / point["p50_ms"] for point in _served_points(served) if point.get("p50_ms")]
    found.append(
        {
            "goal": "p99 / p50 at every served point (worst)",
            "target": f"<= {TAIL_RATIO}",
            "value": round(max(tails, default=float("inf")), 3),
            "met": bool(tails) and max(tails) <= TAIL_RATIO,
        }
    )
    cpu = [point["server_cpu_ms_per_request"] for point in at_point if point.get("server_cpu_ms_per_request") is not None]
    found.append(
        {
            "goal": f"server CPU ms per request at c{concurrency} (worst point)",
            "target": f"< {CPU_MS_AT_C32}",
            "value": max(cpu, default=float("inf")),
            "met": bool(cpu) and max(cpu) < CPU_MS_AT_C32,
        }
    )
    return found


def _session_on(provider: str, path: Path, settings: RuntimeSettings):
    """The session, and why it does not run on `provider` (the fallback warnings), or "" when it does."""
    from logging.handlers import BufferingHandler

    caught = BufferingHandler(capacity=100)
    caught.setLevel(logging.WARNING)
    session_logger = logging.getLogger("engine")  # engine.providers and engine.session warn of fallbacks
    session_logger.addHandler(caught)
    try:
        session = create_session(path, settings)
    finally:
        session_logger.removeHandler(caught)
    if session.get_providers()[0] == provider:
        return session, ""
    return session, "; ".join(" ".join(record.getMessage().split()) for record in caught.buffer) or (
        f"{provider} could not run this graph"
    )


def _advance(on_step, steps: int) -> None:
    if on_step:
        on_step(steps)


def _provider_label(row: dict) -> str:
    name = {TENSORRT: "TensorRT"}.get(row["provider"], row["provider"].removesuffix("ExecutionProvider"))
    return f"{name} + graph" if row.get("cuda_graph") else name


def markdown(payload: dict) -> str:
    """The GPU table for docs/benchmarks.md."""
    gpu = payload["gpu"] or "no GPU on the machine that ran it"
    lines = [
        f"`make bench-gpu` on {gpu} (onnxruntime {payload['onnxruntime']}): rows/s and p50 ms of back-to-back runs, "
        "and how far each variant's output is from CPU fp32's on the same rows (largest absolute difference; "
        "share of rows with the same top class).",
        "",
        "| provider | precision | IOBinding | batch | rows/s | p50 ms | max abs diff | top-1 same | status |",
        "|---|---|---|---:|---:|---:|---:|---:|---|",
    ]
    for row in payload["rows"]:
        diff = f"{row['max_abs_diff']:.1e}" if "max_abs_diff" in row else ""
        top1 = f"{row['top1_agreement']:.0%}" if "top1_agreement" in row else ""
        lines.append(
            f"| {_provider_label(row)} | {row['precision']} | {row.get('io_binding', '')} | "
            f"{row.get('batch', '')} | {row.get('rows_per_s', '')} | {row.get('p50_ms', '')} | {diff} | {top1} | "
            f"{row['status']}{': ' + row['reason'] if row.get('reason') else ''} |"
        )
    return "\n".join(lines + _served_lines(payload.get("served"))) + "\n"


def _served_lines(served: dict | None) -> list[str]:
    if not served or served["status"] != "measured":
        return ["", f"Served through MLServer: {served['reason'] if served else 'not measured'}."]
    lines = [
        "",
        "Served through MLServer by the wrappers runtime, gRPC with raw contents, against the best in-process CUDA "
        f"fp32 figure above ({served['cuda_limit_rows_per_s']:.0f} rows/s):",
    ]
    for measured in served["configs"]:
        lines += [
            "",
            f"`{measured['name']}`: settings `{json.dumps(measured['settings'])}`, providers used "
            f"{measured['providers_used']}, served answer vs CPU fp32: max abs diff {measured['max_abs_diff']:.1e}"
            f"{_slowest_first_run(measured)}.",
            "",
            "| concurrency | rows per request | rows/s | x CUDA limit | p50 ms | p99 ms | server CPU ms per request | errors |",
            "|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for point in measured["points"]:
            lines.append(
                f"| {point['concurrency']} | {point['rows_per_request']} | {point['rows_per_s']:.0f} | "
                f"{point['x_cuda_limit']:.2f} | {point['p50_ms']:.2f} | {point['p99_ms']:.2f} | "
                f"{point['server_cpu_ms_per_request']} | {point['errors']} |"
            )
    return lines + _frontend_lines(served.get("frontends")) + _input_lines(served.get("inputs")) + _goal_lines(served)


def _goal_lines(served: dict) -> list[str]:
    if not served.get("goals"):
        return []
    lines = [
        "",
        "Goals of this run (issue 46), each a ratio from this one run:",
        "",
        "| goal | target | value | met |",
        "|---|---|---:|---|",
    ]
    return lines + [
        f"| {goal['goal']} | {goal['target']} | {goal['value']} | {'yes' if goal['met'] else 'no'} |" for goal in served["goals"]
    ]


def _input_lines(inputs: dict | None) -> list[str]:
    """The fp32-vs-uint8 table: the same images, the bytes each row costs, and how much of the GPU survives."""
    if not inputs:
        return []
    if inputs["status"] != "measured":
        return ["", f"Inputs, fp32 vs uint8: {inputs['reason']}."]
    first = inputs["points"][0]
    lines = [
        "",
        f"Inputs: the same images as float32 rows and as uint8 pixels normalised in the graph, `{inputs['config']}` "
        f"settings, gRPC concurrency {first['concurrency']}, {first['rows_per_request']} row per request:",
        "",
        "| input | bytes per row | rows/s | x CUDA limit | p50 ms | p99 ms | server CPU ms per request | max abs diff | errors |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for point in inputs["points"]:
        lines.append(
            f"| {point['input']} | {point['bytes_per_row']:,} | {point['rows_per_s']:.0f} | {point['x_cuda_limit']:.2f} | "
            f"{point['p50_ms']:.2f} | {point['p99_ms']:.2f} | {point['server_cpu_ms_per_request']} | "
            f"{point['max_abs_diff']:.1e} | {point['errors']} |"
        )
    return lines


def _frontend_lines(frontends: dict | None) -> list[str]:
    """Each front-end count at the saturating point under the defaults, and the count chosen."""
    if not frontends:
        return []
    if frontends["status"] != "measured":
        return ["", f"Front ends: {frontends['reason']}."]
    first = frontends["points"][0]
    lines = [
        "",
        f"Front ends: N serving processes feeding one session host (`{frontends['config']}` settings), gRPC "
        f"concurrency {first['concurrency']} on as many connections from several client processes, "
        f"{first['rows_per_request']} row per request; chosen: {frontends['chosen']} (the fewest within 5% of the "
        "fastest):",
        "",
        "| front ends | rows/s | x CUDA limit | p50 ms | p99 ms | server CPU ms per request | client CPU ms per request | errors |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for point in frontends["points"]:
        lines.append(
            f"| {point['frontends']} | {point['rows_per_s']:.0f} | {point['x_cuda_limit']:.2f} | {point['p50_ms']:.2f} | "
            f"{point['p99_ms']:.2f} | {point['server_cpu_ms_per_request']} | {point['client_cpu_ms_per_request']} | "
            f"{point['errors']} |"
        )
    return lines


def _slowest_first_run(measured: dict) -> str:
    first_runs = measured.get("warm_up_first_run_ms") or []
    if not first_runs:
        return ""
    slowest = max(first_runs, key=lambda entry: entry["first_ms"])
    return (
        f"; slowest first run at warm-up {slowest['first_ms']:.0f} ms ({slowest['rows']} rows on "
        f"{slowest['thread']}, {len(first_runs)} first runs)"
    )


NOT_MEASURED = "not measured"


def _configuration(row: dict) -> tuple:
    """What a bar stands for, the batch aside: provider, precision, IOBinding, CUDA graph."""
    return row["provider"], row["precision"], row.get("io_binding"), bool(row.get("cuda_graph"))


def _bars(payload: dict, batch: int) -> list[tuple[str, dict]]:
    """The bars of one batch, CPU then CUDA then TensorRT: every measured row, and one marked bar for each
    configuration that was not (a TensorRT that fell back, a provider this build lacks): a missing bar would read
    as "not tried". A report without any TensorRT row gets one marked bar saying so."""
    bars, seen = [], set()
    for row in payload["rows"]:
        if row["status"] == "measured" and row["batch"] != batch:
            continue
        if row["status"] != "measured" and row.get("batch", batch) != batch:
            continue
        if _configuration(row) in seen:
            continue
        seen.add(_configuration(row))
        io = f" io={row['io_binding']}" if row.get("io_binding") else ""
        bars.append((f"{_provider_label(row)}\n{row['precision']}{io}", row))
    if not any(row["provider"] == TENSORRT for _, row in bars):
        bars.append(("TensorRT", {"provider": TENSORRT, "status": NOT_MEASURED, "reason": "no TensorRT row in this report"}))
    order = {provider: index for index, provider in enumerate(PROVIDERS)}
    return sorted(bars, key=lambda bar: order.get(bar[1]["provider"], len(order)))


def draw(payload: dict):
    """The figure, not saved: rows/s per configuration on a linear axis (the figures are read against each other:
    a log axis shrinks CUDA's 8x over CPU to a step), one panel per batch size, each bar labelled with its value,
    and each configuration that was not measured drawn as an empty slot saying why."""
    from slipway.plots import pyplot

    plt = pyplot()
    batches = sorted({row["batch"] for row in payload["rows"] if row["status"] == "measured"}) or [1]
    panels = [_bars(payload, batch) for batch in batches]
    width = max(8.0, 0.62 * max(len(bars) for bars in panels))
    figure, axes = plt.subplots(1, len(batches), figsize=(width * len(batches), 5.2), squeeze=False)
    colours = {CPU: "tab:blue", CUDA: "tab:green", TENSORRT: "tab:orange"}
    for axis, batch, bars in zip(axes[0], batches, panels):
        heights = [row["rows_per_s"] if row["status"] == "measured" else 0.0 for _, row in bars]
        drawn = axis.bar(range(len(bars)), heights, color=[colours.get(row["provider"], "tab:gray") for _, row in bars])
        top = max(heights, default=0.0) or 1.0
        for index, (bar, (_, row)) in enumerate(zip(drawn, bars)):
            if row["status"] == "measured":
                axis.annotate(
                    f"{row['rows_per_s']:,.0f}",
                    (index, bar.get_height()),
                    ha="center",
                    va="bottom",
                    fontsize=6,
                    xytext=(0, 2),
                    textcoords="offset points",
                )
            else:
                status = NOT_MEASURED if row["status"] == NOT_MEASURED else f"{NOT_MEASURED} ({row['status']})"
                axis.text(
                    index,
                    top * 0.02,
                    status,
                    rotation=90,
                    ha="center",
                    va="bottom",
                    fontsize=7,
                    color=colours.get(row["provider"], "tab:gray"),
                    gid="not-measured",
                )
        axis.set_xticks(range(len(bars)))
        axis.set_xticklabels([label for label, _ in bars], fontsize=7, rotation=60, ha="right")
        axis.set_ylabel("rows per second")
        axis.set_ylim(0, top * 1.12)
        axis.set_title(f"batch {batch} ({payload.get('gpu') or 'no GPU'})")
        from matplotlib.patches import Patch

        axis.legend(
            handles=[Patch(color=colour, label=_provider_label({"provider": provider})) for provider, colour in colours.items()],
            fontsize=7,
            loc="upper left",
        )
    return figure


def plot(payload: dict, path: Path) -> None:
    """Draw the GPU benchmark's figure and write it as a PNG."""
    from slipway.plots import save_png

    save_png(draw(payload), path)
