"""`make bench-gpu`: one model on CPU vs CUDA vs TensorRT, fp32/fp16/int8, with and without IOBinding.

A prepared script for a machine with an NVIDIA GPU and `make setup GPU=1`: it measures
rows/s and p50 latency at batch 1 and 32 for every (provider, precision, IOBinding) and
writes reports/gpu.json, reports/gpu.png and the README's GPU table. Where a provider is
missing it still runs: those rows say "unavailable" and why, and the CPU rows are measured,
so the same command checks the fallback paths on any machine.

Precisions: fp32 is the model as exported; fp16 is converted with float16 weights and
float32 inputs/outputs (onnxconverter-common), and for TensorRT it is TensorRT's own fp16
mode on the fp32 graph; int8 is a static QDQ graph with symmetric int8 activations and
per-channel weights (what TensorRT 10 reads its scales from), calibrated on synthetic rows.
"""

from __future__ import annotations

import logging
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from wrappers.session import CPU, CUDA, TENSORRT, SessionRunner, create_session
from wrappers.settings import RuntimeSettings

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


def gpu_name() -> str | None:
    """The GPU's name from nvidia-smi, or None where there is none."""
    if shutil.which("nvidia-smi") is None:
        return None
    result = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True)
    return result.stdout.strip().splitlines()[0] if result.returncode == 0 and result.stdout.strip() else None


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
            str(fp32), str(staging), Synthetic(), quant_format=QuantFormat.QDQ, per_channel=True,
            activation_type=QuantType.QInt8, weight_type=QuantType.QInt8,
            extra_options={"ActivationSymmetric": True, "WeightSymmetric": True},
        )
        staging.replace(out)
    return out


def _variant(precision: str, provider: str, config: GpuBenchConfig, input_name: str, row_shape) -> tuple[Path, dict]:
    """The graph file and TensorRT options for one (precision, provider)."""
    trt = {
        "engine_cache_path": str(config.work_dir / "trt-engines"),
        "timing_cache_path": str(config.work_dir / "trt-timing"),
        "extra_options": _trt_profiles(input_name, row_shape, max(config.batch_sizes)),
    }
    if precision == "fp32":
        return config.model, trt
    if precision == "fp16":
        if provider == TENSORRT:  # TensorRT picks fp16 kernels itself from the fp32 graph
            return config.model, {**trt, "fp16": True}
        return fp16_model(config.model, config.work_dir / "model.fp16.onnx"), trt
    path = int8_model(config.model, config.work_dir / "model.int8.onnx", input_name, row_shape)
    return path, {**trt, "int8": True}


def _trt_profiles(input_name: str, row_shape, max_batch: int) -> dict[str, str]:
    dims = "x".join(str(dim) for dim in row_shape)
    return {
        "trt_profile_min_shapes": f"{input_name}:1x{dims}",
        "trt_profile_opt_shapes": f"{input_name}:{max_batch}x{dims}",
        "trt_profile_max_shapes": f"{input_name}:{max_batch}x{dims}",
    }


def measure(runner: SessionRunner, feeds: dict[str, np.ndarray], seconds: float, warmup_runs: int) -> dict:
    """Rows/s and latency percentiles of back-to-back runs (the first run, engine builds included, apart)."""
    output_names = [output.name for output in runner.session.get_outputs()]
    started = time.perf_counter()
    runner.run(output_names, feeds)
    first_run_s = time.perf_counter() - started
    for _ in range(warmup_runs):
        runner.run(output_names, feeds)
    latencies = []
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline and len(latencies) < MAX_RUNS:
        started = time.perf_counter()
        runner.run(output_names, feeds)
        latencies.append(time.perf_counter() - started)
    rows = next(iter(feeds.values())).shape[0]
    return {
        "rows_per_s": round(rows * len(latencies) / sum(latencies), 2),
        "p50_ms": round(1000 * float(np.percentile(latencies, 50)), 3),
        "p99_ms": round(1000 * float(np.percentile(latencies, 99)), 3),
        "first_run_s": round(first_run_s, 3),
        "runs": len(latencies),
    }


def run_gpu_bench(config: GpuBenchConfig, on_step=None) -> dict:
    """Every (provider, precision, IOBinding, batch) row; unavailable ones say why instead of failing."""
    import onnxruntime as ort

    config.work_dir.mkdir(parents=True, exist_ok=True)
    available = ort.get_available_providers()
    probe = ort.InferenceSession(str(config.model), providers=[CPU])
    model_input = probe.get_inputs()[0]
    row_shape = tuple(model_input.shape[1:])
    if not all(isinstance(dim, int) for dim in row_shape):
        raise ValueError(f"input {model_input.name} has dynamic dimensions {model_input.shape}: give a fixed-size model")
    rows = []
    for provider in PROVIDERS:
        for precision in PRECISIONS:
            base = {"provider": provider, "precision": precision}
            if provider not in available:
                rows.append({**base, "status": "unavailable",
                             "reason": f"this onnxruntime build has {available} (install onnxruntime-gpu: make setup GPU=1)"})
                _advance(on_step, 2 * len(config.batch_sizes))
                continue
            try:
                path, trt = _variant(precision, provider, config, model_input.name, row_shape)
                settings = RuntimeSettings(providers=[provider], tensorrt=trt)
                session = create_session(path, settings)
            except ImportError as err:
                rows.append({**base, "status": "skipped", "reason": f"{err.name} is not installed (it builds the {precision} graph)"})
                _advance(on_step, 2 * len(config.batch_sizes))
                continue
            used = session.get_providers()
            if used[0] != provider:
                rows.append({**base, "status": "fell back", "providers_used": used,
                             "reason": f"{provider} could not run this graph; see the log for why"})
                _advance(on_step, 2 * len(config.batch_sizes))
                continue
            for io_binding in ("off", "on"):
                runner = SessionRunner(session, io_binding=io_binding)
                for batch in config.batch_sizes:
                    feeds = {model_input.name: np.random.default_rng(0).uniform(-1, 1, (batch, *row_shape)).astype(np.float32)}
                    try:
                        figures = measure(runner, feeds, config.seconds, config.warmup_runs)
                        rows.append({**base, "io_binding": io_binding, "batch": batch, "status": "measured", **figures})
                    except Exception as err:  # one failing kernel must not lose the other rows
                        rows.append({**base, "io_binding": io_binding, "batch": batch, "status": "failed", "reason": str(err)})
                    _advance(on_step, 1)
    return {
        "model": str(config.model),
        "gpu": gpu_name(),
        "available_providers": available,
        "onnxruntime": ort.__version__,
        "config": {"batch_sizes": list(config.batch_sizes), "seconds": config.seconds, "warmup_runs": config.warmup_runs},
        "rows": rows,
    }


def _advance(on_step, steps: int) -> None:
    if on_step:
        on_step(steps)


def markdown(payload: dict) -> str:
    """The GPU table for the README."""
    gpu = payload["gpu"] or "no GPU on the machine that ran it"
    lines = [
        f"`make bench-gpu` on {gpu} (onnxruntime {payload['onnxruntime']}), rows/s and p50 ms per run:",
        "",
        "| provider | precision | IOBinding | batch | rows/s | p50 ms | status |",
        "|---|---|---|---:|---:|---:|---|",
    ]
    for row in payload["rows"]:
        lines.append(
            f"| {row['provider'].removesuffix('ExecutionProvider')} | {row['precision']} | {row.get('io_binding', '')} | "
            f"{row.get('batch', '')} | {row.get('rows_per_s', '')} | {row.get('p50_ms', '')} | "
            f"{row['status']}{': ' + row['reason'] if row.get('reason') else ''} |"
        )
    return "\n".join(lines) + "\n"


def plot(payload: dict, path: Path) -> None:
    """Rows/s per configuration, one bar group per batch size."""
    from slipway.plots import pyplot, save_png

    plt = pyplot()

    measured = [row for row in payload["rows"] if row["status"] == "measured"]
    batches = sorted({row["batch"] for row in measured})
    figure, axes = plt.subplots(1, max(1, len(batches)), figsize=(7 * max(1, len(batches)), 4.5), squeeze=False)
    for axis, batch in zip(axes[0], batches):
        chosen = [row for row in measured if row["batch"] == batch]
        labels = [f"{r['provider'].removesuffix('ExecutionProvider')}\n{r['precision']} io={r['io_binding']}" for r in chosen]
        axis.bar(range(len(chosen)), [row["rows_per_s"] for row in chosen])
        axis.set_xticks(range(len(chosen)))
        axis.set_xticklabels(labels, fontsize=7, rotation=60)
        axis.set_ylabel("rows per second")
        axis.set_title(f"batch {batch} ({payload['gpu'] or 'no GPU'})")
    save_png(figure, path)
