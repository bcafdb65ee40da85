"""`benchmarks serving` on the CPU unless asked, and server and client kept to CPUs of their own."""

from __future__ import annotations

import os

import numpy as np
import pytest

from benchmarks import raw
from benchmarks.cli import main as benchmarks_main
from benchmarks.load import GRPC, pinned, run_load
from benchmarks.run import parse_cpus
from engine.providers import CPU
from slipway.artifact import load_input_example
from slipway.cli import UserError
from slipway.local_server import LocalServer, on_cpus

AVAILABLE = sorted(os.sched_getaffinity(0))


def test_cpu_lists_are_read_as_taskset_writes_them_and_refused_in_one_line_otherwise():
    assert parse_cpus(f"{AVAILABLE[0]}", "--server-cpus") == [AVAILABLE[0]]
    assert parse_cpus(",".join(str(cpu) for cpu in AVAILABLE), "--client-cpus") == AVAILABLE
    if len(AVAILABLE) > 1 and AVAILABLE[1] == AVAILABLE[0] + 1:
        assert parse_cpus(f"{AVAILABLE[0]}-{AVAILABLE[1]}", "--server-cpus") == AVAILABLE[:2]
    with pytest.raises(ValueError, match=r"^--server-cpus 'two': give CPUs as taskset lists them"):
        parse_cpus("two", "--server-cpus")
    with pytest.raises(ValueError, match=r"^--client-cpus '4096': CPUs \[4096\] are not this process's to use"):
        parse_cpus("4096", "--client-cpus")
    assert on_cpus(["python", "-V"], None) == ["python", "-V"]
    assert on_cpus(["python", "-V"], [0, 2]) == ["taskset", "--cpu-list", "0,2", "python", "-V"]


def test_server_and_client_sharing_a_cpu_is_refused_in_one_line():
    cpu = str(AVAILABLE[0])
    with pytest.raises(UserError, match=rf"^--server-cpus and --client-cpus share CPUs \[{cpu}\]: give each its own"):
        benchmarks_main(["serving", "--server-cpus", cpu, "--client-cpus", cpu])


def test_the_raw_limit_is_measured_on_the_cpu_unless_a_provider_is_named(monkeypatch, tmp_path):
    built = []

    def recording(path, settings):
        built.append(settings.providers)
        raise RuntimeError("not built: the test only reads the providers asked for")

    monkeypatch.setattr(raw, "create_session", recording)
    row = np.zeros((1, 4), np.float32)
    for call in (
        lambda: raw.measure_raw(tmp_path / "m.onnx", "x", row, batch_sizes=[1], seconds=0.1),
        lambda: raw.measure_side_by_side(tmp_path / "m.onnx", "x", row, batch=1, callers=1, seconds=0.1),
        lambda: raw.raw_turn(tmp_path / "m.onnx", "x", row, setting={"spinning": "never"}, seconds=0.1),
        lambda: raw.measure_raw(
            tmp_path / "m.onnx", "x", row, batch_sizes=[1], seconds=0.1, providers=("CUDAExecutionProvider",)
        ),
    ):
        with pytest.raises(RuntimeError, match="not built"):
            call()
    assert built == [[CPU], [CPU], [CPU], ["CUDAExecutionProvider"]]


def test_pinning_this_process_is_undone_after():
    before = os.sched_getaffinity(0)
    with pinned([AVAILABLE[-1]]):
        assert os.sched_getaffinity(0) == {AVAILABLE[-1]}
    assert os.sched_getaffinity(0) == before


@pytest.mark.slow  # starts a server
@pytest.mark.skipif(len(AVAILABLE) < 2, reason="needs two CPUs to give server and client one each")
def test_a_server_started_on_some_cpus_stays_there_with_every_thread_and_the_client_on_others(digits_artifact):
    server_cpu, client_cpu = AVAILABLE[0], AVAILABLE[1]
    row = load_input_example(digits_artifact)[0]["image"][:1].astype(np.float32)
    with LocalServer(digits_artifact, cpus=[server_cpu]) as server:
        threads = os.listdir(f"/proc/{server.pid}/task")
        assert len(threads) > 1 and all(os.sched_getaffinity(int(task)) == {server_cpu} for task in threads)
        before = os.sched_getaffinity(0)
        result = run_load(
            protocol=GRPC,
            server=server,
            model=server.model,
            inputs={"image": row},
            concurrency=1,
            seconds=0.3,
            warmup_s=0.1,
            client_cpus=[client_cpu],
        )
        assert result.requests > 0 and result.errors == 0
        assert os.sched_getaffinity(0) == before  # the client's pin is undone after the load
