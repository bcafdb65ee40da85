"""Tensors in system shared memory: the regions themselves, then a real MLServer with tritonclient."""

from __future__ import annotations

import concurrent.futures
import os
from types import SimpleNamespace as Parameters  # MLServer's Parameters, as far as location() reads it

import grpc
import numpy as np
import onnxruntime as ort
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from slipway.artifact import load_input_example
from slipway.local_server import LocalServer
from slipway.repository_access import API_ENV
from slipway.v2_wire import Location
from tests.conftest import refused_at_load
from tests.wrappers.folders import model_folder
from tests.wrappers.v2 import GrpcClient, error_text, post, raw_request
from wrappers.shm.regions import Regions, SharedMemoryError, location

IMAGE = (8, 8, 1)


# -- the regions, on files in a temporary folder -------------------------------------------


@pytest.fixture
def regions(tmp_path):
    (tmp_path / "block").write_bytes(bytes(1024))
    (tmp_path / "link").symlink_to(tmp_path / "block")
    return Regions(root=tmp_path)


def test_a_region_reads_inputs_and_takes_outputs_where_the_client_put_them(regions, tmp_path):
    regions.register("r", "/block", 64, 512)
    assert regions.status() == [{"name": "r", "key": "/block", "offset": 64, "byte_size": 512}]
    values = np.arange(6, dtype=np.float32)
    with open(tmp_path / "block", "r+b") as block:
        block.seek(64 + 16)
        block.write(values.tobytes())
    read = regions.read(Location("r", 16, 24), "FP32", [2, 3], "x")
    np.testing.assert_array_equal(read, values)
    assert regions.write(Location("r", 100, 50), values * 2, "FP32", "y") == 24
    written = (tmp_path / "block").read_bytes()[64 + 100 : 64 + 124]
    np.testing.assert_array_equal(np.frombuffer(written, np.float32), values * 2)
    odd = regions.read(Location("r", 101, 24), "FP32", [6], "x")  # not aligned for float32: copied, still right
    assert odd.flags.aligned and odd.tobytes() == (tmp_path / "block").read_bytes()[64 + 101 : 64 + 125]


def test_an_object_shrunk_after_registering_is_refused_not_a_crash(regions, tmp_path):
    """A mapped read past a shrunk object's end would be SIGBUS, killing the server (and this test)."""
    regions.register("r", "/block", 0, 1024)
    os.truncate(tmp_path / "block", 100)
    with pytest.raises(SharedMemoryError, match=r"object '/block' of region 'r' no longer holds 528 bytes"):
        regions.read(Location("r", 512, 16), "FP32", [4], "x")
    with pytest.raises(SharedMemoryError, match="no longer holds 116 bytes"):
        regions.write(Location("r", 100, 16), np.ones(4, np.float32), "FP32", "y")
    assert (tmp_path / "block").stat().st_size == 100  # not grown back by the write
    np.testing.assert_array_equal(regions.read(Location("r", 0, 16), "FP32", [4], "x"), np.zeros(4, np.float32))


@pytest.mark.parametrize(
    "name, key, offset, byte_size, expected",
    [
        ("r", "../etc/passwd", 0, 8, "is not a shared-memory object name"),
        ("r", "/a/b", 0, 8, "is not a shared-memory object name"),
        ("r", "/missing", 0, 8, "cannot open shared-memory object '/missing' (No such file or directory)"),
        ("r", "/link", 0, 8, "cannot open shared-memory object '/link' (Too many levels of symbolic links)"),
        ("r", "/block", 1000, 100, "offset + byte_size is 1100 bytes but object '/block' holds 1024"),
        ("r", "/block", -1, 8, "offset must be an integer >= 0, got -1"),
        ("r", "/block", 0, None, "byte_size must be an integer >= 0, got None"),
        ("", "/block", 0, 8, "a region needs a name"),
    ],
)
def test_registering_a_region_that_cannot_be_mapped_says_what_to_send(regions, name, key, offset, byte_size, expected):
    with pytest.raises(SharedMemoryError) as caught:
        regions.register(name, key, offset, byte_size)
    assert expected in str(caught.value)
    assert regions.status() == []


def test_regions_refuse_what_lies_outside_them_or_does_not_fit(regions):
    regions.register("r", "block", 0, 256)
    with pytest.raises(SharedMemoryError, match="already registered"):
        regions.register("r", "block", 0, 8)
    with pytest.raises(SharedMemoryError, match=r"no shared-memory region named 'q' is registered \(registered: \['r'\]\)"):
        regions.read(Location("q", 0, 4), "FP32", [1], "x")
    with pytest.raises(SharedMemoryError, match=r"bytes 200\.\.300 lie outside region 'r' \(256 bytes\)"):
        regions.read(Location("r", 200, 100), "UINT8", [100], "x")
    with pytest.raises(SharedMemoryError, match="shared_memory_byte_size is 8 but shape \\[3\\] of FP32 needs 12 bytes"):
        regions.read(Location("r", 0, 8), "FP32", [3], "x")
    with pytest.raises(SharedMemoryError, match="output 'y' needs 40 bytes but shared_memory_byte_size is 16"):
        regions.write(Location("r", 0, 16), np.zeros(10, np.float32), "FP32", "y")
    with pytest.raises(SharedMemoryError, match="truncated"):
        regions.read(Location("r", 0, 6), "BYTES", [1], "x")  # a length prefix of 0, then 2 stray bytes
    regions.unregister("not-there")  # forgetting what is not there is no error
    regions.unregister()
    assert regions.status() == []


@pytest.mark.parametrize(
    "parameters, expected",
    [
        (None, None),
        (Parameters(content_type="np"), None),
        (Parameters(shared_memory_region="r", shared_memory_byte_size=8), Location("r", 0, 8)),
        (Parameters(shared_memory_region="r", shared_memory_offset=4, shared_memory_byte_size=8), Location("r", 4, 8)),
        (Parameters(shared_memory_byte_size=8), "given without shared_memory_region"),
        (Parameters(shared_memory_region="r"), "needs shared_memory_byte_size"),
        (Parameters(shared_memory_region=7, shared_memory_byte_size=8), "must be a region's name, got 7"),
        (Parameters(shared_memory_region="r", shared_memory_byte_size="8"), "must be an integer >= 0, got '8'"),
    ],
)
def test_a_tensors_location_comes_from_its_parameters(parameters, expected):
    if isinstance(expected, str):
        with pytest.raises(SharedMemoryError, match=expected):
            location(parameters, "x")
    else:
        assert location(parameters, "x") == expected


# -- a real MLServer, with tritonclient ------------------------------------------------------


@pytest.fixture(scope="module")
def server(tmp_path_factory, digits_artifact):
    root = tmp_path_factory.mktemp("shared-memory")
    digits = digits_artifact / "model.onnx"
    model_folder(root, "digits-shm", digits, extra={"shared_memory": True, "max_batch_rows": 4, "inline_below_ms": 0})
    model_folder(
        root, "digits-batched", digits, extra={"shared_memory": True}, batching={"max_batch_size": 4, "max_batch_time": 0.05}
    )
    model_folder(root, "digits-off", digits)
    with LocalServer(root) as running:
        yield running


@pytest.fixture(scope="module")
def example(digits_artifact):
    images = load_input_example(digits_artifact)[0]["image"]
    session = ort.InferenceSession(str(digits_artifact / "model.onnx"), providers=["CPUExecutionProvider"])
    return images, session.run(None, {"image": images})[0]


@pytest.fixture
def clients(server):
    import tritonclient.grpc as grpcclient
    import tritonclient.http as httpclient

    http = httpclient.InferenceServerClient(server.http_url.removeprefix("http://"))
    grpc_ = grpcclient.InferenceServerClient(server.grpc_target)
    yield http, grpc_
    http.unregister_system_shared_memory()
    http.close()
    grpc_.close()


@pytest.fixture
def blocks():
    """Shared-memory objects made by tritonclient's own utilities, destroyed afterwards."""
    import tritonclient.utils.shared_memory as shm

    made = []

    def make(name: str, byte_size: int):
        handle = shm.create_shared_memory_region(name, f"/slipway-test-{os.getpid()}-{name}", byte_size)
        made.append(handle)
        return handle, f"/slipway-test-{os.getpid()}-{name}"

    yield make
    for handle in made:
        shm.destroy_shared_memory_region(handle)


@pytest.mark.slow
def test_tritonclient_sends_and_receives_tensors_through_shared_memory_over_grpc_and_http(clients, blocks, example):
    import tritonclient.grpc as grpcclient
    import tritonclient.http as httpclient
    import tritonclient.utils.shared_memory as shm

    http, grpc_ = clients
    images, expected = example
    inputs, input_key = blocks("in", images.nbytes)
    outputs, output_key = blocks("out", expected.nbytes)
    shm.set_shared_memory_region(inputs, [images])
    http.register_system_shared_memory("in", input_key, images.nbytes)
    grpc_.register_system_shared_memory("out", output_key, expected.nbytes)  # either protocol registers
    assert {region["name"] for region in http.get_system_shared_memory_status()} == {"in", "out"}
    assert http.get_system_shared_memory_status("in") == [
        {"name": "in", "key": input_key, "offset": 0, "byte_size": images.nbytes}
    ]
    status = grpc_.get_system_shared_memory_status("out").regions["out"]
    assert (status.name, status.key, status.byte_size) == ("out", output_key, expected.nbytes)
    with pytest.raises(Exception, match="is not a shared-memory object name"):
        grpc_.register_system_shared_memory("bad", "../../etc/passwd", 8)

    for module, client in ((grpcclient, grpc_), (httpclient, http)):
        tensor = module.InferInput("image", list(images.shape), "FP32")
        tensor.set_shared_memory("in", images.nbytes)
        for model in ("digits-shm", "digits-batched"):  # the runtime's own merging, then MLServer's batching
            answered = client.infer(model, [tensor])  # outputs come back in the response
            np.testing.assert_allclose(answered.as_numpy("probabilities"), expected, atol=1e-6)
        wanted = module.InferRequestedOutput("probabilities")
        wanted.set_shared_memory("out", expected.nbytes)
        result = client.infer("digits-shm", [tensor], outputs=[wanted])
        output = result.get_output("probabilities")
        shape = list(output.shape if module is grpcclient else output["shape"])
        got = shm.get_contents_as_numpy(outputs, np.float32, shape)
        np.testing.assert_allclose(got, expected, atol=1e-6)
        shm.set_shared_memory_region(outputs, [np.zeros_like(expected)])  # the next round must write it again

    grpc_.unregister_system_shared_memory("in")
    assert [region["name"] for region in http.get_system_shared_memory_status()] == ["out"]
    tensor = grpcclient.InferInput("image", list(images.shape), "FP32")
    tensor.set_shared_memory("in", images.nbytes)
    with pytest.raises(Exception, match="no shared-memory region named 'in' is registered"):
        grpc_.infer("digits-shm", [tensor])


def _shared_request(model, region, byte_size, rows=3, offset=0, data=None):
    tensor = {
        "name": "image",
        "datatype": "FP32",
        "shape": [rows, *IMAGE],
        "parameters": {"shared_memory_region": region, "shared_memory_offset": offset},
    }
    if byte_size is not None:
        tensor["parameters"]["shared_memory_byte_size"] = byte_size
    if data is not None:
        tensor["data"] = data
    return model, {"inputs": [tensor]}


@pytest.mark.slow
@pytest.mark.parametrize(
    "model_body, expected",
    [
        (_shared_request("digits-shm", "nope", 768), "no shared-memory region named 'nope' is registered"),
        (_shared_request("digits-shm", "in", 764), "shared_memory_byte_size is 764 but shape [3, 8, 8, 1] of FP32 needs 768"),
        (_shared_request("digits-shm", "in", 768, offset=64), "bytes 64..832 lie outside region 'in' (768 bytes)"),
        (_shared_request("digits-shm", "in", None), "needs shared_memory_byte_size"),
        (_shared_request("digits-shm", "in", 256, rows=1, data=[0.5] * 64), "carries data too; send one or the other"),
        (_shared_request("digits-off", "in", 768), "model digits-off does not use shared memory"),
    ],
)
def test_bad_shared_memory_requests_get_400_and_invalid_argument_naming_what_to_send(
    server, clients, blocks, model_body, expected
):
    http, _ = clients
    _, key = blocks("in", 768)  # room for 3 images
    http.register_system_shared_memory("in", key, 768)
    model, body = model_body
    status, answer = post(f"{server.http_url}/v2/models/{model}/infer", body)
    assert status == 400 and expected in error_text(answer), answer
    tensor = body["inputs"][0]
    if "data" not in tensor:  # the same request over gRPC
        request = raw_request(model, {})
        grpc_tensor = request.inputs.add(name="image", datatype="FP32")
        grpc_tensor.shape.extend(tensor["shape"])
        for key_, value in tensor["parameters"].items():
            if isinstance(value, str):
                grpc_tensor.parameters[key_].string_param = value
            else:
                grpc_tensor.parameters[key_].int64_param = value
        client = GrpcClient(server.grpc_target)
        try:
            with pytest.raises(Exception) as caught:
                client.infer(request)
            assert caught.value.code().name == "INVALID_ARGUMENT" and expected in caught.value.details()
        finally:
            client.close()


@pytest.mark.slow
def test_registration_is_refused_with_400_saying_what_to_send(server, clients, blocks):
    http, _ = clients
    _, key = blocks("small", 64)
    base = f"{server.http_url}/v2/systemsharedmemory/region"
    for name, body, expected in [
        ("a", {"key": "/slipway-no-such-object", "byte_size": 8}, "cannot open shared-memory object"),
        ("a", {"key": "../../etc/passwd", "byte_size": 8}, "is not a shared-memory object name"),
        ("a", {"key": key, "byte_size": 65}, "offset + byte_size is 65 bytes but object"),
        ("a", b"not json", "send a JSON object"),
    ]:
        status, answer = post(f"{base}/{name}/register", body)
        assert status == 400 and expected in answer["error"], answer
    http.register_system_shared_memory("a", key, 64)
    status, answer = post(f"{base}/a/register", {"key": key, "byte_size": 8})
    assert status == 400 and "region 'a' is already registered" in answer["error"]


@pytest.mark.slow
def test_requests_from_many_regions_at_once_each_get_their_own_rows(server, clients, blocks, example):
    """MLServer's adaptive batching merges requests whose inputs lie in different regions."""
    import tritonclient.grpc as grpcclient
    import tritonclient.utils.shared_memory as shm

    http, grpc_ = clients
    images, expected = example
    slots = []
    for index in range(8):
        rows = 1 + index % 3
        handle, key = blocks(f"slot{index}", images[:rows].nbytes)
        shm.set_shared_memory_region(handle, [images[index : index + rows]])
        http.register_system_shared_memory(f"slot{index}", key, images[:rows].nbytes)
        slots.append((f"slot{index}", index, rows))

    def infer(slot):
        name, start, rows = slot
        tensor = grpcclient.InferInput("image", [rows, *IMAGE], "FP32")
        tensor.set_shared_memory(name, images[:rows].nbytes)
        return slot, grpc_.infer("digits-batched", [tensor]).as_numpy("probabilities")

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        for (_, start, rows), got in pool.map(infer, slots * 3):
            np.testing.assert_allclose(got, expected[start : start + rows], atol=1e-6)
    wanted = grpcclient.InferRequestedOutput("probabilities")
    wanted.set_shared_memory("slot0", 40)
    tensor = grpcclient.InferInput("image", [1, *IMAGE], "FP32")
    tensor.set_shared_memory("slot0", images[:1].nbytes)
    with pytest.raises(Exception, match="cannot write outputs into shared memory"):
        grpc_.infer("digits-batched", [tensor], outputs=[wanted])


@pytest.mark.slow  # needs the trained digits model (digits_artifact)
def test_a_reloaded_model_keeps_its_regions_shared_memory_and_raw_grpc_path(tmp_path, digits_artifact, blocks, example):
    """MLServer reloads a model by loading the new instance before unloading the old one: the old one
    must not switch off, under the new one, what both hold by name."""
    import tritonclient.grpc as grpcclient
    import tritonclient.http as httpclient
    import tritonclient.utils.shared_memory as shm

    images, expected = example
    folder = model_folder(tmp_path, "digits-reload", digits_artifact / "model.onnx", extra={"shared_memory": True})
    with LocalServer(folder, extra_env={API_ENV: "open"}) as server:  # reloaded over loopback below
        http = httpclient.InferenceServerClient(server.http_url.removeprefix("http://"))
        grpc_ = grpcclient.InferenceServerClient(server.grpc_target)
        handle, key = blocks("reload", images[:1].nbytes)
        shm.set_shared_memory_region(handle, [images[:1]])
        http.register_system_shared_memory("reload", key, images[:1].nbytes)
        http.load_model("digits-reload")  # loaded already: a reload
        assert "Reloaded model 'digits-reload' successfully" in server.log_path.read_text()
        assert [region["name"] for region in http.get_system_shared_memory_status()] == ["reload"]
        tensor = grpcclient.InferInput("image", [1, *IMAGE], "FP32")
        tensor.set_shared_memory("reload", images[:1].nbytes)
        np.testing.assert_allclose(grpc_.infer("digits-reload", [tensor]).as_numpy("probabilities"), expected[:1], atol=1e-6)
        client = GrpcClient(server.grpc_target)  # MLServer's own raw decoding would fail this with INTERNAL
        with pytest.raises(grpc.RpcError) as caught:
            client.infer(raw_request("digits-reload", {"image": ("FP32", [1, *IMAGE], b"\0" * 7)}))
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        for closing in (client, http, grpc_):
            closing.close()


@pytest.mark.slow
def test_the_endpoints_are_off_where_no_model_turns_shared_memory_on(digits_server):
    status, answer = post(f"{digits_server.http_url}/v2/systemsharedmemory/region/a/register", {"key": "/a", "byte_size": 8})
    assert status == 400 and "system shared memory is off in this server" in answer["error"]


@pytest.mark.slow
def test_shared_memory_in_a_worker_process_is_refused_at_load_saying_what_to_set(tmp_path, digits_artifact):
    folder = model_folder(tmp_path, "digits-workers", digits_artifact / "model.onnx", extra={"shared_memory": True})
    refused_at_load(folder, "shared_memory needs the model in the server's own process", parallel_workers=1)


@pytest.fixture(scope="module")
def generated_region(server):
    """A registered 1 kB region of small floats, for the generated requests."""
    import tritonclient.http as httpclient
    import tritonclient.utils.shared_memory as shm

    key = f"/slipway-test-{os.getpid()}-generated"
    handle = shm.create_shared_memory_region("generated", key, 1024)
    shm.set_shared_memory_region(handle, [np.linspace(0, 1, 256, dtype=np.float32)])
    http = httpclient.InferenceServerClient(server.http_url.removeprefix("http://"))
    http.register_system_shared_memory("generated", key, 1024)
    yield
    http.unregister_system_shared_memory("generated")
    http.close()
    shm.destroy_shared_memory_region(handle)


@pytest.mark.slow
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    model=st.sampled_from(["digits-shm", "digits-batched", "digits-off"]),
    region=st.just("generated") | st.sampled_from(["nope", ""]),  # `|` draws each side half the time
    rows=st.integers(0, 5),
    datatype=st.just("FP32") | st.sampled_from(["FP64", "UINT8", "BYTES"]),
    offset=st.sampled_from([0, 256]) | st.integers(-8, 1100),
    byte_size=st.sampled_from(["exact", None]) | st.integers(-8, 1100),  # exact: what the rows need
    output=st.none() | st.tuples(st.sampled_from(["generated", "nope"]), st.integers(-8, 1100), st.integers(-8, 1100)),
)
def test_generated_shared_memory_requests_are_answered_or_invalid_argument(
    server, generated_region, model, region, rows, datatype, offset, byte_size, output
):
    request = raw_request(model, {})
    tensor = request.inputs.add(name="image", datatype=datatype)
    tensor.shape.extend([rows, *IMAGE])
    tensor.parameters["shared_memory_region"].string_param = region
    tensor.parameters["shared_memory_offset"].int64_param = offset
    if byte_size is not None:
        tensor.parameters["shared_memory_byte_size"].int64_param = rows * 256 if byte_size == "exact" else byte_size
    if output is not None:
        wanted = request.outputs.add(name="probabilities")
        wanted.parameters["shared_memory_region"].string_param = output[0]
        wanted.parameters["shared_memory_offset"].int64_param = output[1]
        wanted.parameters["shared_memory_byte_size"].int64_param = output[2]
    client = GrpcClient(server.grpc_target)
    try:
        response = client.infer(request)
    except grpc.RpcError as err:
        assert err.code() == grpc.StatusCode.INVALID_ARGUMENT, (err.code(), err.details())
    else:
        assert list(response.outputs[0].shape) == [rows, 10]
        event("answered")
    finally:
        client.close()
