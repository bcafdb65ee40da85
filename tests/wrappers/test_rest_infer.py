"""The fast REST infer route answers exactly as MLServer's own route does, in one real server.

Two models serve the same graph: `ours` through `wrappers.transport.rest_infer`, `fastapi` with
`fast_rest_route: false`, through MLServer's FastAPI route. Every request goes to both and
the answers must match: status, body and headers (model names and random ids aside).
"""

from __future__ import annotations

import http.client
import json
import math
import select
import socket
import threading
import urllib.error
import urllib.request
import zlib

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slipway.artifact import load_input_example
from slipway.local_server import LocalServer
from slipway.ports import LOOPBACK
from slipway.repository_access import API_ENV
from tests.wrappers.folders import model_folder
from tests.wrappers.v2 import scrape
from wrappers.limits.body_budget import BODY_LIMIT_ENV, DEFAULT_BODY_BYTES
from wrappers.transport.json_tensors import INLINE_BODY_BYTES

pytestmark = pytest.mark.slow
VERSION = "3"
# Headers that differ between any two answers: when, and MLServer's per-response ids.
_UNSTABLE_HEADERS = {"date", "ce-id", "ce-requestid", "content-length"}
# The server's body limit, set outright (not sized by this machine's memory), and what a body past it is answered.
MAX_BODY_BYTES = DEFAULT_BODY_BYTES
OVER_THE_LIMIT = f"{MAX_BODY_BYTES} bytes ({MAX_BODY_BYTES >> 20} MiB), the most this server reads; send fewer rows per request"


@pytest.fixture(scope="module")
def server(tmp_path_factory, digits_artifact):
    """`fastapi` loads at start-up and freezes the heap; `ours` is loaded afterwards through the repository API,
    so the route must find MLServer's REST app among frozen objects (opened to loopback callers: it is closed
    unless SLIPWAY_REPOSITORY_API says otherwise)."""
    root = tmp_path_factory.mktemp("rest-infer")
    onnx = digits_artifact / "model.onnx"
    model_folder(root, "fastapi", onnx, version=VERSION, extra={"fast_rest_route": False})
    with LocalServer(root, extra_env={API_ENV: "open", BODY_LIMIT_ENV: str(MAX_BODY_BYTES)}) as running:
        model_folder(root, "ours", onnx, version=VERSION)
        status, answer, _ = _send(f"{running.http_url}/v2/repository/models/ours/load", b"", {})
        assert status == 200, answer
        yield running


@pytest.fixture(scope="module")
def good_body(digits_artifact):
    inputs, _, _ = load_input_example(digits_artifact)
    name, rows = next(iter(inputs.items()))
    return {"inputs": [{"name": name, "datatype": "FP32", "shape": list(rows[:2].shape), "data": rows[:2].ravel().tolist()}]}


def _send(url: str, body: bytes, headers: dict[str, str]) -> tuple[int, dict, dict[str, str]]:
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            status, text, answered = response.status, response.read(), response.headers
    except urllib.error.HTTPError as err:
        status, text, answered = err.code, err.read(), err.headers
    return status, json.loads(text or b"null"), {key.lower(): value for key, value in answered.items()}


def _both(server, body, *, path: str = "infer", headers: dict[str, str] | None = None, version: str | None = None):
    """Send one request to each model; return both answers with the model names made alike."""
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    answers = []
    for model in ("ours", "fastapi"):
        prefix = f"{server.http_url}/v2/models/{model}" + (f"/versions/{version}" if version else "")
        status, content, answered = _send(f"{prefix}/{path}", data, headers or {"Content-Type": "application/json"})
        text = json.dumps(content).replace(model, "MODEL")
        answered = {key: value.replace(model, "MODEL") for key, value in answered.items() if key not in _UNSTABLE_HEADERS}
        answers.append((status, json.loads(text), answered))
    return answers


def _without_ids(content: dict) -> dict:
    return {key: value for key, value in content.items() if key != "id"}


def test_good_requests_are_answered_alike_with_mlservers_headers(server, good_body):
    for body, version in ((good_body, None), (good_body, VERSION), ({**good_body, "id": "mine"}, None)):
        (status, fast, fast_headers), (mlserver_status, mlserver, mlserver_headers) = _both(server, body, version=version)
        assert status == mlserver_status == 200
        assert fast == mlserver if "id" in body else _without_ids(fast) == _without_ids(mlserver)
        assert fast["outputs"][0]["shape"] == [2, 10] and all(math.isfinite(x) for x in fast["outputs"][0]["data"])
        assert fast_headers == mlserver_headers
        assert fast_headers["ce-modelid"] == "MODEL" and fast_headers["content-type"] == "application/json"
    (_, fast, _), (_, mlserver, _) = _both(server, {**good_body, "id": "mine"})
    assert fast["id"] == mlserver["id"] == "mine"


def test_a_large_json_body_is_answered_as_mlservers_route_answers_it(server, digits_artifact):
    """Past INLINE_BODY_BYTES the route parses a body on a worker thread, its floats straight into an array."""
    inputs, _, _ = load_input_example(digits_artifact)
    name, rows = next(iter(inputs.items()))
    batch = np.resize(rows, (1024, *rows.shape[1:]))
    body = {
        "id": "large",
        "inputs": [{"name": name, "datatype": "FP32", "shape": list(batch.shape), "data": batch.ravel().tolist()}],
    }
    assert len(json.dumps(body)) > INLINE_BODY_BYTES
    (status, fast, fast_headers), (mlserver_status, mlserver, mlserver_headers) = _both(server, body)
    assert status == mlserver_status == 200 and fast == mlserver and fast_headers == mlserver_headers
    assert fast["outputs"][0]["shape"] == [1024, 10]


def test_requested_outputs_and_parameters_are_answered_alike(server, good_body):
    body = {**good_body, "id": "x", "parameters": {"note": "kept"}, "outputs": [{"name": "probabilities"}]}
    (status, fast, _), (_, mlserver, _) = _both(server, body)
    assert fast == mlserver
    assert status in (200, 400)  # 400 where the graph names its output otherwise: then both say so alike


@pytest.mark.parametrize(
    "body, headers, status",
    [
        (b"{not json", None, 422),
        (b"", None, 422),
        (b'{"inputs": "no"}', None, 422),
        (b'{"outputs": []}', None, 422),
        (b"[1, 2]", None, 422),
        (b'{"inputs": [{"name": "x", "datatype": "FP32", "shape": [1]}]}', None, 422),
        (None, {"Content-Type": "text/plain"}, 422),
    ],
    ids=["not-json", "empty", "inputs-not-a-list", "no-inputs", "not-an-object", "no-data", "text-plain"],
)
def test_bodies_the_route_does_not_take_get_mlservers_own_answers(server, good_body, body, headers, status):
    data = json.dumps(good_body).encode() if body is None else body
    (fast_status, fast, fast_headers), (mlserver_status, mlserver, mlserver_headers) = _both(
        server, data, headers=headers or {"Content-Type": "application/json"}
    )
    assert fast_status == mlserver_status and fast_headers == mlserver_headers
    assert _without_ids(fast) == _without_ids(mlserver)
    if status is not None:
        assert fast_status == status


@pytest.mark.parametrize(
    "body, expected",
    [
        (b"\xff\xfe\xfd", "the body is not UTF-8 at byte 0 (0xff): invalid start byte"),
        (
            b'{"inputs": [{"name": "x", "datatype": "BYTES", "shape": [1], "data": ["\xe9t\xe9"]}]}',
            "the body is not UTF-8 at byte 71 (0xe9): invalid continuation byte",
        ),
        (
            b'{"inputs": [{"name": "x", "datatype": "INT64", "shape": [1], "data": [' + b"9" * 5000 + b"]}]}",
            "a number has more than 4300 digits",
        ),
        (
            b'{"inputs": [{"name": "x", "datatype": "FP32", "shape": [1], "data": ' + b"[" * 100_000 + b"]" * 100_000 + b"}]}",
            "the JSON is nested too deeply",
        ),
        (b'{"parameters": {"a": ' + b"[" * 100_000 + b"]" * 100_000 + b'}, "inputs": []}', "the JSON is nested too deeply"),
    ],
    ids=["not-utf8", "latin1-text", "long-integer", "deep-data", "deep-parameters"],
)
def test_json_that_python_cannot_decode_gets_the_422_of_malformed_json(server, body, expected):
    """json.loads refuses these with errors other than JSONDecodeError (UnicodeDecodeError, ValueError,
    RecursionError): they must still be answered as malformed JSON, saying what is wrong, not 400 or 500."""
    (fast_status, fast, _), (mlserver_status, mlserver, _) = _both(server, body)
    assert fast_status == mlserver_status == 422, fast
    assert fast == mlserver
    assert fast["detail"][0]["msg"] == "JSON decode error" and expected in fast["detail"][0]["ctx"]["error"]


def test_json_nested_too_deeply_gets_400_in_the_binary_header_and_in_shared_memory_registration(server, good_body):
    nested = b'{"inputs": [], "parameters": {"a": ' + b"[" * 100_000 + b"]" * 100_000 + b"}}"
    status, answer, _ = _send(
        f"{server.http_url}/v2/models/ours/infer", nested, {"Inference-Header-Content-Length": str(len(nested))}
    )
    assert status == 400 and "are not JSON: the JSON is nested too deeply" in answer["error"], answer
    status, answer, _ = _send(f"{server.http_url}/v2/systemsharedmemory/region/deep/register", nested[35:-2], {})
    assert status == 400 and "the JSON is nested too deeply" in answer["error"], answer
    assert "send a JSON object" in answer["error"]
    (status, _, _), _ = _both(server, good_body)
    assert status == 200


@pytest.mark.parametrize("compression", ["gzip", "deflate"])
def test_compressed_json_bodies_are_answered_alike(server, good_body, compression):
    """MLServer inflates gzip only: the route inflates both, for every model."""
    data = json.dumps(good_body).encode()
    wbits = 16 + zlib.MAX_WBITS if compression == "gzip" else zlib.MAX_WBITS
    deflater = zlib.compressobj(6, zlib.DEFLATED, wbits)
    compressed = deflater.compress(data) + deflater.flush()
    headers = {"Content-Type": "application/json", "Content-Encoding": compression}
    (fast_status, fast, fast_headers), (mlserver_status, mlserver, mlserver_headers) = _both(server, compressed, headers=headers)
    assert fast_status == mlserver_status == 200, (fast, mlserver)
    assert _without_ids(fast) == _without_ids(mlserver) and fast_headers == mlserver_headers


def test_a_compressed_body_that_does_not_inflate_gets_400_saying_why(server, good_body):
    data = json.dumps(good_body).encode()
    deflater = zlib.compressobj(6, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    compressed = deflater.compress(data) + deflater.flush()
    for body, encoding, expected in [
        (compressed[:-20], "gzip", "the gzip body is truncated; send all of it"),
        (data, "deflate", "the body is not valid deflate data"),
        (zlib.compress(data) + b"x", "deflate", "the deflate body has 1 bytes after its end"),
        (compressed, "br", "Content-Encoding 'br' is not supported; send gzip, deflate or none"),
    ]:
        answers = _both(server, body, headers={"Content-Type": "application/json", "Content-Encoding": encoding})
        for status, answer, _ in answers:
            assert status == 400 and expected in answer["error"], answer
    (status, _, _), _ = _both(
        server, compressed + compressed, headers={"Content-Type": "application/json", "Content-Encoding": "gzip"}
    )
    assert status == 422  # two gzip members inflate, as gzip.decompress reads them: two JSON documents


@pytest.fixture(scope="module")
def gzip_bomb() -> bytes:
    """Zeros that inflate to one byte more than the route inflates, gzip-compressed: about a megabyte."""
    deflater = zlib.compressobj(1, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    step = bytes(1 << 20)
    whole, rest = divmod(MAX_BODY_BYTES + 1, len(step))
    parts = [deflater.compress(step) for _ in range(whole)]
    return b"".join([*parts, deflater.compress(step[:rest]), deflater.flush()])


@pytest.mark.parametrize(
    "model, headers",
    [
        ("ours", {"Content-Type": "application/json"}),
        ("fastapi", {"Content-Type": "application/json"}),
        ("ours", {"Inference-Header-Content-Length": "10"}),
    ],
    ids=["json", "json-mlservers-route", "binary"],
)
def test_a_gzip_bomb_is_refused_while_other_requests_are_answered(server, good_body, gzip_bomb, model, headers):
    """A body that inflates past the limit gets 413 naming it, and inflating it up to there holds no other
    request: small ones sent meanwhile are answered before it is (they waited for it on the event loop)."""
    refused = {}

    def send_bomb():
        refused["answer"] = _send(
            f"{server.http_url}/v2/models/{model}/infer", gzip_bomb, {**headers, "Content-Encoding": "gzip"}
        )

    bomb = threading.Thread(target=send_bomb)
    bomb.start()
    answered_meanwhile = 0
    while bomb.is_alive():
        status, _, _ = _send(
            f"{server.http_url}/v2/models/ours/infer", json.dumps(good_body).encode(), {"Content-Type": "application/json"}
        )
        assert status == 200
        answered_meanwhile += bomb.is_alive()
    bomb.join()
    status, answer, _ = refused["answer"]
    assert status == 413, answer
    assert f"the gzip body inflates past {OVER_THE_LIMIT}" in answer["error"]
    assert answered_meanwhile >= 20  # about 140 here; 0 to 4 when bodies inflated on the event loop


@pytest.mark.parametrize("path", ["/v2/repository/index", "/v2/systemsharedmemory/region/r/register"])
def test_every_route_that_takes_a_body_holds_it_to_the_limit_and_inflates_it(server, gzip_bomb, path):
    """Not only the infer routes: MLServer's others inflated gzip whole on the event loop, deflate not at all."""
    status, answer, _ = _send(
        f"{server.http_url}{path}", gzip_bomb, {"Content-Type": "application/json", "Content-Encoding": "gzip"}
    )
    assert status == 413 and f"the gzip body inflates past {OVER_THE_LIMIT}" in answer["error"], answer
    status, index, _ = _send(
        f"{server.http_url}/v2/repository/index",
        zlib.compress(b'{"ready": true}'),
        {"Content-Type": "application/json", "Content-Encoding": "deflate"},
    )
    assert status == 200 and {"ours", "fastapi"} <= {model["name"] for model in index}, index


@pytest.mark.parametrize("model", ["ours", "fastapi"])
def test_a_body_whose_content_length_is_over_the_limit_is_refused_before_it_is_read(server, good_body, model):
    connection = http.client.HTTPConnection(LOOPBACK, server.http_port, timeout=10)
    try:
        connection.putrequest("POST", f"/v2/models/{model}/infer")
        connection.putheader("Content-Type", "application/json")
        connection.putheader("Content-Length", str(MAX_BODY_BYTES + 1))
        connection.endheaders(b'{"inputs": [')  # the rest never comes: the answer must not wait for it
        response = connection.getresponse()
        status, answer = response.status, json.loads(response.read())
    finally:
        connection.close()
    assert status == 413 and f"the body is over {OVER_THE_LIMIT}" in answer["error"], answer
    (status, _, _), _ = _both(server, good_body)
    assert status == 200


def test_a_streamed_body_is_refused_as_it_passes_the_limit(server, good_body):
    """A chunked body says no length: it is answered once its bytes pass the limit, before it ends."""
    chunk, cap = b" " * (1 << 20), MAX_BODY_BYTES + (64 << 20)
    with socket.create_connection((LOOPBACK, server.http_port), timeout=30) as sock:
        sock.sendall(
            b"POST /v2/models/ours/infer HTTP/1.1\r\nHost: slipway\r\nContent-Type: application/json\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n"
        )
        sent = 0
        while sent < cap and not select.select([sock], [], [], 0)[0]:
            sock.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            sent += len(chunk)
        sock.sendall(b"0\r\n\r\n")
        response = http.client.HTTPResponse(sock)
        response.begin()
        status, answer = response.status, json.loads(response.read())
    assert status == 413 and f"the body is over {OVER_THE_LIMIT}" in answer["error"], answer
    assert sent < cap  # answered while the body was still coming
    (status, _, _), _ = _both(server, good_body)
    assert status == 200


def test_refused_requests_get_the_same_errors(server, good_body):
    tensor = good_body["inputs"][0]
    cases = [
        {"inputs": [{**tensor, "datatype": "INT32"}]},
        {"inputs": [{**tensor, "shape": [2, 7]}]},
        {"inputs": [{**tensor, "data": [math.nan] * len(tensor["data"])}]},
        {"inputs": [{**tensor, "name": "nope"}]},
        {"inputs": [tensor, tensor]},
    ]
    for body in cases:
        data = json.dumps(body, allow_nan=True).encode()
        (fast_status, fast, _), (mlserver_status, mlserver, _) = _both(server, data)
        assert fast_status == mlserver_status == 400, (fast, mlserver)
        assert fast == mlserver and "error" in fast
    (fast_status, fast, _), (mlserver_status, mlserver, _) = _both(server, good_body, version="99")
    assert fast_status == mlserver_status == 404 and fast == mlserver


def test_the_route_keeps_mlservers_model_and_http_metrics(server, good_body):
    def counts() -> tuple[float, float]:
        samples = scrape(server.metrics_url)
        model = sum(
            value
            for key, value in samples.items()
            if key.startswith("model_infer_request_success_total{") and 'model="ours"' in key
        )
        http = sum(
            value
            for key, value in samples.items()
            if key.startswith("rest_server_requests_total{")
            and "/v2/models/{model_name}/infer" in key
            and 'status_code="200"' in key
        )
        return model, http

    model_before, http_before = counts()
    for _ in range(3):
        _both(server, good_body)
    model_after, http_after = counts()
    assert model_after - model_before == 3
    assert http_after - http_before == 6  # both models' requests, under MLServer's path template


def test_the_log_says_which_route_answers(server):
    log = server.log_path.read_text()
    assert "REST infer requests for wrappers.runtime models are answered without FastAPI" in log


def test_a_chunked_body_is_read_whole(server, good_body):
    """Clients that stream their body send it in chunks: the route reads them all before parsing."""
    body = json.dumps(good_body).encode()
    answers = {}
    for model in ("ours", "fastapi"):
        connection = http.client.HTTPConnection(LOOPBACK, server.http_port, timeout=30)
        try:
            chunks = iter([body[:100], body[100:1000], body[1000:]])
            connection.request(
                "POST",
                f"/v2/models/{model}/infer",
                body=chunks,
                encode_chunked=True,
                headers={"Content-Type": "application/json"},
            )
            response = connection.getresponse()
            answers[model] = (response.status, _without_ids(json.loads(response.read())))
        finally:
            connection.close()
    assert answers["ours"][0] == answers["fastapi"][0] == 200
    assert answers["ours"][1]["outputs"] == answers["fastapi"][1]["outputs"]


def test_tritonclient_http_with_its_binary_defaults(server, digits_artifact, good_body):
    """tritonclient.http sends and asks for binary tensors unless told otherwise: the route reads and writes
    Triton's binary extension, for every mix of binary and JSON, on both URLs."""
    import numpy as np
    import onnxruntime as ort
    import tritonclient.http as httpclient

    tensor = good_body["inputs"][0]
    images = np.asarray(tensor["data"], dtype=np.float32).reshape(tensor["shape"])
    session = ort.InferenceSession(str(digits_artifact / "model.onnx"), providers=["CPUExecutionProvider"])
    expected = session.run(None, {tensor["name"]: images})[0]
    output = session.get_outputs()[0].name
    client = httpclient.InferenceServerClient(f"{LOOPBACK}:{server.http_port}")
    try:
        for binary_in in (True, False):
            for outputs in (
                None,
                [httpclient.InferRequestedOutput(output)],
                [httpclient.InferRequestedOutput(output, binary_data=False)],
            ):
                for version in ("", VERSION):
                    sent = httpclient.InferInput(tensor["name"], list(images.shape), "FP32")
                    sent.set_data_from_numpy(images, binary_data=binary_in)
                    result = client.infer("ours", [sent], outputs=outputs, model_version=version)
                    np.testing.assert_allclose(result.as_numpy(output), expected, rtol=1e-6, atol=1e-7)
                    binary_out = outputs is None or outputs[0]._binary
                    assert ("data" in result.get_output(output)) is not binary_out
        for compression in ("gzip", "deflate"):  # tritonclient.http's request compression, of binary and JSON
            for binary_in, model in ((True, "ours"), (False, "ours"), (False, "fastapi")):
                sent = httpclient.InferInput(tensor["name"], list(images.shape), "FP32")
                sent.set_data_from_numpy(images, binary_data=binary_in)
                outputs = [httpclient.InferRequestedOutput(output, binary_data=binary_in)]
                result = client.infer(model, [sent], outputs=outputs, request_compression_algorithm=compression)
                np.testing.assert_allclose(result.as_numpy(output), expected, rtol=1e-6, atol=1e-7)
        sent = httpclient.InferInput(tensor["name"], list(images.shape), "FP32")
        sent.set_data_from_numpy(images)
        with pytest.raises(Exception, match="400|422"):  # MLServer's own route has no binary extension
            client.infer("fastapi", [sent])
    finally:
        client.close()


def _binary(name, datatype, shape, size):
    return {"name": name, "datatype": datatype, "shape": shape, "parameters": {"binary_data_size": size}}


IMAGE = ("image", "FP32", [1, 8, 8, 1])


@pytest.mark.parametrize(
    "header_value, request_, tail, expected",
    [
        ("x", {"inputs": []}, b"", "Inference-Header-Content-Length must be a byte count, got 'x'"),
        ("9999", {"inputs": []}, b"", "Inference-Header-Content-Length is 9999 but the body has"),
        (None, {"inputs": [_binary(*IMAGE, 256)]}, b"\0" * 4, "its 256 bytes of binary data would end at byte"),
        (None, {"inputs": [_binary(*IMAGE, 4)]}, b"\0" * 4, "binary data hold 4 bytes but shape [1, 8, 8, 1] of FP32 needs 256"),
        (None, {"inputs": [_binary(*IMAGE, 256)]}, b"\0" * 260, "4 bytes after the JSON request"),
        (None, {"inputs": [{**_binary(*IMAGE, 256), "data": [0.0] * 64}]}, b"\0" * 256, "data too"),
        (None, {"inputs": [_binary(*IMAGE, -4)]}, b"", "binary_data_size must be a byte count, got -4"),
        (None, {"inputs": [{"name": "image"}]}, b"", "not a V2 inference request: inputs.0.shape: Field required"),
        (None, {"inputs": [_binary("image", "BYTES", [1], 2)]}, b"\1\0", "truncated"),
        (None, None, b"{oops", "not JSON"),
        ("gzip", {"inputs": []}, b"", "not valid gzip data"),
        ("br", {"inputs": []}, b"", "Content-Encoding 'br' is not supported; send gzip, deflate or none"),
    ],
    ids=[
        "not-a-number",
        "past-the-body",
        "short-body",
        "wrong-size",
        "bytes-left-over",
        "data-and-size",
        "negative-size",
        "not-v2",
        "bytes-cut",
        "not-json",
        "not-gzip",
        "unknown-encoding",
    ],
)
def test_a_binary_request_that_breaks_the_extension_gets_400_saying_how(
    server, good_body, header_value, request_, tail, expected
):
    header = json.dumps(request_).encode() if request_ is not None else b""
    headers = {"Inference-Header-Content-Length": str(len(header) or len(tail))}
    if header_value in ("gzip", "br"):
        headers["Content-Encoding"] = header_value
    elif header_value:
        headers["Inference-Header-Content-Length"] = header_value
    status, answer, _ = _send(f"{server.http_url}/v2/models/ours/infer", header + tail, headers)
    assert status == 400, answer
    assert expected in answer["error"]
    (status, _, _), _ = _both(server, good_body)
    assert status == 200


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    name=st.sampled_from(["image", "x"]),
    datatype=st.sampled_from(["FP32", "FP16", "INT64", "UINT8", "BOOL", "BYTES", "FP99"]),
    shape=st.lists(st.integers(-2, 70), max_size=4),
    size=st.one_of(st.integers(-3, 600), st.just(256), st.text(max_size=3)),
    tail=st.binary(max_size=600),
    header_off_by=st.integers(-5, 5),
)
def test_generated_binary_requests_never_get_a_5xx(server, good_body, name, datatype, shape, size, tail, header_off_by):
    header = json.dumps(
        {"inputs": [{"name": name, "datatype": datatype, "shape": shape, "parameters": {"binary_data_size": size}}]}
    ).encode()
    status, answer, _ = _send(
        f"{server.http_url}/v2/models/ours/infer",
        header + tail,
        {"Inference-Header-Content-Length": str(len(header) + header_off_by)},
    )
    assert status in (200, 400), answer
    if status == 400:
        assert answer["error"]
