"""`make bench-gpu`, served: the model through the real MLServer runtime on one provider.

On a GPU a MobileNetV2 run takes well under a millisecond, so what limits a server is each
request's CPU work (gRPC, MLServer, the Python client), not the GPU. This measures how much
of the in-process throughput survives being served, at a few concurrencies and request
sizes, and checks a served answer against CPU fp32's for the same row.
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
from wrappers.request_bodies import rest_body
from wrappers.server import LocalServer

# (concurrency, rows per request): single rows as most clients send them, and small batches
# (4 MobileNetV2 rows are 2.4 MB: under gRPC's default 4 MB message limit, which MLServer keeps)
POINTS = ((1, 1), (8, 1), (32, 1), (8, 4))


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


def _rest_answer(url: str, inputs: dict[str, np.ndarray]) -> np.ndarray:
    """The first output of one V2 JSON request, shaped as the server says."""
    request = urllib.request.Request(url, data=rest_body(inputs), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as response:
        output = json.load(response)["outputs"][0]
    return np.asarray(output["data"], dtype=np.float64).reshape(output["shape"])
