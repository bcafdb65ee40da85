"""The benchmark's models, built once and cached under build/bench so re-runs start at once.

- digits: the demo's artifact when `make demo` made one, else trained and converted here
  (through `python -m export`, in its own process);
- mobilenetv2: the export step's fp32 artifact when it exists (`make export MODEL=mobilenetv2`), else built here by
  `python -m benchmarks.mobilenet` (TensorFlow, in its own process: this one may
  not import TensorFlow beside ONNX Runtime and the servers).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from slipway.artifact import MODEL_FILE, SETTINGS_FILE, load_input_example, write_manifest
from slipway.paths import BUILD_DIR, DEMO_ARTIFACT_DIR, PROJECT_ROOT

BENCH_DIR = BUILD_DIR / "bench"
EXPORTED_MOBILENET = BUILD_DIR / "variants" / "mobilenetv2" / "fp32"  # `make export MODEL=mobilenetv2`


@dataclass(frozen=True)
class BenchModel:
    """One model to measure: its graph, one input row and where that graph came from."""

    name: str
    onnx_path: Path
    input_name: str
    row: np.ndarray  # one input row with its batch axis: shape (1, ...)
    source: str

    def batch(self, rows: int) -> np.ndarray:
        return np.repeat(self.row, rows, axis=0)


def _run(args: list[str], what: str) -> None:
    env = {**os.environ, "SLIPWAY_REPORTS_DIR": str(BENCH_DIR / "reports")}  # keep the demo's reports as they are
    result = subprocess.run([sys.executable, *args], cwd=PROJECT_ROOT, env=env, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"{what} failed:\n{result.stdout[-2000:]}\n{result.stderr[-2000:]}")


def digits_model() -> BenchModel:
    """The digits CNN, with a held-out image from its artifact as the request."""
    folder = DEMO_ARTIFACT_DIR
    source = f"the demo's artifact ({folder})"
    if not (folder / MODEL_FILE).is_file():
        folder = BENCH_DIR / "digits"
        source = f"trained and converted for the benchmark ({folder})"
        if not (folder / MODEL_FILE).is_file():
            _run(["-m", "export", "train", "--out", str(BENCH_DIR / "train")], "training the digits CNN")
            _run(
                ["-m", "export", "convert", "--model", str(BENCH_DIR / "train" / "model.keras"), "--out", str(folder)],
                "converting the digits CNN",
            )
    inputs, _, _ = load_input_example(folder)
    name, rows = next(iter(inputs.items()))
    return BenchModel("digits", folder / MODEL_FILE, name, rows[:1].astype(np.float32), source)


def mobilenet_model() -> BenchModel:
    """MobileNetV2 fp32 (random weights: speed does not depend on them), with a synthetic image."""
    if (EXPORTED_MOBILENET / MODEL_FILE).is_file():
        path, source = EXPORTED_MOBILENET / MODEL_FILE, f"the export step's fp32 artifact ({EXPORTED_MOBILENET})"
    else:
        path = BENCH_DIR / "mobilenetv2.onnx"
        source = f"keras.applications.MobileNetV2(weights=None) built for the benchmark ({path})"
        if not path.is_file():
            _run(["-m", "benchmarks.mobilenet", "--out", str(path)], "building MobileNetV2")
    import onnxruntime as ort

    graph_input = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).get_inputs()[0]
    row = np.random.default_rng(0).uniform(-1, 1, (1, *graph_input.shape[1:])).astype(np.float32)
    return BenchModel("mobilenetv2", path, graph_input.name, row, source)


MODELS = {"digits": digits_model, "mobilenetv2": mobilenet_model}


def server_folder(root: Path, model: BenchModel, runtime: str, implementation: str, extra: dict | None) -> Path:
    """A one-model MLServer folder under `root` serving `model` with `implementation`, with a manifest."""
    folder = root / f"{model.name}-{runtime}"
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    try:
        os.link(model.onnx_path, folder / MODEL_FILE)
    except OSError:
        shutil.copyfile(model.onnx_path, folder / MODEL_FILE)
    parameters: dict = {"uri": f"./{MODEL_FILE}"}
    if extra is not None:
        parameters["extra"] = extra
    settings = {"name": model.name, "implementation": implementation, "parameters": parameters}
    (folder / SETTINGS_FILE).write_text(json.dumps(settings, indent=2) + "\n")
    write_manifest(folder)
    return folder
