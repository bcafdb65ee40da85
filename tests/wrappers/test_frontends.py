"""The hand-off between front ends and the session host (`wrappers.frontends`): slots, frames, a real host."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnxruntime.capi.onnxruntime_pybind11_state import InvalidArgument

from tests.wrappers.folders import model_folder
from wrappers.frontends import protocol
from wrappers.frontends.client import HostClient, HostUnavailable, host_socket
from wrappers.frontends.host import SessionHost
from wrappers.frontends.ring import ALIGN, MIN_SLOT_BYTES, SlotMap, SlotRing, layout, new_slot_file

DTYPES = {"a": (np.float32, (3,)), "b": (np.float16, (2, 2)), "c": (np.int64, ()), "d": (np.uint8, (5,)), "e": (np.bool_, ())}
ONNX_TYPES = {
    np.float32: TensorProto.FLOAT,
    np.float16: TensorProto.FLOAT16,
    np.int64: TensorProto.INT64,
    np.uint8: TensorProto.UINT8,
    np.bool_: TensorProto.BOOL,
}


def _arrays(rows: int, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {name: (rng.random((rows, *shape)) * 100).astype(dtype) for name, (dtype, shape) in DTYPES.items()}


def _expected(feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    return [feeds["a"] + np.float32(1), *(feeds[name] for name in "bcde")]


@pytest.fixture(scope="module")
def several_dtypes_model(tmp_path_factory) -> Path:
    """A graph of five inputs of five dtypes and shapes: `a` plus one, the others passed through."""
    inputs = [helper.make_tensor_value_info(name, ONNX_TYPES[dtype], ["N", *shape]) for name, (dtype, shape) in DTYPES.items()]
    outputs = [
        helper.make_tensor_value_info(f"{name}_out", ONNX_TYPES[dtype], ["N", *shape]) for name, (dtype, shape) in DTYPES.items()
    ]
    nodes = [helper.make_node("Add", ["a", "one"], ["a_out"])]
    nodes += [helper.make_node("Identity", [name], [f"{name}_out"]) for name in "bcde"]
    one = helper.make_tensor("one", TensorProto.FLOAT, [], [1.0])
    graph = helper.make_graph(nodes, "several_dtypes", inputs, outputs, initializer=[one])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    root = tmp_path_factory.mktemp("frontends")
    onnx.save(model, root / "graph.onnx")
    return model_folder(
        root / "models",
        "dtypes",
        root / "graph.onnx",
        extra={"max_batch_rows": 16, "frontends": 2, "warmup_runs": 1, "inline_below_ms": 0, "inference_threads": 1},
    )  # one run slot: requests queue behind a run


class RunningHost:
    """A real SessionHost serving on its own thread and event loop, as its own process would."""

    def __init__(self, model_dir: Path, socket_path: Path):
        self.host = SessionHost(model_dir)
        self.socket_path = socket_path
        self._loop = asyncio.new_event_loop()
        self._task: asyncio.Task | None = None
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 10
        while not socket_path.exists() and time.monotonic() < deadline:
            time.sleep(0.01)

    def _serve(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._task = self._loop.create_task(self.host.serve(self.socket_path))
        try:
            self._loop.run_until_complete(self._task)
        except asyncio.CancelledError:
            pass

    def stop(self) -> None:
        self._loop.call_soon_threadsafe(lambda: self._task and self._task.cancel())
        self._thread.join(timeout=10)


@pytest.fixture
def running_host(several_dtypes_model, tmp_path):
    host = RunningHost(several_dtypes_model, tmp_path / "host.sock")
    yield host
    host.stop()


# -- slots and frames: pure rules -----------------------------------------------------------------------


def test_layout_aligns_every_array_and_overlaps_none():
    arrays = [(np.dtype(np.uint8), (3,)), (np.dtype(np.float64), (2, 5)), (np.dtype(np.bool_), ()), (np.dtype(np.int16), (7,))]
    offsets, total = layout(arrays)
    ends = [offset + int(np.prod(shape)) * dtype.itemsize for (dtype, shape), offset in zip(arrays, offsets)]
    assert all(offset % ALIGN == 0 for offset in offsets)
    assert all(end <= start for end, start in zip(ends, offsets[1:]))
    assert total == ends[-1]


def test_arrays_of_several_dtypes_and_shapes_round_trip_through_a_slot_and_it_grows():
    fd = new_slot_file(0)
    writer, reader = SlotMap(fd, MIN_SLOT_BYTES), SlotMap(fd, MIN_SLOT_BYTES)  # two mappings, as two processes
    small = list(_arrays(4, seed=1).values())
    writer.write(small)
    for sent, got in zip(small, reader.copies([(array.dtype, array.shape) for array in small])):
        assert got.dtype == sent.dtype and got.shape == sent.shape and np.array_equal(got, sent)
    big = [np.arange(3 * MIN_SLOT_BYTES // 8, dtype=np.float64).reshape(3, -1)]  # three times the first size
    writer.write(big)
    assert writer.size > MIN_SLOT_BYTES
    reader.remap(writer.size)  # as a message's size tells the other side
    assert np.array_equal(reader.copies([(big[0].dtype, big[0].shape)])[0], big[0])


def test_a_string_tensor_is_refused_with_what_can_go():
    slot = SlotMap(new_slot_file(0), MIN_SLOT_BYTES)
    with pytest.raises(RuntimeError, match="only numeric tensors"):
        slot.write([np.array(["x"], dtype=object)])


def test_frames_round_trip_even_when_they_arrive_in_pieces():
    arrays = [(np.dtype("<f4"), (2, 3)), (np.dtype("|b1"), (2,)), (np.dtype("<i8"), ())]
    stream = protocol.request(3, 1 << 20, arrays) + protocol.reply(3, 1 << 21, arrays, 0.5, 7, 0.25)
    stream += protocol.error_reply(4, 1 << 20, protocol.INPUT_ERROR, "bad rank")
    reader = protocol.FrameReader()
    frames = [frame for at in range(0, len(stream), 5) for frame in reader.feed(stream[at : at + 5])]
    assert protocol.parse_request(frames[0]) == (3, 1 << 20, arrays)
    answer = protocol.parse_reply(frames[1])
    assert (answer.slot, answer.size, answer.arrays, answer.run_seconds, answer.batch_rows, answer.queue_seconds) == (
        3,
        1 << 21,
        arrays,
        0.5,
        7,
        0.25,
    )
    failed = protocol.parse_reply(frames[2])
    assert (failed.status, failed.message) == (protocol.INPUT_ERROR, "bad rank")


def test_a_slot_is_not_handed_out_again_before_it_is_released():
    async def scenario():
        ring = SlotRing(2)
        first, second = await ring.acquire(), await ring.acquire()
        third = asyncio.ensure_future(ring.acquire())
        await asyncio.sleep(0.05)
        assert not third.done()  # both slots in flight: the next request waits
        ring.release(second)
        assert await asyncio.wait_for(third, 5) == second
        assert first != second
        ring.close()

    asyncio.run(scenario())


def test_no_host_named_says_how_to_start_one(tmp_path):
    with pytest.raises(HostUnavailable, match="python -m wrappers.launch"):
        host_socket({})
    with pytest.raises(HostUnavailable, match="does not answer"):
        HostClient(tmp_path / "nobody.sock")


@pytest.mark.parametrize("value", [0, "2", 2.0, True])
def test_frontends_is_a_strict_count_of_at_least_one(value):
    from slipway.runtime_settings import SettingsError, parse_runtime_settings

    assert parse_runtime_settings({}).frontends == 1
    with pytest.raises(SettingsError, match="frontends"):
        parse_runtime_settings({"frontends": value})


def test_the_pod_s_front_ends_override_the_artifact_s_and_a_bad_count_is_refused_in_one_line():
    from slipway.runtime_settings import SettingsError, parse_runtime_settings
    from wrappers.frontends import FRONTENDS_ENV, with_pod_frontends

    config = parse_runtime_settings({"frontends": 2})
    assert with_pod_frontends(config, {}) is config
    assert with_pod_frontends(config, {FRONTENDS_ENV: "4"}).frontends == 4
    for bad in ("0", "two", "65"):
        with pytest.raises(SettingsError, match=rf"^\${FRONTENDS_ENV} is '{bad}': set it to a whole number"):
            with_pod_frontends(config, {FRONTENDS_ENV: bad})


def test_shared_memory_is_refused_with_several_front_ends():
    from slipway.runtime_settings import SettingsError, parse_runtime_settings
    from wrappers.frontends.hosted import serve_through_host

    with pytest.raises(SettingsError, match="shared_memory false or frontends 1"):
        serve_through_host(parse_runtime_settings({"frontends": 2, "shared_memory": True}))


def _spec(name: str, shape: list[int]):
    from engine.tensor_specs import TensorSpec

    return TensorSpec(name, "FP32", shape)


def test_on_a_gpu_the_host_merges_up_to_the_largest_bucket_unless_the_graph_forbids_it():
    from wrappers.running.planning import GPU_LARGEST_BUCKET, gpu_merge_rows

    dynamic = ([_spec("x", [-1, 3])], [_spec("y", [-1, 10])])
    assert gpu_merge_rows(*dynamic, None)[0] == GPU_LARGEST_BUCKET
    assert gpu_merge_rows(*dynamic, [4, 16, 8])[0] == 16  # batch_buckets as set
    assert gpu_merge_rows(*dynamic, [])[0] == GPU_LARGEST_BUCKET  # no padding: still merged
    assert gpu_merge_rows([_spec("x", [8, 3])], [_spec("y", [8, 10])], None)[0] == 8
    rows, why = gpu_merge_rows([_spec("x", [])], [_spec("y", [-1])], None)
    assert rows == 1 and "scalar" in why


def test_the_host_chooses_unset_settings_as_the_runtime_does_and_explicit_ones_win(several_dtypes_model, tmp_path):
    from wrappers.defaults.choice import CHOSEN, EXPLICIT, MEASURED

    explicit = SessionHost(several_dtypes_model)  # max_batch_rows 16 and inline_below_ms 0 set
    assert explicit.config.max_batch_rows == 16 and explicit.choices["max_batch_rows"].source == EXPLICIT
    folder = model_folder(tmp_path, "unset", several_dtypes_model / "model.onnx", extra={"frontends": 2})
    host = SessionHost(folder)  # on the CPU: timed here, as the runtime times its own session
    assert host.choices["inline_below_ms"].source == MEASURED
    assert {name: getattr(host.config, name) for name in CHOSEN} == {name: c.value for name, c in host.choices.items()}
    sent = host.description()["choices"]  # what the front ends report in their metadata
    assert sent["inline_below_ms"][:2] == [host.config.inline_below_ms, MEASURED]


def test_a_host_that_cannot_start_fails_the_supervisor_in_one_line_naming_it(several_dtypes_model, tmp_path):
    import shutil

    from wrappers.frontends.supervisor import Supervisor, SupervisorError, frontends_of

    folder = tmp_path / "broken"
    shutil.copytree(several_dtypes_model, folder)
    (folder / "model.onnx").unlink()
    assert frontends_of(folder) == 2
    supervisor = Supervisor(folder, 2, workdir=tmp_path / "work")
    (tmp_path / "work").mkdir()
    with pytest.raises(SupervisorError, match=r"^session host \(pid \d+\) exited with status 2: .*model.onnx does not exist"):
        supervisor.start()
    assert all(child.process.poll() is not None for child in supervisor.children)
    assert len(supervisor.children) == 1  # no front end was started for a host that never listened


def test_the_launcher_supervises_a_folder_of_several_front_ends_but_not_from_a_front_end(
    several_dtypes_model, tmp_path, monkeypatch
):
    from wrappers import frontends

    monkeypatch.delenv(frontends.HOST_SOCKET_ENV, raising=False)
    assert frontends.supervises(several_dtypes_model)  # its settings say frontends: 2
    assert not frontends.supervises(several_dtypes_model.parent)  # a folder of models: each serves as it says
    monkeypatch.setenv(frontends.HOST_SOCKET_ENV, str(tmp_path / "host.sock"))
    assert not frontends.supervises(several_dtypes_model)  # a front end itself serves


# -- a real session host and front-end clients --------------------------------------------------------------


def test_two_front_ends_get_their_own_rows_back_of_every_dtype(running_host):
    async def scenario():
        clients = [HostClient(running_host.socket_path, slots=4) for _ in range(2)]
        for client in clients:
            await client.start()
        assert [spec.name for spec in clients[0].inputs] == list(DTYPES)
        requests = [(clients[index % 2], _arrays(1 + index % 3, seed=index)) for index in range(12)]
        answers = await asyncio.gather(*(client.submit(feeds, len(feeds["a"])) for client, feeds in requests))
        for (_, feeds), outputs in zip(requests, answers):
            for got, expected in zip(outputs, _expected(feeds)):
                assert got.dtype == expected.dtype and np.array_equal(got, expected)
        for client in clients:
            client.close()

    asyncio.run(scenario())


def test_rows_from_two_front_ends_merge_into_one_run(running_host):
    host = running_host.host
    gate, entered = threading.Event(), threading.Event()
    run = host.runner.run

    def held_run(names, feeds):  # the real session, held until the test has queued work behind it
        entered.set()
        gate.wait(10)
        return run(names, feeds)

    host.runner.run = held_run
    runs: list[int] = []

    async def scenario():
        clients = [HostClient(running_host.socket_path, slots=4, observe=lambda *seen: runs.append(seen[3])) for _ in range(2)]
        for client in clients:
            await client.start()
        blocker = asyncio.ensure_future(clients[0].submit(_arrays(1, seed=0), 1))
        await _until(entered.is_set)  # the first request's run has started, and waits
        queued = [asyncio.ensure_future(client.submit(_arrays(2, seed=index), 2)) for index, client in enumerate(clients)]
        await _until(lambda: len(host.batcher._queue) == 2)  # both front ends' requests wait behind the held run
        gate.set()
        await asyncio.gather(blocker, *queued)
        for client in clients:
            client.close()

    try:
        asyncio.run(scenario())
    finally:
        host.runner.run = run
    assert sorted(run for run in runs if run) == [1, 4]  # one run of the first request, one of both others'


def test_a_slot_is_never_reused_before_its_outputs_are_read(running_host):
    async def scenario():
        client = HostClient(running_host.socket_path, slots=1)
        await client.start()
        feeds = [_arrays(2, seed=index) for index in range(6)]
        answers = await asyncio.gather(*(client.submit(one, 2) for one in feeds))  # all through the one slot
        for one, outputs in zip(feeds, answers):
            assert np.array_equal(outputs[0], one["a"] + np.float32(1))
        assert client.ring.free_count() == 1
        client.close()

    asyncio.run(scenario())


def test_an_input_the_graph_refuses_fails_as_onnx_runtime_fails_and_the_host_serves_on(running_host):
    async def scenario():
        client = HostClient(running_host.socket_path, slots=2)
        await client.start()
        bad = _arrays(1, seed=3) | {"a": np.zeros((1, 4), dtype=np.float32)}
        with pytest.raises(InvalidArgument, match="a"):
            await client.submit(bad, 1)
        good = _arrays(1, seed=4)
        assert np.array_equal((await client.submit(good, 1))[0], good["a"] + np.float32(1))
        client.close()

    asyncio.run(scenario())


def test_a_host_that_goes_away_fails_what_waits_and_stops_the_front_end(several_dtypes_model, tmp_path):
    running = RunningHost(several_dtypes_model, tmp_path / "host.sock")
    stopped = threading.Event()

    async def scenario():
        client = HostClient(running.socket_path, slots=2, on_lost=stopped.set)
        await client.start()
        await client.submit(_arrays(1, seed=0), 1)
        running.stop()
        await _until(stopped.is_set)
        with pytest.raises(RuntimeError, match="session host is gone"):
            await client.submit(_arrays(1, seed=1), 1)
        client.close()

    asyncio.run(scenario())


async def _until(condition, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting"
        await asyncio.sleep(0.005)


# -- a real server of two front ends and a host -----------------------------------------------------------


@pytest.mark.slow
def test_two_front_ends_answer_like_one_and_a_dead_host_stops_them_all(digits_artifact, digits_server, tmp_path):
    """gRPC and REST from a server of two front ends answer as the one-process server does, a bad request gets a
    4xx, metrics count every front end's requests, and killing the host ends the server instead of hanging it."""
    import grpc
    import psutil

    from slipway.local_server import LocalServer, model_name
    from tests.wrappers.v2 import GrpcClient, error_text, json_input, post, raw_output, raw_request, scrape
    from wrappers import frontends

    name = model_name(digits_artifact)
    folder = model_folder(tmp_path, name, digits_artifact / "model.onnx", extra={"frontends": 2, "max_batch_rows": 8})
    images = np.random.default_rng(7).random((3, 8, 8, 1)).astype(np.float32)
    request = raw_request(name, {"image": ("FP32", [3, 8, 8, 1], images.tobytes())})
    body = {"inputs": [json_input("image", images)]}
    with LocalServer(folder) as server:
        children = {child: child.cmdline() for child in psutil.Process(server.pid).children()}
        front_ends = [child for child, command in children.items() if "--front-end" in command]
        host = next(child for child, command in children.items() if "wrappers.frontends.host" in command)
        assert len(front_ends) == 2
        from wrappers.frontends.host import serving_file

        socket_path = Path(front_ends[0].environ()[frontends.HOST_SOCKET_ENV])
        assert serving_file(socket_path).read_text() == "2\n"  # ready means every front end serves, not the first
        answers = {}
        for label, target in (("one", digits_server), ("two", server)):
            channels = [GrpcClient(target.grpc_target) for _ in range(4)]  # HTTP/2 keeps a channel on one process
            try:
                answers[label] = [raw_output(channel.infer(request)) for channel in channels]
            finally:
                for channel in channels:
                    channel.close()
            answers[label + "-rest"] = [
                np.array(post(f"{target.http_url}/v2/models/{name}/infer", body)[1]["outputs"][0]["data"]) for _ in range(4)
            ]
        for got in answers["two"]:
            np.testing.assert_allclose(got, answers["one"][0], rtol=1e-6, atol=1e-7)
        for got in answers["two-rest"]:
            np.testing.assert_allclose(got, answers["one-rest"][0], rtol=1e-6, atol=1e-7)
        status, refused = post(f"{server.http_url}/v2/models/{name}/infer", {"inputs": [json_input("image", images[:, :4])]})
        assert status == 400 and "must have shape" in error_text(refused)
        bad = raw_request(name, {"image": ("FP32", [3, 8, 4, 1], images[:, :, :4].tobytes())})
        client = GrpcClient(server.grpc_target)
        with pytest.raises(grpc.RpcError) as caught:
            client.infer(bad)
        client.close()
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        samples = scrape(server.metrics_url)  # whichever front end answers sums every process's files

        def total(prefix: str) -> float:
            return sum(value for key, value in samples.items() if key.startswith(prefix))

        assert total("slipway_batch_rows_sum") == 8 * 3  # each run observed once, by one of the front ends
        assert total("slipway_predicted_class_total") == 8 * 3  # counted by the host
        host.kill()
        psutil.Process(server.pid).wait(timeout=30)  # the supervisor sees the host gone and stops the front ends
        assert not any(process.is_running() and process.status() != psutil.STATUS_ZOMBIE for process in front_ends)
        assert "session host" in server.failure_reason()
