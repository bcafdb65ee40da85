"""Batching, versions, pre/post-processing and fallbacks in one real MLServer serving four models."""

from __future__ import annotations

import base64
import concurrent.futures
import io
import json
import re
import subprocess
import sys

import numpy as np
import onnxruntime as ort
import pytest
from PIL import Image

from tests.conftest import refused_at_load
from tests.graphs import WEIGHT, matmul_graph, scalar_graph
from tests.wrappers.folders import model_folder
from tests.wrappers.v2 import GrpcClient, error_text, json_input, post, raw_output, raw_request, scrape
from slipway.paths import PROJECT_ROOT
from wrappers.artifact import SETTINGS_FILE, load_input_example
from wrappers.server import LocalServer
from wrappers.tensors import pack_bytes, unpack_bytes

pytestmark = pytest.mark.slow
IMAGE = (8, 8, 1)
LABELS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]
GPU_FIRST = ["TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider"]


@pytest.fixture(scope="module")
def repository(tmp_path_factory, digits_artifact):
    root = tmp_path_factory.mktemp("repository")
    digits = digits_artifact / "model.onnx"
    model_folder(root, "digits-v", digits, version="2", batching={"max_batch_size": 4, "max_batch_time": 0.05})
    model_folder(root, "digits-merge", digits, extra={
        "max_batch_rows": 16, "inline_below_ms": 0, "io_binding": "on", "providers": GPU_FIRST, "batch_buckets": [1, 4, 16],
    })
    model_folder(root, "digits-images", digits, files={"labels.txt": "\n".join(LABELS)},
                 extra={"preprocess": {}, "postprocess": {"k": 3, "labels_file": "labels.txt"}})
    model_folder(root, "fixed", matmul_graph(root / "fixed.onnx", batch=2), extra={"max_batch_rows": 4})
    (root / "fixed.onnx").unlink()
    return root


@pytest.fixture(scope="module")
def server(repository):
    with LocalServer(repository) as running:
        yield running


@pytest.fixture(scope="module")
def client(server):
    grpc_client = GrpcClient(server.grpc_target)
    yield grpc_client
    grpc_client.close()


@pytest.fixture(scope="module")
def example(digits_artifact):
    images = load_input_example(digits_artifact)[0]["image"]
    session = ort.InferenceSession(str(digits_artifact / "model.onnx"), providers=["CPUExecutionProvider"])
    return images, session


def test_versioned_urls_and_tritonclient_versions(server, example):
    import tritonclient.grpc as grpcclient
    import tritonclient.http as httpclient

    images, session = example
    expected = session.run(None, {"image": images[:2]})[0]
    status, body = post(f"{server.http_url}/v2/models/digits-v/versions/2/infer", {"inputs": [json_input("image", images[:2])]})
    assert status == 200 and body["model_version"] == "2"
    np.testing.assert_allclose(np.asarray(body["outputs"][0]["data"]).reshape(2, 10), expected, atol=1e-6)
    status, body = post(f"{server.http_url}/v2/models/digits-v/versions/3/infer", {"inputs": [json_input("image", images[:2])]})
    assert status == 404 and "version 3 not found" in error_text(body)
    for module, target in ((httpclient, server.http_url.removeprefix("http://")), (grpcclient, server.grpc_target)):
        triton = module.InferenceServerClient(target)
        tensor = module.InferInput("image", [2, *IMAGE], "FP32")
        tensor.set_data_from_numpy(images[:2], **({"binary_data": False} if module is httpclient else {}))
        result = triton.infer("digits-v", [tensor], model_version="2")  # MLServer's REST has no binary extension
        np.testing.assert_allclose(result.as_numpy("probabilities"), expected, atol=1e-6)
        triton.close()


def _rows_sent(client, server, images, rows: int, protocol: str, model: str):
    batch = images[:rows]
    if protocol == "grpc":
        return raw_output(client.infer(raw_request(model, {"image": ("FP32", list(batch.shape), batch.tobytes())})))
    status, body = post(f"{server.http_url}/v2/models/{model}/infer", {"inputs": [json_input("image", batch)]})
    assert status == 200, body
    return np.asarray(body["outputs"][0]["data"], np.float32).reshape(rows, 10)


def _batch_counts(server, model: str) -> tuple[float, float]:
    samples = scrape(server.metrics_url)
    labels = f'{{model_name="{model}",model_version="{"2" if model == "digits-v" else ""}"}}'
    return samples.get("slipway_batch_rows_count" + labels, 0.0), samples.get("slipway_batch_rows_sum" + labels, 0.0)


def test_mlserver_adaptive_batching_returns_each_request_its_own_rows_and_isolates_bad_ones(server, client, example):
    images, session = example
    runs_before, rows_before = _batch_counts(server, "digits-v")
    plan = [(1 + index % 4, "grpc" if index % 2 else "rest") for index in range(12)]

    def good(rows_protocol):
        rows, protocol = rows_protocol
        got = _rows_sent(client, server, images, rows, protocol, "digits-v")
        np.testing.assert_allclose(got, session.run(None, {"image": images[:rows]})[0], atol=1e-6)
        return rows

    def bad(_):
        body = {"inputs": [{"name": "image", "datatype": "FP32", "shape": [1, *IMAGE], "data": ["x"] * 64}]}
        return post(f"{server.http_url}/v2/models/digits-v/infer", body)

    with concurrent.futures.ThreadPoolExecutor(14) as pool:
        goods = [pool.submit(good, item) for item in plan]
        bads = [pool.submit(bad, None) for _ in range(2)]
        rows_total = sum(future.result() for future in goods)
        for future in bads:
            status, body = future.result()
            assert status == 400 and "must be numbers, got str" in error_text(body)
    runs, rows = _batch_counts(server, "digits-v")
    assert rows - rows_before == rows_total
    assert runs - runs_before < len(plan)  # requests really were merged into fewer runs


def test_runtime_merging_with_io_binding_and_gpu_fallback(server, client, example):
    images, session = example
    runs_before, rows_before = _batch_counts(server, "digits-merge")
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        futures = [pool.submit(_rows_sent, client, server, images, 1 + index % 5, "grpc", "digits-merge") for index in range(24)]
        for index, future in enumerate(futures):
            rows = 1 + index % 5
            np.testing.assert_allclose(future.result(), session.run(None, {"image": images[:rows]})[0], atol=1e-6)
    runs, rows = _batch_counts(server, "digits-merge")
    assert rows - rows_before == sum(1 + index % 5 for index in range(24)) and runs - runs_before <= 24
    log = server.log_path.read_text()
    assert "execution provider TensorrtExecutionProvider is not available" in log
    assert "execution provider CUDAExecutionProvider is not available" in log
    assert "model.onnx uses providers ['CPUExecutionProvider']" in log
    assert "loaded digits-merge (version None) with providers ['CPUExecutionProvider'] and IOBinding" in log
    assert "merging up to 16 rows, runs padded to [1, 4, 16] rows" in log
    assert "warmed up digits-merge at batch size 4" in log  # every bucket is tuned before the model is ready,
    assert "thread ort-digits-merge_0)" in log  # on the run slot's own thread


def _png(image: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(np.round(image[..., 0] * 255).astype(np.uint8)).save(buffer, format="PNG")
    return buffer.getvalue()


def test_encoded_images_in_top_k_labels_out_over_grpc_and_rest(server, client, example):
    images, session = example
    pngs = [_png(image) for image in images[:4]]
    decoded = np.stack([np.asarray(Image.open(io.BytesIO(png)), np.float32)[..., None] / 255 for png in pngs])
    scores = session.run(None, {"image": decoded})[0]
    best = np.argsort(-scores, axis=1)[:, :3]

    import tritonclient.http as httpclient

    metadata = httpclient.InferenceServerClient(server.http_url.removeprefix("http://")).get_model_metadata("digits-images")
    assert metadata["inputs"] == [{"name": "image", "datatype": "BYTES", "shape": [-1]}]
    assert metadata["outputs"] == [{"name": "labels", "datatype": "BYTES", "shape": [-1, 3]},
                                   {"name": "scores", "datatype": "FP32", "shape": [-1, 3]}]

    response = client.infer(raw_request("digits-images", {"image": ("BYTES", [4], pack_bytes(pngs))}))
    names = [output.name for output in response.outputs]
    labels = np.asarray(unpack_bytes(response.raw_output_contents[names.index("labels")], "labels")).reshape(4, 3)
    assert labels.tolist() == [[LABELS[i].encode() for i in row] for row in best]
    np.testing.assert_allclose(raw_output(response, names.index("scores")), np.take_along_axis(scores, best, 1), atol=1e-6)

    # tritonclient.http's default: the images as bytes in Triton's binary extension; one output binary, one JSON
    triton = httpclient.InferenceServerClient(server.http_url.removeprefix("http://"))
    sent = httpclient.InferInput("image", [4], "BYTES")
    sent.set_data_from_numpy(np.array(pngs, dtype=object))
    result = triton.infer("digits-images", [sent], outputs=[
        httpclient.InferRequestedOutput("labels"), httpclient.InferRequestedOutput("scores", binary_data=False)])
    assert "data" not in result.get_output("labels") and "data" in result.get_output("scores")
    assert result.as_numpy("labels").tolist() == [[LABELS[i].encode() for i in row] for row in best]
    np.testing.assert_allclose(result.as_numpy("scores"), np.take_along_axis(scores, best, 1), atol=1e-6)
    triton.close()

    body = {"inputs": [{"name": "image", "datatype": "BYTES", "shape": [2], "data": [base64.b64encode(p).decode() for p in pngs[:2]]}]}
    status, answer = post(f"{server.http_url}/v2/models/digits-images/infer", body)
    assert status == 200, answer
    outputs = {output["name"]: output for output in answer["outputs"]}
    assert outputs["labels"]["shape"] == [2, 3]
    assert outputs["labels"]["data"] == [LABELS[i] for i in best[:2].ravel()]

    body["inputs"][0]["data"][1] = base64.b64encode(b"GIF89a broken").decode()
    status, answer = post(f"{server.http_url}/v2/models/digits-images/infer", body)
    assert status == 400 and "image 1 could not be decoded" in error_text(answer)
    samples = scrape(server.metrics_url)
    assert samples['slipway_preprocess_seconds_count{model_name="digits-images",model_version=""}'] >= 3
    assert samples['slipway_postprocess_seconds_count{model_name="digits-images",model_version=""}'] >= 2


def test_a_graph_with_a_fixed_batch_size_serves_any_row_count(server, client):
    status, body = post(f"{server.http_url}/v2/models/fixed/infer", {"inputs": [json_input("x", np.ones((3, 4), np.float32))]})
    assert status == 200, body
    np.testing.assert_allclose(np.asarray(body["outputs"][0]["data"]).reshape(3, 3), np.ones((3, 4)) @ WEIGHT)
    x = np.arange(20, dtype=np.float32).reshape(5, 4)
    np.testing.assert_allclose(raw_output(client.infer(raw_request("fixed", {"x": ("FP32", [5, 4], x.tobytes())}))), x @ WEIGHT)


def test_a_graph_that_cannot_be_batched_is_refused_at_load_saying_what_to_set(tmp_path):
    folder = model_folder(tmp_path, "scalar", scalar_graph(tmp_path / "scalar.onnx"), extra={"max_batch_rows": 4})
    refused_at_load(folder, "'x' is a scalar with no batch dimension.*max_batch_rows to 1")
    fixed = model_folder(tmp_path, "fixed", matmul_graph(tmp_path / "fixed.onnx", batch=2), extra={"batch_buckets": [4]})
    refused_at_load(fixed, r"batch_buckets needs graph inputs whose first \(batch\) dimension is dynamic")
    odd = model_folder(tmp_path, "odd", matmul_graph(tmp_path / "odd.onnx", batch=2), extra={"warmup_batch_sizes": [3]})
    refused_at_load(odd, r"model odd: warm-up at batch size 3 failed .*invalid dimensions for input: x")


def test_loaded_heap_is_frozen_out_of_full_collections(server):
    # Full collections run on the event loop: what loading left alive must not be walked by each one.
    counts = [int(count) for count in re.findall(r"(\d+) objects alive after loading frozen", server.log_path.read_text())]
    assert counts and min(counts) > 10_000  # MLServer, ONNX Runtime and NumPy alone leave more than that



# Run in its own process, as MLServer runs the runtime: importing it here would register MLServer's
# V2 protobufs beside tritonclient's, which share their names.
UNLOAD_CHECK = """
import asyncio, gc, json, sys, weakref
from mlserver.settings import ModelSettings
from wrappers.runtime import REFREEZE_AFTER_UNLOAD_S, OnnxRuntime

async def main(path):
    settings = ModelSettings.parse_file(path)
    settings._source = path
    model = OnnxRuntime(settings)
    await model.load()
    frozen_at_load = gc.get_freeze_count()
    session, runtime = weakref.ref(model._runner.session), weakref.ref(model)
    await model.unload()
    del model
    await asyncio.sleep(REFREEZE_AFTER_UNLOAD_S + 0.5)
    print(json.dumps({"frozen_at_load": frozen_at_load, "freed": session() is None and runtime() is None,
                      "frozen_after": gc.get_freeze_count()}))

asyncio.run(main(sys.argv[1]))
"""


def test_an_unloaded_model_and_its_session_are_freed_though_the_heap_was_frozen(tmp_path):
    # Frozen objects are never collected, and a model lives on in its own reference cycles: unloading
    # must thaw the heap, and freeze it again once the model is gone.
    folder = model_folder(tmp_path, "m", matmul_graph(tmp_path / "m.onnx"))
    done = subprocess.run([sys.executable, "-c", UNLOAD_CHECK, str(folder / SETTINGS_FILE)], cwd=PROJECT_ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["frozen_at_load"] > 10_000 and result["freed"] and result["frozen_after"] > 10_000
