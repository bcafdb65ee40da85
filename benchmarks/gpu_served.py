"""`make bench-gpu`, served: the model through the real MLServer runtime on one provider.

On a GPU a MobileNetV2 run takes well under a millisecond, so what limits a server is each
request's CPU work (gRPC, MLServer, the Python client), not the GPU. This measures how much
of the in-process throughput survives being served, at a few concurrencies and request
sizes, and checks a served answer against CPU fp32's for the same row. Then the same images sent
two ways at the point the GPU record found the loop saturated (gRPC concurrency 32, 1-row requests):
as the float32 rows the exported graph takes, and as uint8 pixels to a copy of the graph that
normalises them itself (`export.uint8_input`, 4x fewer bytes per row). Last, at that same point, one
front end against N (`wrappers.frontends`: N event loops decoding, one session host merging their rows),
side by side through one gRPC connection per client (`benchmarks.frontends.side_by_side`).
"""

from __future__ import annotations

import json
import re
import urllib.request
from pathlib import Path

import numpy as np

from benchmarks.load import GRPC, run_load
from benchmarks.models import BenchModel, server_folder
from benchmarks.run import IMPLEMENTATIONS, SLIPWAY
from export.uint8_input import Normalisation, image_input, with_uint8_input
from slipway.local_server import LocalServer
from slipway.v2_requests import rest_body

# (concurrency, rows per request): single rows as most clients send them, and small batches
# (4 MobileNetV2 rows are 2.4 MB: under gRPC's default 4 MB message limit, which MLServer keeps)
POINTS = ((1, 1), (8, 1), (32, 1), (8, 4))
INPUT_KINDS = ("fp32", "uint8")
INPUT_POINT = (32, 1)  # gRPC concurrency, rows per request: where one event loop saturated on the H200
INPUT_CONFIG = "cuda-graph"  # the served settings the inputs are compared under (the record's best at 1 row)
FRONTENDS_CONFIG = "merging"  # the settings both servers of the front-end comparison get, but `frontends`
FRONTENDS_ROUNDS = 2  # loads per server, the two in turns
# uint8 pixels 0..255 to the bench rows' float range -1..1 (what MobileNetV2's preprocessing gives)
PIXELS = Normalisation(scale=2 / 255, mean=(1.0,), std=(1.0,))


def input_plan() -> list[tuple[str, int, int]]:
    """(input kind, concurrency, rows per request) of the input comparison, in the order measured."""
    return [(kind, *INPUT_POINT) for kind in INPUT_KINDS]


def frontends_plan(frontends: int) -> list[tuple[int, int, int]]:
    """(front ends, concurrency, rows per request) of the front-end comparison, in the order loaded."""
    return [(count, *INPUT_POINT) for _ in range(FRONTENDS_ROUNDS) for count in (1, frontends)]


def measure_frontends(model: BenchModel, settings: dict, *, frontends: int, seconds: float, work_dir: Path,
                      on_step=None) -> dict:
    """Served rows/s and p99 of one front end and of `frontends`, at `INPUT_POINT`: per server its median round."""
    from benchmarks.frontends import side_by_side

    concurrency, rows = INPUT_POINT
    compared = side_by_side(model, settings, frontends=frontends, concurrency=concurrency, seconds=seconds,
                            rounds=FRONTENDS_ROUNDS, work_dir=Path(work_dir) / "frontends", rows=rows, on_step=on_step)
    points = []
    for count, measured in compared["points"].items():
        ranked = sorted(measured["rounds"], key=lambda summary: summary["rows_per_s"])
        points.append({"frontends": int(count), **ranked[(len(ranked) - 1) // 2]})
    return {"status": "measured", "config": FRONTENDS_CONFIG, "settings": settings, "frontends": frontends,
            "ratio_rounds": compared["ratio_rounds"], "ratio_median": compared["ratio_median"], "points": points}


def served_configs(provider: str) -> dict[str, dict]:
    """The runtime's settings to serve with, by name: merging queued requests on two run slots (each
    run padded to a power of two, the GPU default), and one CUDA graph replayed for runs of 8 rows."""
    return {
        "merging": {"providers": [provider], "max_batch_rows": 32, "inference_threads": 2},
        "cuda-graph": {"providers": [provider], "max_batch_rows": 8, "batch_buckets": [8],
                       "cuda": {"enable_cuda_graph": True}},
    }


def measure_served(model: BenchModel, name: str, settings: dict, expected_first_row: np.ndarray, *, seconds: float,
                   work_dir: Path, on_step=None) -> dict:
    """Served rows/s over gRPC at each point, the providers the server says it uses, and the answer's error."""
    folder = server_folder(work_dir, model, name, IMPLEMENTATIONS[SLIPWAY], settings)
    with LocalServer(folder) as server:
        answer = _rest_answer(f"{server.http_url}/v2/models/{model.name}/infer", {model.input_name: model.row})
        log = server.log_path.read_text(errors="replace")
        found = re.findall(r"uses providers (\[[^\]]*\])", log)
        points = []
        for concurrency, rows in POINTS:
            result = run_load(protocol=GRPC, server=server, model=model.name,
                              inputs={model.input_name: model.batch(rows)}, concurrency=concurrency, seconds=seconds)
            points.append(result.summary())
            if on_step:
                on_step(1)
    return {
        "name": name,
        "settings": settings,
        "providers_used": found[-1] if found else "not in the server's log",
        # what each run slot's first run of each batch size cost at load: the stall that warm-up absorbs
        "warm_up_first_run_ms": [
            {"rows": int(rows), "thread": thread, "first_ms": float(first)}
            for rows, first, thread in re.findall(r"warmed up \S+ at batch size (\d+): \S+ ms per run \(first (\d+) ms, thread ([^)]+)\)", log)
        ],
        "max_abs_diff": float(np.max(np.abs(answer.astype(np.float64) - expected_first_row))),
        "points": points,
    }


def input_models(model: BenchModel, work_dir: Path) -> dict[str, BenchModel]:
    """The same image both ways: float32 rows for the graph as exported, uint8 pixels for its copy that normalises
    them (cached in `work_dir`). Raises `Uint8InputError` for a graph whose input is not an image."""
    import onnx

    from slipway import atomic

    graph = onnx.load(model.onnx_path)
    image = image_input(graph, model.input_name)
    path = Path(work_dir) / f"{model.onnx_path.stem}.uint8.onnx"
    if not path.is_file():
        atomic.write_bytes(path, with_uint8_input(graph, PIXELS, image.name).SerializeToString())
    pixels = PIXELS.invert(model.row, image.channels_last)
    floats = PIXELS.apply(pixels, image.channels_last).astype(np.float32)
    return {"fp32": BenchModel(model.name, model.onnx_path, model.input_name, floats, model.source),
            "uint8": BenchModel(model.name, path, model.input_name, pixels, f"{model.source}, uint8 input")}


def measure_inputs(model: BenchModel, settings: dict, *, seconds: float, work_dir: Path, on_step=None) -> dict:
    """Served rows/s, p99 and the answer for fp32 and uint8 inputs at `INPUT_POINT`, one server each, the same images."""
    import onnxruntime as ort

    models = input_models(model, work_dir)
    reference = ort.InferenceSession(str(model.onnx_path), providers=["CPUExecutionProvider"])
    expected = reference.run(None, {model.input_name: models["fp32"].row})[0].astype(np.float64)
    points = []
    for kind, concurrency, rows in input_plan():
        bench = models[kind]
        folder = server_folder(work_dir, bench, f"{INPUT_CONFIG}-{kind}", IMPLEMENTATIONS[SLIPWAY], settings)
        with LocalServer(folder) as server:
            answer = _rest_answer(f"{server.http_url}/v2/models/{bench.name}/infer", {bench.input_name: bench.row})
            result = run_load(protocol=GRPC, server=server, model=bench.name, inputs={bench.input_name: bench.batch(rows)},
                              concurrency=concurrency, seconds=seconds)
        points.append({"input": kind, "bytes_per_row": int(bench.row.nbytes), **result.summary(),
                       "max_abs_diff": float(np.max(np.abs(answer - expected)))})
        if on_step:
            on_step(1)
    return {"status": "measured", "config": INPUT_CONFIG, "settings": settings, "points": points}


def _rest_answer(url: str, inputs: dict[str, np.ndarray]) -> np.ndarray:
    """The first output of one V2 JSON request, shaped as the server says."""
    request = urllib.request.Request(url, data=rest_body(inputs), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as response:
        output = json.load(response)["outputs"][0]
    return np.asarray(output["data"], dtype=np.float64).reshape(output["shape"])
