"""The tuner's GPU dimensions: provider, padding buckets, CUDA graphs, front ends; judged per GPU; refused without one."""

from __future__ import annotations

import optuna
import pytest

from loadtest.cli import main as loadtest_main
from loadtest.tuning.machine import MachineError, gpu_name, resolve_providers
from loadtest.tuning.measure import Measurement, TableMeasurer
from loadtest.tuning.search import search, suggest_config
from loadtest.tuning.space import ServingConfig, model_settings_for
from slipway.cli import UserError
from slipway.runtime_settings import RuntimeSettings, parse_runtime_settings
from tests.loadtest.test_tuning import _space

GPU_DIMS = {"providers": ["cuda"], "batch_buckets": [(), (8,), (1, 8, 32)], "cuda_graphs": [False, True]}


def test_gpu_grid_puts_cuda_graphs_only_where_shapes_are_fixed(tmp_path):
    space = _space(
        tmp_path, variants=("fp32", "fp16"), parallel_workers=[0], max_batch_size=[1], intra_op_threads=[1], **GPU_DIMS
    )
    grid = space.grid()
    assert len(grid) == 2 * (1 + 2 * 2) == len({c.key for c in grid})  # no buckets: no graph; each bucket set: off, on
    assert all(c.provider == "cuda" and (c.batch_buckets or not c.cuda_graph) for c in grid)
    assert "fp16-w0-b1-t1x1-cuda-k8-graph" in {c.key for c in grid}
    assert all(c in grid for c in space.known_good()) and all(c.on_gpu for c in space.known_good())


def test_gpu_config_writes_the_runtime_settings_it_names():
    config = ServingConfig(
        variant="int8", parallel_workers=0, max_batch_size=1, intra_op_threads=1, provider="tensorrt", batch_buckets=(8, 32)
    )
    extra = model_settings_for(config, {"parameters": {"extra": {"cuda": {"device_id": 1}}}})["parameters"]["extra"]
    settings = parse_runtime_settings(extra)  # what the runtime reads, strictly
    assert settings.providers == ["TensorrtExecutionProvider", "CUDAExecutionProvider"] and settings.tensorrt.int8
    assert settings.batch_buckets == [8, 32] and settings.cuda.device_id == 1 and not settings.cuda.enable_cuda_graph
    graph = config.model_copy(update={"provider": "cuda", "cuda_graph": True, "variant": "fp16"})
    assert parse_runtime_settings(model_settings_for(graph, {})["parameters"]["extra"]).cuda.enable_cuda_graph
    cpu = ServingConfig(variant="fp32", parallel_workers=0, max_batch_size=1, intra_op_threads=1)
    assert "providers" not in model_settings_for(cpu, {})["parameters"]["extra"]  # the CPU's trials are as before


@pytest.mark.parametrize(
    ("dims", "message"),
    [
        ({"providers": ["cpu", "cuda"]}, "judged per core and per GPU"),
        ({"cuda_graphs": [True], "batch_buckets": [(8,)]}, "CUDA graphs run on the cuda provider"),
        ({"providers": ["cuda"], "cuda_graphs": [True]}, "needs fixed shapes"),
        ({"providers": ["cuda"], "batch_buckets": [(0, 8)]}, "positive row count"),
    ],
)
def test_gpu_dimensions_that_cannot_run_are_refused_by_name(tmp_path, dims, message):
    with pytest.raises(ValueError, match=message):
        _space(tmp_path, **dims)


def test_frontends_are_searched_only_where_the_runtime_has_them(tmp_path):
    if "frontends" in RuntimeSettings.model_fields:
        assert {c.frontends for c in _space(tmp_path, providers=["cuda"], frontends=[1, 2]).grid()} == {1, 2}
    else:
        with pytest.raises(ValueError, match="no `frontends` setting yet"):
            _space(tmp_path, providers=["cuda"], frontends=[1, 2])


def test_a_gpu_config_is_judged_in_rows_per_gpu_not_per_core():
    config = ServingConfig(variant="fp32", parallel_workers=0, max_batch_size=1, intra_op_threads=1, provider="cuda")
    assert Measurement(config, True, "", capacity_rps=900.0, cpu_cores=1.6).objective == 900.0
    cpu = config.model_copy(update={"provider": "cpu"})
    assert Measurement(cpu, True, "", capacity_rps=900.0, cpu_cores=1.8).objective == 500.0


def test_search_of_a_gpu_space_finds_the_best_rows_per_gpu(tmp_path):
    space = _space(
        tmp_path,
        variants=("fp32", "fp16"),
        parallel_workers=[0],
        max_batch_size=[1],
        intra_op_threads=[1],
        inference_threads=[1, 2],
        **GPU_DIMS,
    )
    table = [
        Measurement(
            c,
            True,
            "",
            capacity_rps=100.0
            * (1 + len(c.batch_buckets))
            * (2 if c.cuda_graph else 1)
            * (1.5 if c.variant == "fp16" else 1)
            * (1.1 if c.inference_threads == 2 else 1),
            cpu_cores=1.0,
            p95_ms=5.0,
        )
        for c in space.grid()
    ]
    result = search(space, TableMeasurer(table), budget=len(table), patience=len(table), seed=0)
    assert result.best.config.key == max(table, key=lambda m: m.objective).config.key
    assert result.best.config.cuda_graph and result.best.config.variant == "fp16"


def test_a_cpu_space_asks_optuna_for_no_gpu_dimension(tmp_path):
    trial = optuna.create_study().ask()
    suggest_config(trial, _space(tmp_path))
    assert not {"provider", "batch_buckets", "cuda_graph", "frontends"} & set(trial.params)


def test_machine_without_what_a_provider_needs_is_named():
    cpu_only = ["CPUExecutionProvider"]
    with pytest.raises(MachineError, match=r"^--providers cuda: this machine lacks a CUDA GPU \(nvidia-smi finds none\)"):
        resolve_providers(["cuda"], cpu_only, None)
    with pytest.raises(MachineError, match="lacks TensorrtExecutionProvider in this onnxruntime"):
        resolve_providers(["tensorrt"], [*cpu_only, "CUDAExecutionProvider"], "NVIDIA H200")
    providers, notes = resolve_providers(["auto"], [*cpu_only, "CUDAExecutionProvider"], "NVIDIA H200")
    assert providers == ["cuda"] and notes == [
        "providers auto: tensorrt skipped, this machine lacks TensorrtExecutionProvider in this onnxruntime (it has "
        "CPUExecutionProvider, CUDAExecutionProvider): install the GPU build (make setup GPU=1)"
    ]
    providers, notes = resolve_providers(["auto"], cpu_only, None)
    assert providers == ["cpu"] and notes[-1] == "providers auto: tuning on the CPU only"
    assert resolve_providers(["cpu"], cpu_only, None) == (["cpu"], [])
    with pytest.raises(MachineError, match=r"^'gpu' is not an execution provider: choose from cpu, cuda, tensorrt$"):
        resolve_providers(["cpu", "gpu"], cpu_only, None)


@pytest.mark.skipif(gpu_name() is not None, reason="checks the refusal on a machine without a GPU")
def test_tune_refuses_gpu_providers_here_in_one_line(tmp_path):
    folder = _space(tmp_path, variants=("fp32",)).variants["fp32"]
    with pytest.raises(UserError, match=r"^--providers cuda: this machine lacks a CUDA GPU .* --providers auto"):
        loadtest_main(["tune", "--variant", f"fp32={folder}", "--providers", "cuda", "--out-dir", str(tmp_path / "out")])
    assert not (tmp_path / "out").exists()
