import logging
import os
import shutil

import numpy as np
import onnxruntime as ort
import pytest

from engine.cpu_limits import cgroup_cpu_quota, cpu_limit
from engine.providers import CPU, CUDA, choose_providers, provider_entries
from engine.runner import SessionRunner
from engine.session import create_session, session_options
from engine.tensor_specs import DYNAMIC, TensorSpec, describe
from engine.tensorrt import tensorrt_batch_profile
from slipway.runtime_settings import RuntimeSettings, SettingsError, parse_runtime_settings
from tests.graphs import WEIGHT, matmul_graph

GPU_ONLY = ["TensorrtExecutionProvider", "CUDAExecutionProvider"]
no_gpu_build = pytest.mark.skipif(
    "CUDAExecutionProvider" in ort.get_available_providers(), reason="this onnxruntime build has CUDA"
)

on_gpu = pytest.mark.skipif(
    CUDA not in ort.get_available_providers() or shutil.which("nvidia-smi") is None,
    reason="needs onnxruntime-gpu and an NVIDIA GPU (run on the GPU machine, beside make bench-gpu)",
)


@pytest.fixture
def matmul_model(tmp_path):
    return matmul_graph(tmp_path / "model.onnx")


def test_describe_reads_names_types_and_dynamic_dims(matmul_model):
    session = create_session(matmul_model, RuntimeSettings())
    inputs, outputs = describe(session)
    assert [(s.name, s.datatype, s.shape) for s in inputs] == [("x", "FP32", (DYNAMIC, 4))]
    assert [(s.name, s.datatype, s.shape) for s in outputs] == [("y", "FP32", (DYNAMIC, 3))]
    assert inputs[0].accepts_shape((7, 4)) and not inputs[0].accepts_shape((7, 5)) and not inputs[0].accepts_shape((4,))


def test_default_providers_prefer_gpus_and_never_pick_other_installed_ones():
    chosen = choose_providers(None)
    assert chosen[-1] == CPU
    assert set(chosen) <= {*GPU_ONLY, CPU}  # e.g. never AzureExecutionProvider, which the CPU build lists
    assert chosen == [name for name in (*GPU_ONLY, CPU) if name in ort.get_available_providers()]


@no_gpu_build
def test_requested_gpu_providers_fall_back_to_cpu_with_a_warning_and_the_log_says_so(matmul_model, caplog):
    with caplog.at_level(logging.INFO, logger="engine"):
        session = create_session(matmul_model, RuntimeSettings(providers=GPU_ONLY, cuda={"enable_cuda_graph": True}))
    assert session.get_providers() == [CPU]
    assert "TensorrtExecutionProvider is not available" in caplog.text
    assert "CUDAExecutionProvider is not available" in caplog.text
    assert "uses providers ['CPUExecutionProvider']" in caplog.text
    np.testing.assert_allclose(session.run(None, {"x": np.ones((1, 4), np.float32)})[0], np.ones((1, 4)) @ WEIGHT)


def test_provider_options_are_passed_as_onnx_runtime_strings():
    settings = RuntimeSettings(
        tensorrt={
            "fp16": True,
            "engine_cache_path": "/cache/trt",
            "workspace_size_bytes": 1 << 30,
            "extra_options": {"trt_builder_optimization_level": 5},
        },
        cuda={"cudnn_conv_algo_search": "HEURISTIC", "device_id": 1},
    )
    entries = dict(provider_entries(["TensorrtExecutionProvider", "CUDAExecutionProvider", CPU], settings))
    assert entries["TensorrtExecutionProvider"] == {
        "device_id": "0",
        "trt_fp16_enable": "1",
        "trt_int8_enable": "0",
        "trt_engine_cache_enable": "1",
        "trt_engine_cache_path": "/cache/trt",
        "trt_max_workspace_size": str(1 << 30),
        "trt_builder_optimization_level": "5",
    }
    assert entries["CUDAExecutionProvider"] == {
        "device_id": "1",
        "cudnn_conv_algo_search": "HEURISTIC",
        "enable_cuda_graph": "0",
    }
    assert entries[CPU] == {}


def test_tensorrt_profile_spans_one_row_to_the_largest_bucket_for_every_input():
    inputs = [TensorSpec("image", "FP32", (DYNAMIC, 224, 224, 3)), TensorSpec("mask", "BOOL", (DYNAMIC, 7))]
    assert tensorrt_batch_profile(inputs, 32) == {
        "trt_profile_min_shapes": "image:1x224x224x3,mask:1x7",
        "trt_profile_opt_shapes": "image:32x224x224x3,mask:32x7",
        "trt_profile_max_shapes": "image:32x224x224x3,mask:32x7",
    }


@pytest.mark.parametrize(
    "spec",
    [
        TensorSpec("tokens", "INT64", (DYNAMIC, DYNAMIC)),  # a second dynamic dimension: its range is unknown here
        TensorSpec("image", "FP32", (8, 224, 224, 3)),  # a fixed batch: no range to give
        TensorSpec("scale", "FP32", ()),
        TensorSpec("a:b", "FP32", (DYNAMIC, 3)),  # the option's format cannot carry the name
    ],
)
def test_tensorrt_profile_is_left_to_the_user_where_it_cannot_be_derived(spec):
    assert tensorrt_batch_profile([TensorSpec("x", "FP32", (DYNAMIC, 3)), spec], 8) == {}


def test_session_options_come_from_settings():
    options = session_options(
        RuntimeSettings(intra_op_threads=3, inter_op_threads=2, execution_mode="parallel", graph_optimization_level="basic")
    )
    assert (options.intra_op_num_threads, options.inter_op_num_threads) == (3, 2)
    assert options.execution_mode == ort.ExecutionMode.ORT_PARALLEL
    assert options.graph_optimization_level == ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    assert session_options(RuntimeSettings()).intra_op_num_threads == max(1, int(cpu_limit()))


@pytest.mark.parametrize(
    "settings, providers, spins, stops",
    [
        ({"intra_op_threads": 2}, ["CPUExecutionProvider"], "1", "1"),  # unset: spin within runs of several threads
        ({"intra_op_threads": 0}, ["CPUExecutionProvider"], "1", "1"),  # ONNX Runtime's own count: every core
        ({"intra_op_threads": 1}, ["CPUExecutionProvider"], "0", ""),  # no other thread to keep awake
        ({"intra_op_threads": 2}, ["CUDAExecutionProvider", "CPUExecutionProvider"], "0", ""),  # threads feed a GPU
        ({"intra_op_threads": 2, "spin_within_runs": False}, ["CPUExecutionProvider"], "0", ""),
        ({"intra_op_threads": 1, "spin_within_runs": True}, ["CPUExecutionProvider"], "1", "1"),
        ({"intra_op_threads": 2, "allow_spinning": True}, ["CPUExecutionProvider"], "1", ""),  # between runs too
    ],
)
def test_intra_op_threads_spin_while_a_run_is_in_flight_and_stop_when_it_returns(settings, providers, spins, stops):
    options = session_options(RuntimeSettings(**settings), providers)
    assert options.get_session_config_entry("session.intra_op.allow_spinning") == spins
    if stops:
        assert options.get_session_config_entry("session.force_spinning_stop") == stops
    else:
        with pytest.raises(Exception, match="force_spinning_stop"):  # never set: ONNX Runtime says the key is unknown
            options.get_session_config_entry("session.force_spinning_stop")


@pytest.mark.parametrize(
    "files, expected",
    [
        ({"cpu.max": "150000 100000\n"}, 1.5),
        ({"cpu.max": "max 100000\n"}, None),
        ({"cpu/cpu.cfs_quota_us": "200000\n", "cpu/cpu.cfs_period_us": "100000\n"}, 2.0),
        ({"cpu/cpu.cfs_quota_us": "-1\n", "cpu/cpu.cfs_period_us": "100000\n"}, None),
        ({}, None),
    ],
)
def test_thread_defaults_follow_the_cgroup_quota_not_the_host(tmp_path, files, expected):
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert cgroup_cpu_quota(tmp_path) == expected
    host = len(os.sched_getaffinity(0))
    assert cpu_limit(tmp_path) == (min(host, expected) if expected else host)


@pytest.mark.parametrize("io_binding", ["on", "off", "auto"])
def test_io_binding_path_gives_the_same_answers_on_cpu(matmul_model, io_binding):
    runner = SessionRunner(create_session(matmul_model, RuntimeSettings(providers=[CPU])), io_binding=io_binding)
    assert runner.device == "cpu" and runner.uses_io_binding == (io_binding == "on")
    x = np.random.default_rng(0).normal(size=(5, 4)).astype(np.float32)
    (y,) = runner.run(["y"], {"x": x})
    np.testing.assert_allclose(y, x @ WEIGHT, rtol=1e-6)


def test_unknown_or_invalid_settings_are_refused_with_the_key():
    with pytest.raises(SettingsError, match="intra_op_thread"):
        parse_runtime_settings({"intra_op_thread": 2})
    with pytest.raises(SettingsError, match="inter_op_threads"):
        parse_runtime_settings({"inter_op_threads": -1})
    with pytest.raises(SettingsError, match="tensorrt.fp61"):
        parse_runtime_settings({"tensorrt": {"fp61": True}})
    with pytest.raises(SettingsError, match="warmup_batch_sizes"):
        parse_runtime_settings({"warmup_batch_sizes": [0]})
    with pytest.raises(SettingsError, match="event_loop_spin_us.*100000"):  # a window of polling, not a busy server
        parse_runtime_settings({"event_loop_spin_us": 1_000_000})
    assert parse_runtime_settings(None) == RuntimeSettings()


@on_gpu
@pytest.mark.parametrize("cuda_graph", [False, True])
def test_cuda_sessions_keep_tensors_on_the_device_and_give_the_cpu_answers(matmul_model, cuda_graph):
    cuda = {"enable_cuda_graph": cuda_graph, "extra_options": {"use_tf32": 0}}  # full fp32: TF32 is CUDA's default
    session = create_session(matmul_model, RuntimeSettings(providers=[CUDA], cuda=cuda))
    assert session.get_providers()[0] == CUDA
    runner = SessionRunner(session)  # auto: IOBinding on a GPU
    assert (runner.device, runner.uses_io_binding, runner.fixed_outputs) == ("cuda", True, cuda_graph)
    rng = np.random.default_rng(0)
    shapes = [(5, 4)] * 4 if cuda_graph else [(5, 4), (5, 4), (2, 4), (5, 4)]  # a captured graph holds one shape
    for shape in shapes:  # the same shape reuses its device buffers (a graph is replayed)
        x = rng.normal(size=shape).astype(np.float32)
        (y,) = runner.run(["y"], {"x": x})
        np.testing.assert_allclose(y, x @ WEIGHT, rtol=1e-5, atol=1e-4)


@on_gpu
def test_tensorrt_that_cannot_run_falls_back_to_cuda_with_its_options_not_to_cpu(matmul_model, caplog):
    with caplog.at_level(logging.WARNING, logger="engine"):
        session = create_session(matmul_model, RuntimeSettings(providers=GPU_ONLY, cuda={"cudnn_conv_algo_search": "HEURISTIC"}))
    used = session.get_providers()
    assert used[0] in GPU_ONLY
    if used[0] == CUDA:  # TensorRT's libraries are missing: the log says why, and CUDA keeps its options
        assert "TensorrtExecutionProvider failed" in caplog.text
        assert session.get_provider_options()[CUDA]["cudnn_conv_algo_search"] == "HEURISTIC"
