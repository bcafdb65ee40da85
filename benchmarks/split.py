"""`python -m benchmarks split`: the CPU/GPU split form through Seldon's real executor, against the one-pod form.

Per model, one artifact with both CPU stages (decode/resize/normalise, top-k) is served two ways, side by side
in alternating rounds on this machine: the one-pod form (one server does it all) and the split form as
`render --split cpu-gpu` deploys it, each role in a server of its own under the model's name
(`wrappers.roles.serve`), behind Seldon Core 1.17.1's executor running the same graph over V2 REST. Clients
send encoded images in V2 JSON. On one machine the split form pays its extra hops with the same cores: the figures are the hops' cost, not the
scaling gain (which needs the GPU pod and the CPU pods on machines of their own).

The executor is Seldon's Go binary, built from its v1.17.1 source (the module proxy does not serve it):
`git clone -b v1.17.1 https://github.com/SeldonIO/seldon-core; cd seldon-core/executor; cp -r ../operator
_operator; go build ./cmd/executor` (cgo: confluent-kafka-go), passed as --executor.
"""

from __future__ import annotations

import base64
import io
import json
import os
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import yaml

from benchmarks.load import REST, run_load
from benchmarks.models import BENCH_DIR, MODELS, BenchModel
from slipway.artifact import SETTINGS_FILE, write_manifest
from slipway.local_server import LocalServer
from slipway.ports import LOOPBACK, free_port
from wrappers.roles.serve import MODEL_ROLE, ROLES, write_role_folder

FORMS = ("one-pod", "split")
TOP_K = 5
READY_TIMEOUT_S = 60.0
# (model, encoded image size): digits' own 8x8 PNGs; MobileNetV2 gets 320x240 JPEGs, resized to 224x224
IMAGE_SIZES = {"digits": (8, 8), "mobilenetv2": (320, 240)}


class SplitBenchError(RuntimeError):
    """The split bench cannot run; the message says what to pass or fix."""


@dataclass(frozen=True)
class Endpoint:
    """What `benchmarks.load.run_load` loads: a V2 REST address and the process answering there."""

    http_url: str
    grpc_target: str
    pid: int


def artifact(model: BenchModel, root: Path) -> Path:
    """The model as one artifact with both CPU stages, named after the model."""
    folder = root / "artifact"
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    shutil.copyfile(model.onnx_path, folder / "model.onnx")
    extra = {
        "preprocess": {} if model.name == "digits" else {"scale": 2 / 255, "mean": [1.0]},
        "postprocess": {"k": TOP_K, "softmax": model.name == "digits"},
    }
    settings = {
        "name": model.name,
        "implementation": "wrappers.runtime.OnnxRuntime",
        "parameters": {"uri": "./model.onnx", "extra": extra},
    }
    (folder / SETTINGS_FILE).write_text(json.dumps(settings, indent=2) + "\n")
    write_manifest(folder)
    return folder


def encoded_images(model: BenchModel, count: int) -> np.ndarray:
    """`count` encoded images, base64 as V2 JSON carries BYTES: PNG for digits, JPEG for MobileNetV2."""
    from PIL import Image

    rng = np.random.default_rng(0)
    width, height = IMAGE_SIZES[model.name]
    images = []
    for _ in range(count):
        buffer = io.BytesIO()
        if model.name == "digits":
            Image.fromarray(np.round(model.row[0, ..., 0] * 255).astype(np.uint8)).save(buffer, format="PNG")
        else:
            Image.fromarray(rng.integers(0, 256, (height, width, 3), dtype=np.uint8)).save(buffer, format="JPEG")
        images.append(base64.b64encode(buffer.getvalue()).decode())
    return np.array(images, dtype=object)


def executor_graph(name: str, servers: dict[str, LocalServer]) -> dict:
    """The predictor `render --split cpu-gpu` renders, its nodes pointed at the role servers here."""

    def node(node_name: str, node_type: str, server: LocalServer, children: list[dict]) -> dict:
        return {
            "name": node_name,
            "type": node_type,
            "children": children,
            "endpoint": {"service_host": LOOPBACK, "httpPort": int(server.http_url.rsplit(":", 1)[1]), "type": "REST"},
        }

    graph = node(
        f"{name}-post",
        "OUTPUT_TRANSFORMER",
        servers["output-transformer"],
        [node(f"{name}-pre", "TRANSFORMER", servers["transformer"], [node(name, "MODEL", servers[MODEL_ROLE], [])])],
    )
    return {
        "apiVersion": "machinelearning.seldon.io/v1",
        "kind": "SeldonDeployment",
        "metadata": {"name": name, "namespace": "bench"},
        "spec": {"protocol": "v2", "predictors": [{"name": "default", "graph": graph, "componentSpecs": []}]},
    }


@contextmanager
def executor(binary: Path, sdep: dict, work: Path) -> Iterator[Endpoint]:
    """Seldon's executor on loopback running `sdep`'s graph; stopped by its PID."""
    path = work / "sdep.yaml"
    path.write_text(yaml.safe_dump(sdep))
    http_port, grpc_port = free_port(), free_port()
    log = (work / "executor.log").open("wb")
    process = subprocess.Popen(
        [
            str(binary),
            "--sdep",
            sdep["metadata"]["name"],
            "--namespace",
            "bench",
            "--predictor",
            "default",
            "--file",
            str(path),
            "--http_port",
            str(http_port),
            "--grpc_port",
            str(grpc_port),
            "--protocol",
            "v2",
            "--transport",
            "rest",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**os.environ, "ENGINE_SERVER_TIMEOUT": "60"},
    )
    try:
        yield Endpoint(f"http://{LOOPBACK}:{http_port}", f"{LOOPBACK}:{grpc_port}", process.pid)
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()


def infer(url: str, body: dict, timeout_s: float = 30.0) -> dict:
    request = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout_s) as response:
        return json.loads(response.read())


def first_answer(url: str, body: dict, log: Path) -> dict:
    """The first answer through the executor, polled while it starts (bounded in time)."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    while True:
        try:
            return infer(url, body)
        except (urllib.error.URLError, ConnectionError) as err:
            if time.monotonic() > deadline:
                tail = log.read_text(errors="replace")[-1500:] if log.is_file() else ""
                raise SplitBenchError(
                    f"the executor did not answer {url} within {READY_TIMEOUT_S:.0f}s ({err}):\n{tail}"
                ) from None
            time.sleep(0.25)


def same_answer(one_pod: dict, split: dict) -> bool:
    """Labels equal, scores equal to float32's precision (JSON carries them as text)."""
    first, second = ({o["name"]: o for o in answer["outputs"]} for answer in (one_pod, split))
    return (
        set(first) == set(second)
        and first["labels"]["data"] == second["labels"]["data"]
        and np.allclose(first["scores"]["data"], second["scores"]["data"], rtol=1e-6, atol=1e-7)
    )


def bench_model(
    model: BenchModel, binary: Path, *, rows: int, concurrency: list[int], seconds: float, rounds: int, work: Path
) -> dict:
    work.mkdir(parents=True, exist_ok=True)
    folder = artifact(model, work)
    for role in ROLES:  # each in a server of its own, under the model's name, as each pod serves it
        shutil.rmtree(work / role, ignore_errors=True)
        write_role_folder(folder, role, model.name, work / role)
    images = encoded_images(model, rows)
    body = {"inputs": [{"name": model.input_name, "datatype": "BYTES", "shape": [rows], "data": images.tolist()}]}
    points = []
    with ExitStack() as stack:
        one_pod = stack.enter_context(LocalServer(folder))
        servers = {role: stack.enter_context(LocalServer(work / role)) for role in ROLES}
        front = stack.enter_context(executor(binary, executor_graph(model.name, servers), work))
        path = f"/v2/models/{model.name}/infer"
        reference = infer(one_pod.http_url + path, body)
        through = first_answer(front.http_url + path, body, work / "executor.log")
        if not same_answer(reference, through):
            raise SplitBenchError(
                f"{model.name}: the split form answered {through['outputs']} but the one-pod form {reference['outputs']}"
            )
        targets = {"one-pod": one_pod, "split": front}
        for clients in concurrency:
            for round_index in range(rounds):  # alternating, so drift on the shared machine hits both forms
                for form in FORMS if round_index % 2 == 0 else FORMS[::-1]:
                    result = run_load(
                        protocol=REST,
                        server=targets[form],
                        model=model.name,
                        inputs={model.input_name: images},
                        concurrency=clients,
                        seconds=seconds,
                    )
                    points.append({"form": form, "round": round_index, **result.summary()})
    return {
        "model": model.name,
        "source": model.source,
        "rows_per_request": rows,
        "image_size": IMAGE_SIZES[model.name],
        "same_answer": True,
        "points": points,
        "summary": summarise(points),
    }


def summarise(points: list[dict]) -> list[dict]:
    """Per concurrency: each form's median round, and split/one-pod ratios of requests/s and p50."""
    out = []
    for clients in sorted({p["concurrency"] for p in points}):
        medians = {}
        for form in FORMS:
            rounds = sorted(
                (p for p in points if p["form"] == form and p["concurrency"] == clients), key=lambda p: p["requests_per_s"]
            )
            medians[form] = rounds[len(rounds) // 2]
        out.append(
            {
                "concurrency": clients,
                **{
                    f"{form}_{key}": medians[form][key]
                    for form in FORMS
                    for key in ("requests_per_s", "p50_ms", "p95_ms", "errors")
                },
                "split_over_one_pod_requests_per_s": round(
                    medians["split"]["requests_per_s"] / medians["one-pod"]["requests_per_s"], 3
                ),
                "split_over_one_pod_p50": round(medians["split"]["p50_ms"] / medians["one-pod"]["p50_ms"], 3),
            }
        )
    return out


def run_split_bench(binary: Path, *, models: list[str], rows: int, concurrency: list[int], seconds: float, rounds: int) -> dict:
    if not (binary.is_file() and os.access(binary, os.X_OK)):
        raise SplitBenchError(
            f"--executor {binary} is not an executable file: build Seldon's executor v1.17.1 "
            "(see `python -m benchmarks split --help`) and pass its path"
        )
    unknown = sorted(set(models) - set(MODELS))
    if unknown:
        raise SplitBenchError(f"unknown models {unknown}: choose from {sorted(MODELS)}")
    results = [
        bench_model(
            MODELS[name](),
            binary,
            rows=rows,
            concurrency=concurrency,
            seconds=seconds,
            rounds=rounds,
            work=BENCH_DIR / "split" / name,
        )
        for name in models
    ]
    return {
        "executor": "seldonio/seldon-core executor v1.17.1 (--protocol v2 --transport rest)",
        "protocol": "rest",
        "seconds": seconds,
        "rounds": rounds,
        "models": results,
    }
