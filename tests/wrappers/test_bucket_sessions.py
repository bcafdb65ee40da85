"""A session per bucket on a GPU: every session meets one input shape, and each was warmed before the model was ready.

ONNX Runtime's CUDA convolutions re-plan their kernels whenever a run's shape differs from the previous run's on
the same session (`wrappers.running.bucket_sessions`). No GPU is needed to check the runtime's side of it: the runtime is
loaded as MLServer loads it with sessions that say they run on CUDA (a CPU session underneath, each run recorded
with its session, shape and time), and concurrent requests of mixed sizes are driven through `predict`.
"""

import json
import subprocess
import sys

import pytest

from slipway.artifact import SETTINGS_FILE
from slipway.paths import PROJECT_ROOT
from slipway.runtime_settings import RuntimeSettings
from tests.graphs import matmul_graph
from tests.wrappers.folders import model_folder
from wrappers.defaults import gpu as gpu_choice
from wrappers.defaults.choice import DEFAULT, EXPLICIT, MEASURED
from wrappers.running import bucket_sessions
from wrappers.running.bucket_sessions import BucketError, BucketRunner

# In its own process, as MLServer runs the runtime. Sessions are CPU sessions dressed as CUDA ones: each run sleeps
# 2 ms (a GPU's run, long enough for requests to queue and merge) and is recorded.
DRIVE = r"""
import asyncio, json, sys, threading, time
import numpy as np
import onnxruntime as ort
from mlserver.settings import ModelSettings
from mlserver.types import InferenceRequest, RequestInput
import engine.session as session_module
from wrappers.running import bucket_sessions
from wrappers.defaults import gpu as gpu_choice

RUNS = []  # (session number, shape, perf_counter time, thread)
LOCK = threading.Lock()
NUMBERS = iter(range(1 << 30))  # not id(): a session timed at load and dropped may leave its id to a later one

class CudaLooking:
    def __init__(self, path, settings):
        self._real = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        self._options = settings.cuda.provider_options()
        self.number = next(NUMBERS)
    def get_providers(self):
        return ["CUDAExecutionProvider", "CPUExecutionProvider"]
    def get_provider_options(self):
        return {"CUDAExecutionProvider": self._options}
    def get_inputs(self):
        return self._real.get_inputs()
    def get_outputs(self):
        return self._real.get_outputs()
    def run(self, names, feeds):
        time.sleep(0.002)
        with LOCK:
            RUNS.append((self.number, tuple(next(iter(feeds.values())).shape), time.perf_counter(),
                         threading.current_thread().name))
        return self._real.run(names, feeds)

def create(path, settings):
    return CudaLooking(path, settings)

session_module.create_session = create
bucket_sessions.create_session = create
gpu_choice.create_session = create
import wrappers.running.width
wrappers.running.width.create_session = create
from wrappers.runtime import OnnxRuntime

async def main(path, requests, concurrency):
    settings = ModelSettings.parse_file(path)
    settings._source = path
    model = OnnxRuntime(settings)
    await model.load()
    ready = time.perf_counter()
    copies = getattr(model._runner, "copies", [{0: model._runner}])
    served_ids = {runner.session.number for copy in copies for runner in copy.values()}
    rng = np.random.default_rng(0)
    weight = np.arange(12, dtype=np.float32).reshape(4, 3)
    queue = asyncio.Queue()
    for index in range(requests):
        queue.put_nowait(rng.uniform(-1, 1, (int(rng.integers(1, 8)), 4)).astype(np.float32))
    wrong = []

    async def client():
        while not queue.empty():
            rows = queue.get_nowait()
            request = InferenceRequest(inputs=[RequestInput(name="x", datatype="FP32", shape=list(rows.shape), data=rows.ravel().tolist())])
            answer = await model.predict(request)
            got = np.asarray(answer.outputs[0].data, dtype=np.float32).reshape(answer.outputs[0].shape)
            if not np.allclose(got, rows @ weight, atol=1e-5):
                wrong.append(rows.shape)

    await asyncio.gather(*(client() for _ in range(concurrency)))
    metadata = await model.metadata()
    await model.unload()
    print(json.dumps({"ready": ready, "runs": [[sid, list(shape), at, thread] for sid, shape, at, thread in RUNS],
                      "served": sorted(served_ids), "wrong": [list(shape) for shape in wrong],
                      "buckets": model._buckets, "parameters": metadata.parameters.model_dump(exclude_none=True)}))

asyncio.run(main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3])))
"""


def drive(tmp_path, extra: dict, requests: int = 240, concurrency: int = 16) -> dict:
    folder = model_folder(tmp_path, "m", matmul_graph(tmp_path / "m.onnx"), extra={"io_binding": "off", **extra})
    done = subprocess.run(
        [sys.executable, "-c", DRIVE, str(folder / SETTINGS_FILE), str(requests), str(concurrency)],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def shapes_by_session(runs: list, sessions: list[int]) -> dict[int, set[tuple]]:
    seen: dict[int, set[tuple]] = {session: set() for session in sessions}
    for session, shape, *_ in runs:
        if session in seen:
            seen[session].add(tuple(shape))
    return seen


@pytest.mark.slow
def test_a_gpu_runtime_gives_each_bucket_a_session_that_meets_one_warmed_shape(tmp_path):
    result = drive(tmp_path, {"batch_buckets": [1, 2, 4, 8], "max_batch_rows": 8})
    assert not result["wrong"], f"answers differ from x @ W for shapes {result['wrong'][:5]}"
    assert result["buckets"] == [1, 2, 4, 8]
    served = shapes_by_session(result["runs"], result["served"])
    assert len(served) == 8  # a set of 4 bucket sessions for each of the 2 run slots
    assert all(len(shapes) == 1 for shapes in served.values()), served  # no session ever changes shape
    threads: dict[int, set[str]] = {}
    for session, _, _, thread in result["runs"]:
        threads.setdefault(session, set()).add(thread)
    assert all(len(threads[session]) == 1 for session in served), threads  # nor meets another run slot's thread
    after = [run for run in result["runs"] if run[2] > result["ready"] and run[0] in served]
    merged = {run[1][0] for run in after}
    assert merged <= {1, 2, 4, 8}
    assert len(merged) > 1, f"concurrent requests of 1-7 rows only ever ran as {merged}: nothing merged"
    warmed = {(run[0], tuple(run[1])) for run in result["runs"] if run[2] <= result["ready"]}
    assert {(run[0], tuple(run[1])) for run in after} <= warmed  # no first run of a session lands on a request
    parameters = result["parameters"]
    assert parameters["session_per_bucket"] == 1 and parameters["session_per_bucket_source"] == DEFAULT
    assert parameters["cudnn_conv_algo_search"] in gpu_choice.SEARCH_CANDIDATES
    assert parameters["cudnn_conv_algo_search_source"] == MEASURED
    assert parameters["cuda_graphs_source"] == MEASURED
    assert parameters["inference_threads"] == 2 and parameters["intra_op_threads"] == 1


@pytest.mark.slow
def test_one_session_for_every_bucket_meets_many_shapes_which_is_what_sessions_per_bucket_prevent(tmp_path):
    """The check above can fail: with session_per_bucket false, the one session's runs change shape under load."""
    result = drive(tmp_path, {"batch_buckets": [1, 2, 4, 8], "max_batch_rows": 8, "session_per_bucket": False})
    assert not result["wrong"]
    served = shapes_by_session(result["runs"], result["served"])
    assert len(served) == 1 and len(next(iter(served.values()))) > 1
    assert "session_per_bucket" not in result["parameters"]


class Recorder:
    """A runner that records what it ran."""

    def __init__(self, fixed_outputs: bool = False):
        self.session, self.device, self.device_id = object(), "cuda", 0
        self.uses_io_binding, self.fixed_outputs = True, fixed_outputs
        self.rows: list[int] = []

    def run(self, output_names, feeds):
        self.rows.append(len(next(iter(feeds.values()))))
        return [next(iter(feeds.values()))]


def test_a_bucket_runner_sends_each_run_to_its_bucket_s_session_and_refuses_other_sizes():
    import numpy as np

    runners = {rows: Recorder(fixed_outputs=rows == 8) for rows in (8, 1, 4)}
    runner = BucketRunner([runners])  # type: ignore[list-item]
    assert runner.buckets == [1, 4, 8] and runner.fixed_outputs and runner.parts() == (runner,)
    for rows in (1, 4, 8, 4, 1):
        runner.run(["y"], {"x": np.zeros((rows, 2))})
    assert [runners[rows].rows for rows in (1, 4, 8)] == [[1, 1], [4, 4], [8]]
    with pytest.raises(BucketError, match="padded to batch_buckets"):
        runner.run(["y"], {"x": np.zeros((3, 2))})
    with pytest.raises(ValueError, match="the same buckets"):
        BucketRunner([{1: Recorder()}, {2: Recorder()}])  # type: ignore[dict-item]


def test_each_run_slot_claims_a_set_of_its_own_and_threads_beyond_the_sets_share_the_first():
    import threading

    import numpy as np

    sets = [{1: Recorder(), 2: Recorder()} for _ in range(2)]
    runner = BucketRunner(sets)  # type: ignore[arg-type]
    barrier = threading.Barrier(3)

    def slot() -> None:
        barrier.wait()
        for rows in (1, 2, 1):
            runner.run(["y"], {"x": np.zeros((rows, 2))})

    threads = [threading.Thread(target=slot) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    counts = [len(copy[1].rows) + len(copy[2].rows) for copy in sets]
    assert sorted(counts) == [3, 6]  # two threads on the first set, one on the second


CUDA, TRT, CPU = "CUDAExecutionProvider", "TensorrtExecutionProvider", "CPUExecutionProvider"


@pytest.mark.parametrize(
    ("setting", "buckets", "providers", "expected"),
    [
        (None, [1, 2, 4], [CUDA, CPU], True),
        (None, [1, 2, 4], [CPU], False),
        (None, [8], [CUDA, CPU], False),
        (None, [1, 2, 4], [TRT, CUDA, CPU], False),  # TensorRT: one engine over every bucket from its profile
        (True, [1, 2], [CPU], True),
        (False, [1, 2], [CUDA, CPU], False),
        (True, [], [CUDA, CPU], False),
    ],
)
def test_sessions_per_bucket_where_several_buckets_run_on_cuda_unless_set(setting, buckets, providers, expected):
    assert bucket_sessions.per_bucket(RuntimeSettings(session_per_bucket=setting), buckets, providers) is expected


def test_kernel_settings_are_chosen_by_their_timings_and_explicit_ones_win():
    def timer(times):
        calls = []

        def time_runs(settings, rows):
            calls.append((settings.cuda.cudnn_conv_algo_search, settings.cuda.enable_cuda_graph, rows))
            key = (settings.cuda.cudnn_conv_algo_search, settings.cuda.enable_cuda_graph)
            if times.get(key) is None:
                raise RuntimeError("cannot capture")
            return times[key]

        return time_runs, calls

    time_runs, calls = timer({("EXHAUSTIVE", False): 2.0, ("HEURISTIC", False): 1.0, ("HEURISTIC", True): 0.5})
    settings, choices = gpu_choice.choose_kernels(RuntimeSettings(), [1, 2, 32], time_runs, model="m")
    assert settings.cuda.cudnn_conv_algo_search == "HEURISTIC" and settings.cuda.enable_cuda_graph is True
    assert choices["cudnn_conv_algo_search"].source == MEASURED and choices["cuda_graphs"].value == 1
    assert {rows for *_, rows in calls} == {1, 32}  # the search at the largest bucket, the graph at the smallest

    time_runs, _ = timer({("EXHAUSTIVE", False): 1.0, ("HEURISTIC", False): 3.0})  # no graph can be captured
    settings, choices = gpu_choice.choose_kernels(RuntimeSettings(), [1, 8], time_runs, model="m")
    assert settings.cuda.cudnn_conv_algo_search == "EXHAUSTIVE" and settings.cuda.enable_cuda_graph is False
    assert "no graph could be captured" in choices["cuda_graphs"].reason

    time_runs, calls = timer({})
    explicit = RuntimeSettings(cuda={"cudnn_conv_algo_search": "DEFAULT", "enable_cuda_graph": False})
    settings, choices = gpu_choice.choose_kernels(explicit, [1, 8], time_runs, model="m")
    assert not calls and settings.cuda == explicit.cuda
    assert {choice.source for choice in choices.values()} == {EXPLICIT}
