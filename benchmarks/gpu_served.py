"""`make bench-gpu`, served: the model through the real MLServer runtime on one provider.

On a GPU a MobileNetV2 run takes a millisecond or less, so what limits a server is each request's CPU work (gRPC,
MLServer, the Python client), not the GPU. This measures how much of the in-process throughput survives being
served: Slipway's defaults (everything chosen at load: a session per bucket, the kernels' settings timed, merging
up to 32 rows on two run slots) and the record's merging settings, at a few concurrencies and request sizes, each
answer checked against CPU fp32's for the same row. Then, at gRPC concurrency 32 with 1-row requests, the defaults
served by 1, 2, 4 and 8 front ends (`wrappers.frontends`: N event loops decoding, one session host merging their
rows), the fastest count chosen; and at that count the same images sent as the float32 rows the exported graph
takes and as uint8 pixels to a copy of the graph that normalises them itself (`export.uint8_input`, 4x fewer
bytes). Loads of 8 clients or more come from several client processes (`benchmarks.client_processes`): one Python
client cannot send what several front ends answer.
"""

from __future__ import annotations

import json
import re
import urllib.request
from pathlib import Path

import numpy as np

from benchmarks.client_processes import run_load as run_load_from_processes
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
DEFAULTS = "defaults"  # the served settings the front ends and inputs are compared under
FRONTEND_COUNTS = (1, 2, 4, 8)
NEAR_BEST = 0.95  # fewer front ends within this share of the fastest count's rows/s are chosen: less CPU
CLIENTS_PER_PROCESS = 4  # a client process's event loop queues its calls' answers: few calls each, many processes
MAX_CLIENT_PROCESSES = 8
# uint8 pixels 0..255 to the bench rows' float range -1..1 (what MobileNetV2's preprocessing gives)
PIXELS = Normalisation(scale=2 / 255, mean=(1.0,), std=(1.0,))


def load(server, model: str, inputs: dict, concurrency: int, seconds: float, **options):
    """A gRPC load from as many client processes as `client_processes` gives (this process alone for one)."""
    processes = client_processes(concurrency)
    if processes == 1:
        return run_load(
            protocol=GRPC, server=server, model=model, inputs=inputs, concurrency=concurrency, seconds=seconds, **options
        )
    return run_load_from_processes(
        server=server, model=model, inputs=inputs, concurrency=concurrency, seconds=seconds, processes=processes, **options
    )


def client_processes(concurrency: int) -> int:
    """Client processes for a load: one client process's CPU caps what it sends, and the answers of the calls it has
    in flight wait for its one event loop in turn."""
    return max(1, min(MAX_CLIENT_PROCESSES, concurrency // CLIENTS_PER_PROCESS))


def input_plan() -> list[tuple[str, int, int]]:
    """(input kind, concurrency, rows per request) of the input comparison, in the order measured."""
    return [(kind, *INPUT_POINT) for kind in INPUT_KINDS]


def frontends_plan() -> list[tuple[int, int, int]]:
    """(front ends, concurrency, rows per request) of the front-end comparison, in the order loaded."""
    return [(count, *INPUT_POINT) for count in FRONTEND_COUNTS]


def chosen_frontends(points: list[dict]) -> int:
    """The fewest front ends that serve within `NEAR_BEST` of the fastest count's rows/s (1 where none was measured)."""
    measured = [point for point in points if point.get("requests")]
    if not measured:
        return 1
    best = max(point["rows_per_s"] for point in measured)
    return min(point["frontends"] for point in measured if point["rows_per_s"] >= NEAR_BEST * best)


def measure_frontends(model: BenchModel, settings: dict, *, seconds: float, work_dir: Path, on_step=None) -> dict:
    """Served rows/s, p99 and server CPU (every process of the server counted) of each front-end count at
    `INPUT_POINT`, one server at a time, one connection per client; the count chosen."""
    concurrency, rows = INPUT_POINT
    inputs = {model.input_name: model.batch(rows)}
    points = []
    for count in FRONTEND_COUNTS:
        folder = server_folder(
            Path(work_dir) / "frontends", model, f"frontends-{count}", IMPLEMENTATIONS[SLIPWAY], {**settings, "frontends": count}
        )
        with LocalServer(folder) as server:
            result = load(server, model.name, inputs, concurrency, seconds, process_tree=True, channels=concurrency)
        points.append({"frontends": count, **result.summary()})
        if on_step:
            on_step(1)
    return {"status": "measured", "config": DEFAULTS, "settings": settings, "points": points, "chosen": chosen_frontends(points)}


def served_configs(provider: str) -> dict[str, dict]:
    """The runtime's settings to serve with, by name: Slipway's defaults on the provider (all else chosen at load),
    and the record's merging settings (two run slots, up to 32 rows merged), which collapsed on one session."""
    return {
        DEFAULTS: {"providers": [provider]},
        "merging": {"providers": [provider], "max_batch_rows": 32, "inference_threads": 2},
    }


def measure_served(
    model: BenchModel, name: str, settings: dict, expected_first_row: np.ndarray, *, seconds: float, work_dir: Path, on_step=None
) -> dict:
    """Served rows/s over gRPC at each point, the providers the server says it uses, and the answer's error."""
    folder = server_folder(work_dir, model, name, IMPLEMENTATIONS[SLIPWAY], settings)
    with LocalServer(folder) as server:
        answer = _rest_answer(f"{server.http_url}/v2/models/{model.name}/infer", {model.input_name: model.row})
        log = server.log_path.read_text(errors="replace")
        found = re.findall(r"uses providers (\[[^\]]*\])", log)
        points = []
        parameters = _metadata_parameters(f"{server.http_url}/v2/models/{model.name}")
        for concurrency, rows in POINTS:
            result = load(
                server, model.name, {model.input_name: model.batch(rows)}, concurrency, seconds, channels=min(concurrency, 8)
            )
            points.append(result.summary())
            if on_step:
                on_step(1)
    return {
        "name": name,
        "settings": settings,
        "providers_used": found[-1] if found else "not in the server's log",
        "chosen_at_load": parameters,
        # what each run slot's first run of each batch size cost at load: the stall that warm-up absorbs
        "warm_up_first_run_ms": [
            {"rows": int(rows), "thread": thread, "first_ms": float(first)}
            for rows, first, thread in re.findall(
                r"warmed up \S+ at batch size (\d+): \S+ ms per run \(first (\d+) ms, thread ([^)]+)\)", log
            )
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
    return {
        "fp32": BenchModel(model.name, model.onnx_path, model.input_name, floats, model.source),
        "uint8": BenchModel(model.name, path, model.input_name, pixels, f"{model.source}, uint8 input"),
    }


def measure_inputs(model: BenchModel, settings: dict, *, seconds: float, work_dir: Path, on_step=None) -> dict:
    """Served rows/s, p99 and the answer for fp32 and uint8 inputs at `INPUT_POINT`, one server each, the same images
    (`settings` may name several front ends: every process of the server is counted)."""
    import onnxruntime as ort

    models = input_models(model, work_dir)
    reference = ort.InferenceSession(str(model.onnx_path), providers=["CPUExecutionProvider"])
    expected = reference.run(None, {model.input_name: models["fp32"].row})[0].astype(np.float64)
    points = []
    for kind, concurrency, rows in input_plan():
        bench = models[kind]
        folder = server_folder(work_dir, bench, f"{DEFAULTS}-{kind}", IMPLEMENTATIONS[SLIPWAY], settings)
        with LocalServer(folder) as server:
            answer = _rest_answer(f"{server.http_url}/v2/models/{bench.name}/infer", {bench.input_name: bench.row})
            result = load(
                server,
                bench.name,
                {bench.input_name: bench.batch(rows)},
                concurrency,
                seconds,
                process_tree=True,
                channels=concurrency,
            )
        points.append(
            {
                "input": kind,
                "bytes_per_row": int(bench.row.nbytes),
                **result.summary(),
                "max_abs_diff": float(np.max(np.abs(answer - expected))),
            }
        )
        if on_step:
            on_step(1)
    return {"status": "measured", "config": DEFAULTS, "settings": settings, "points": points}


def _rest_answer(url: str, inputs: dict[str, np.ndarray]) -> np.ndarray:
    """The first output of one V2 JSON request, shaped as the server says."""
    request = urllib.request.Request(url, data=rest_body(inputs), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as response:
        output = json.load(response)["outputs"][0]
    return np.asarray(output["data"], dtype=np.float64).reshape(output["shape"])


def _metadata_parameters(url: str) -> dict:
    """The model's V2 metadata parameters: the settings chosen at load and where each came from."""
    with urllib.request.urlopen(url, timeout=60) as response:
        return json.load(response).get("parameters") or {}
