"""Batching, versions, pre/post-processing, fallbacks and graph-side input errors in one real MLServer."""

from __future__ import annotations

import base64
import concurrent.futures
import io
import json
import re
import subprocess
import sys
import urllib.request

import grpc
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper
from PIL import Image
from tritonclient.grpc import service_pb2

from engine.cpu_limits import cpu_limit
from slipway.artifact import SETTINGS_FILE, load_input_example
from slipway.local_server import LocalServer
from slipway.paths import PROJECT_ROOT
from slipway.v2_wire import pack_bytes, unpack_bytes
from tests.conftest import refused_at_load
from tests.graphs import WEIGHT, matmul_graph, onnx_model, scalar_graph
from tests.wrappers.folders import model_folder
from tests.wrappers.v2 import error_text, json_input, post, raw_output, raw_request, scrape

pytestmark = pytest.mark.slow
IMAGE = (8, 8, 1)
LABELS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]
GPU_FIRST = ["TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider"]
TABLE = np.arange(30, dtype=np.float32).reshape(10, 3)


def _graph(path, nodes, inputs, outputs, initializers=()):
    """A one-purpose graph; inputs and outputs as (name, TensorProto type, shape)."""
    graph = helper.make_graph(
        nodes,
        path.stem,
        [helper.make_tensor_value_info(*spec) for spec in inputs],
        [helper.make_tensor_value_info(*spec) for spec in outputs],
        list(initializers),
    )
    onnx.save(onnx_model(graph), path)
    return path


def strings_graph(path):
    """so = s (strings), bo = b (booleans): what the graph was fed, sent back."""
    return _graph(
        path,
        [helper.make_node("Identity", ["s"], ["so"]), helper.make_node("Identity", ["b"], ["bo"])],
        [("s", TensorProto.STRING, ["N", 2]), ("b", TensorProto.BOOL, ["N", 2])],
        [("so", TensorProto.STRING, ["N", 2]), ("bo", TensorProto.BOOL, ["N", 2])],
    )


def reshape_graph(path):
    """x [N, M] reshaped to [-1, 4]: the metadata takes any M, the graph only N * M divisible by 4."""
    shape = helper.make_tensor("S", TensorProto.INT64, [2], [-1, 4])
    return _graph(
        path,
        [helper.make_node("Reshape", ["x", "S"], ["y"])],
        [("x", TensorProto.FLOAT, ["N", "M"])],
        [("y", TensorProto.FLOAT, ["K", 4])],
        [shape],
    )


def half_graph(path):
    """h = x cast to FP16, y = x: an FP16 output beside an FP32 one."""
    return _graph(
        path,
        [helper.make_node("Cast", ["x"], ["h"], to=TensorProto.FLOAT16), helper.make_node("Identity", ["x"], ["y"])],
        [("x", TensorProto.FLOAT, ["N", 2])],
        [("h", TensorProto.FLOAT16, ["N", 2]), ("y", TensorProto.FLOAT, ["N", 2])],
    )


def gather_graph(path):
    """Rows of TABLE by index: an index out of [-10, 9] fails the run (ONNX Runtime's InvalidArgument)."""
    table = helper.make_tensor("T", TensorProto.FLOAT, list(TABLE.shape), TABLE.ravel().tolist())
    return _graph(
        path,
        [helper.make_node("Gather", ["T", "idx"], ["y"], axis=0)],
        [("idx", TensorProto.INT64, ["N"])],
        [("y", TensorProto.FLOAT, ["N", 3])],
        [table],
    )


@pytest.fixture(scope="module")
def repository(tmp_path_factory, digits_artifact):
    root = tmp_path_factory.mktemp("repository")
    digits = digits_artifact / "model.onnx"
    model_folder(root, "digits-v", digits, version="2", batching={"max_batch_size": 4, "max_batch_time": 0.05})
    model_folder(
        root,
        "digits-merge",
        digits,
        extra={
            "max_batch_rows": 16,
            "inline_below_ms": 0,
            "io_binding": "on",
            "providers": GPU_FIRST,
            "batch_buckets": [1, 4, 16],
        },
    )
    model_folder(
        root,
        "digits-images",
        digits,
        files={"labels.txt": "\n".join(LABELS)},
        extra={"preprocess": {}, "postprocess": {"k": 3, "labels_file": "labels.txt"}},
    )
    model_folder(root, "fixed", matmul_graph(root / "fixed.onnx", batch=2), extra={"max_batch_rows": 4})
    (root / "fixed.onnx").unlink()
    graphs = tmp_path_factory.mktemp("graphs")
    model_folder(root, "strings", strings_graph(graphs / "strings.onnx"))
    model_folder(root, "reshape", reshape_graph(graphs / "reshape.onnx"), extra={"warmup_batch_sizes": [4]})
    model_folder(root, "gather-merge", gather_graph(graphs / "gather.onnx"), extra={"max_batch_rows": 64, "inline_below_ms": 0})
    model_folder(root, "cast_fp16.v1", half_graph(graphs / "half.onnx"))
    return root


@pytest.fixture(scope="module")
def server(repository):
    with LocalServer(repository) as running:
        yield running


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
    assert metadata["outputs"] == [
        {"name": "labels", "datatype": "BYTES", "shape": [-1, 3]},
        {"name": "scores", "datatype": "FP32", "shape": [-1, 3]},
    ]

    response = client.infer(raw_request("digits-images", {"image": ("BYTES", [4], pack_bytes(pngs))}))
    names = [output.name for output in response.outputs]
    labels = np.asarray(unpack_bytes(response.raw_output_contents[names.index("labels")], "labels")).reshape(4, 3)
    assert labels.tolist() == [[LABELS[i].encode() for i in row] for row in best]
    np.testing.assert_allclose(raw_output(response, names.index("scores")), np.take_along_axis(scores, best, 1), atol=1e-6)

    # tritonclient.http's default: the images as bytes in Triton's binary extension; one output binary, one JSON
    triton = httpclient.InferenceServerClient(server.http_url.removeprefix("http://"))
    sent = httpclient.InferInput("image", [4], "BYTES")
    sent.set_data_from_numpy(np.array(pngs, dtype=object))
    result = triton.infer(
        "digits-images",
        [sent],
        outputs=[httpclient.InferRequestedOutput("labels"), httpclient.InferRequestedOutput("scores", binary_data=False)],
    )
    assert "data" not in result.get_output("labels") and "data" in result.get_output("scores")
    assert result.as_numpy("labels").tolist() == [[LABELS[i].encode() for i in row] for row in best]
    np.testing.assert_allclose(result.as_numpy("scores"), np.take_along_axis(scores, best, 1), atol=1e-6)
    triton.close()

    body = {
        "inputs": [{"name": "image", "datatype": "BYTES", "shape": [2], "data": [base64.b64encode(p).decode() for p in pngs[:2]]}]
    }
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


def test_strings_reach_the_graph_as_sent_over_every_protocol(server, client):
    import tritonclient.grpc as grpcclient
    import tritonclient.http as httpclient

    texts = [["abc", "é"], ["", "x y"]]
    encoded = np.array([[text.encode() for text in row] for row in texts], dtype=object)
    flags = np.array([[True, False], [False, True]])
    # tritonclient sends BYTES as bytes: in raw gRPC contents, and in Triton's binary extension over REST
    for module, target in ((httpclient, server.http_url.removeprefix("http://")), (grpcclient, server.grpc_target)):
        triton = module.InferenceServerClient(target)
        sent = [module.InferInput("s", [2, 2], "BYTES"), module.InferInput("b", [2, 2], "BOOL")]
        sent[0].set_data_from_numpy(encoded)
        sent[1].set_data_from_numpy(flags)
        result = triton.infer("strings", sent)
        assert result.as_numpy("so").tolist() == encoded.tolist(), module.__name__
        np.testing.assert_array_equal(result.as_numpy("bo"), flags)
        triton.close()

    typed = service_pb2.ModelInferRequest(model_name="strings")
    for name, datatype, field, array in (("s", "BYTES", "bytes_contents", encoded), ("b", "BOOL", "bool_contents", flags)):
        tensor = typed.inputs.add(name=name, datatype=datatype)
        tensor.shape.extend([2, 2])
        getattr(tensor.contents, field).extend(array.ravel().tolist())
    outputs = {output.name: output for output in client.infer(typed).outputs}
    assert list(outputs["so"].contents.bytes_contents) == encoded.ravel().tolist()

    body = {
        "inputs": [
            {"name": "s", "datatype": "BYTES", "shape": [2, 2], "data": texts},
            {"name": "b", "datatype": "BOOL", "shape": [2, 2], "data": flags.tolist()},
        ]
    }
    status, answer = post(f"{server.http_url}/v2/models/strings/infer", body)
    assert status == 200 and answer["outputs"][0]["data"] == ["abc", "é", "", "x y"], answer


@pytest.mark.parametrize(
    "inputs, expected",
    [
        (
            {"s": ("BYTES", [1, 2], pack_bytes([b"ok", b"\xff"])), "b": ("BOOL", [1, 2], b"\0\1")},
            "input 's': element 1 is not UTF-8 text (invalid start byte at byte 0), and the graph takes strings",
        ),
        (
            {"s": ("BYTES", [1, 2], pack_bytes([b"a", b"b"])), "b": ("BOOL", [1, 2], b"\1\7")},
            "input 'b': BOOL raw contents must be bytes 0 (false) or 1 (true); element 1 is 7",
        ),
    ],
)
def test_strings_that_are_not_text_and_booleans_that_are_not_0_or_1_are_invalid_argument(client, inputs, expected):
    with pytest.raises(grpc.RpcError) as caught:
        client.infer(raw_request("strings", inputs))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT and expected in caught.value.details()


def test_typed_contents_beside_raw_contents_are_invalid_argument(client):
    """As Triton rules: a raw buffer belongs to the n-th input without contents, so a mix shifts buffers silently."""
    request = raw_request("strings", {"s": ("BYTES", [1, 2], pack_bytes([b"a", b"b"]))})
    typed = request.inputs.add(name="b", datatype="BOOL", shape=[1, 2])
    typed.contents.bool_contents.extend([True, False])
    with pytest.raises(grpc.RpcError) as caught:
        client.infer(request)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert caught.value.details() == (
        "input 'b' has typed contents but the request also carries raw_input_contents; "
        "send every input's data in raw_input_contents (one buffer per input, in input "
        "order), or none there"
    )


def test_typed_grpc_contents_get_top_k_labels_back_as_bytes_contents(client, example):
    images, session = example
    pngs = [_png(image) for image in images[:2]]
    decoded = np.stack([np.asarray(Image.open(io.BytesIO(png)), np.float32)[..., None] / 255 for png in pngs])
    best = np.argsort(-session.run(None, {"image": decoded})[0], axis=1)[:, :3]
    request = service_pb2.ModelInferRequest(model_name="digits-images")
    tensor = request.inputs.add(name="image", datatype="BYTES")
    tensor.shape.append(2)
    tensor.contents.bytes_contents.extend(pngs)
    response = client.infer(request)
    assert not response.raw_output_contents  # asked with typed contents, answered with them
    outputs = {output.name: output for output in response.outputs}
    assert list(outputs["labels"].contents.bytes_contents) == [LABELS[i].encode() for i in best.ravel()]
    assert list(outputs["labels"].shape) == [2, 3]


def test_fp16_outputs_come_back_raw_to_typed_grpc_requests_with_every_other_output(client):
    """The V2 protobuf has no typed contents for FP16, so Triton sends FP16 only raw; where one output is raw,
    all are. tritonclient reads such a response."""
    from tritonclient.grpc import InferResult

    x = np.array([[1 / 3, -2.5], [65504, 1e-3]], np.float32)
    request = service_pb2.ModelInferRequest(model_name="cast_fp16.v1")
    tensor = request.inputs.add(name="x", datatype="FP32")
    tensor.shape.extend(x.shape)
    tensor.contents.fp32_contents.extend(x.ravel().tolist())
    response = client.infer(request)
    assert [output.datatype for output in response.outputs] == ["FP16", "FP32"]
    assert len(response.raw_output_contents) == 2
    assert not any(output.contents.ListFields() for output in response.outputs)  # no typed contents beside them
    result = InferResult(response)
    np.testing.assert_array_equal(result.as_numpy("h"), x.astype(np.float16))
    np.testing.assert_array_equal(result.as_numpy("y"), x)
    request.outputs.add(name="y")  # no FP16 output asked for: typed contents, as asked
    response = client.infer(request)
    assert not response.raw_output_contents and list(response.outputs[0].contents.fp32_contents) == x.ravel().tolist()


@pytest.mark.parametrize(
    "model, name, datatype, shape",
    [
        ("fixed", "x", "FP32", [0, 4]),  # run in padded chunks: there would be none
        ("digits-images", "image", "BYTES", [0]),  # no image to decode
        ("digits-merge", "image", "FP32", [0, *IMAGE]),  # a dynamic batch: refused the same way
    ],
)
def test_zero_rows_are_refused_alike_by_every_model(server, client, model, name, datatype, shape):
    expected = f"input {name!r} has 0 rows (shape {shape}); send at least one row"
    status, body = post(
        f"{server.http_url}/v2/models/{model}/infer",
        {"inputs": [{"name": name, "datatype": datatype, "shape": shape, "data": []}]},
    )
    assert status == 400 and expected in error_text(body), body
    with pytest.raises(grpc.RpcError) as caught:
        client.infer(raw_request(model, {name: (datatype, shape, b"")}))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT and expected in caught.value.details()


def test_an_input_the_graph_cannot_run_is_refused_without_onnx_runtime_internals(server, client):
    x = np.ones((1, 3), np.float32)  # the metadata takes [N, M]; the graph's Reshape fails on 3 values
    status, body = post(f"{server.http_url}/v2/models/reshape/infer", {"inputs": [json_input("x", x)]})
    assert status == 400, body
    with pytest.raises(grpc.RpcError) as caught:
        client.infer(raw_request("reshape", {"x": ("FP32", [1, 3], x.tobytes())}))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    for message in (error_text(body), caught.value.details()):
        assert "model reshape could not run on this input" in message and "Input shape:{1,3}" in message, message
        assert "onnxruntime_src" not in message and "was false" not in message and "[ONNXRuntimeError]" not in message
    fits = np.arange(8, dtype=np.float32).reshape(2, 4)
    response = client.infer(raw_request("reshape", {"x": ("FP32", [2, 4], fits.tobytes())}))
    np.testing.assert_allclose(raw_output(response), fits)


def test_a_bad_request_merged_with_good_ones_fails_alone(server):
    runs_before, rows_before = _batch_counts(server, "gather-merge")

    def one(index: int):
        idx = [99] if index % 4 == 0 else [index % 10]  # 99: out of the table's range, the run fails
        body = {"inputs": [{"name": "idx", "datatype": "INT64", "shape": [1], "data": idx}]}
        return idx, *post(f"{server.http_url}/v2/models/gather-merge/infer", body)

    with concurrent.futures.ThreadPoolExecutor(12) as pool:
        answers = list(pool.map(one, range(160)))
    refused = [(idx, body) for idx, status, body in answers if idx != [99] and status != 200]
    assert not refused, f"{len(refused)} good requests refused, e.g. {refused[0]}"
    for idx, status, body in answers:
        if idx == [99]:
            assert status == 400 and "could not run on this input" in error_text(body) and "idx=99" in error_text(body)
        else:
            np.testing.assert_array_equal(np.asarray(body["outputs"][0]["data"]).reshape(1, 3), TABLE[idx])
    runs, rows = _batch_counts(server, "gather-merge")
    assert rows - rows_before > runs - runs_before  # one-row requests really were merged into runs


def test_a_graph_that_cannot_be_batched_is_refused_at_load_saying_what_to_set(tmp_path):
    folder = model_folder(tmp_path, "scalar", scalar_graph(tmp_path / "scalar.onnx"), extra={"max_batch_rows": 4})
    refused_at_load(folder, "'x' is a scalar with no batch dimension.*max_batch_rows to 1")
    fixed = model_folder(tmp_path, "fixed", matmul_graph(tmp_path / "fixed.onnx", batch=2), extra={"batch_buckets": [4]})
    refused_at_load(fixed, r"batch_buckets needs graph inputs whose first \(batch\) dimension is dynamic")
    odd = model_folder(tmp_path, "odd", matmul_graph(tmp_path / "odd.onnx", batch=2), extra={"warmup_batch_sizes": [3]})
    refused_at_load(odd, r"model odd: warm-up at batch size 3 failed .*invalid dimensions for input: x")


@pytest.mark.parametrize("name", ["my model", "team/digits"])
def test_a_model_name_a_url_would_have_to_escape_is_refused_at_load(tmp_path, name):
    """Clients put the name in /v2/models/<name>/infer as it is. '_' and '.' are fine: `cast_fp16.v1` above loads."""
    folder = model_folder(tmp_path, name, matmul_graph(tmp_path / "m.onnx"))
    refused_at_load(folder, f"model name {name!r} cannot appear unescaped in V2 URLs.*letters, digits, '.', '_' or '-'")


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
    done = subprocess.run(
        [sys.executable, "-c", UNLOAD_CHECK, str(folder / SETTINGS_FILE)],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["frozen_at_load"] > 10_000 and result["freed"] and result["frozen_after"] > 10_000


def test_unset_settings_are_chosen_at_load_and_shown_and_explicit_ones_win(server):
    """The tiny cast graph leaves everything unset: timed at load, it runs inline on one thread. gather-merge sets
    max_batch_rows and inline_below_ms: those stay, the rest is chosen around them. MLServer merges digits-v."""

    def chosen(model: str) -> dict:
        with urllib.request.urlopen(f"{server.http_url}/v2/models/{model}", timeout=30) as response:
            return json.loads(response.read())["parameters"]

    tiny = chosen("cast_fp16.v1")
    assert {
        tiny[f"{name}_source"] for name in ("inline_below_ms", "intra_op_threads", "inference_threads", "max_batch_rows")
    } == {"measured"}, tiny
    assert float(tiny["inline_below_ms"]) > 0 and tiny["intra_op_threads"] == 1, tiny
    # inline: the loop may poll after its runs where a CPU is left for gRPC's threads, while requests come back to back (`poll_gate`)
    assert (tiny["event_loop_spin_us"], tiny["event_loop_spin_us_source"]) == (2000 if cpu_limit() >= 2 else 0, "measured"), tiny
    gather = chosen("gather-merge")
    assert (gather["max_batch_rows"], gather["max_batch_rows_source"]) == (64, "explicit"), gather
    assert (gather["inline_below_ms"], gather["inline_below_ms_source"]) == ("0", "explicit"), gather
    assert gather["intra_op_threads_source"] == "measured" and gather["intra_op_threads"] >= 1, gather
    # runs on threads of several intra-op threads each: those that start beside another go to a 1-thread session
    assert (gather["busy_intra_op_threads"], gather["busy_intra_op_threads_source"]) == (
        1 if gather["intra_op_threads"] >= 2 else 0,
        "measured",
    ), gather
    assert gather["event_loop_spin_us"] == 0, gather  # its runs go to threads: nothing to poll after
    assert (chosen("digits-v")["max_batch_rows"], chosen("digits-v")["max_batch_rows_source"]) == (1, "default")
    samples = scrape(server.metrics_url)
    labels = 'model_name="gather-merge",model_version="",setting="max_batch_rows"'
    assert samples[f'slipway_setting{{{labels},source="explicit"}}'] == 64
    assert f'slipway_setting{{{labels},source="measured"}}' not in samples
    if tiny["event_loop_spin_us"]:  # tried from the first request on: its state is published from load on
        assert samples['slipway_event_loop_polling{model_name="cast_fp16.v1",model_version=""}'] in (0, 1)
    log = server.log_path.read_text()
    assert "cast_fp16.v1: intra_op_threads 1 (measured): 1-row runs go inline" in log
    assert "digits-v: max_batch_rows 1 (default): requests cannot be merged here (MLServer's adaptive" in log
