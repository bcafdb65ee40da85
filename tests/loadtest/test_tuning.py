"""The tuner: its space, its search against brute force on known landscapes, and one short real tuning run."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest

from loadtest.tuning.check import check_markdown, run_check
from loadtest.tuning.measure import Measurement, TableMeasurer, judge_steps
from loadtest.tuning.outputs import write_tune_outputs
from loadtest.tuning.search import SearchResult, search
from loadtest.tuning.space import SearchSpace, ServingConfig, apply_config
from slipway.artifact import RUNTIME_IMPLEMENTATION
from slipway.seldon_patch import cpu_quantity, memory_quantity
from slipway.slo import Slo
from tests.conftest import run_module


@pytest.fixture()
def two_variants(tmp_path, digits_artifact) -> dict[str, Path]:
    """fp32 (the trained artifact) and an int8 twin made with ONNX Runtime's dynamic quantization."""
    import onnx
    from onnxruntime.quantization import quantize_dynamic

    from export.package import write_artifact
    from slipway.artifact import load_input_example

    quantized = tmp_path / "int8.onnx"
    quantize_dynamic(str(digits_artifact / "model.onnx"), str(quantized))
    inputs, outputs, labels = load_input_example(digits_artifact)
    write_artifact(
        tmp_path / "int8",
        onnx_bytes=onnx.load(str(quantized)).SerializeToString(),
        name="digits",
        example_inputs=inputs,
        example_outputs=outputs,
        example_labels=labels,
    )
    return {"fp32": digits_artifact, "int8": tmp_path / "int8"}


def _space(tmp_path, variants=("fp32", "int8"), **dims) -> SearchSpace:
    folders = {}
    for name in variants:
        folder = tmp_path / name
        folder.mkdir(exist_ok=True)
        (folder / "model-settings.json").write_text('{"name": "digits", "parameters": {"extra": {}}}')
        folders[name] = folder
    return SearchSpace(variants=folders, **dims)


def test_grid_covers_every_valid_config_once_and_known_good_lies_in_it(tmp_path):
    space = _space(tmp_path)
    grid = space.grid()
    assert len(grid) == 2 * 2 * (1 + 2 * 2) * 2 == len({c.key for c in grid})
    assert all(c.max_batch_time_ms == 0 for c in grid if c.max_batch_size == 1)
    seeds = space.known_good()
    assert {c.variant for c in seeds} == {"fp32", "int8"} and all(c in grid for c in seeds)
    with pytest.raises(ValueError, match="needs max_batch_time_ms > 0"):
        ServingConfig(variant="fp32", parallel_workers=0, max_batch_size=8, intra_op_threads=1)
    with pytest.raises(ValueError, match="not an artifact folder"):
        SearchSpace(variants={"int8": tmp_path / "missing"})


@pytest.mark.slow  # needs the trained digits model (digits_artifact)
def test_apply_config_writes_a_verified_artifact_with_the_settings(tmp_path, digits_artifact):
    from slipway.artifact import verify_artifact

    config = ServingConfig(variant="fp32", parallel_workers=1, max_batch_size=8, max_batch_time_ms=2, intra_op_threads=2)
    folder = apply_config(config, digits_artifact, tmp_path / "trial")
    settings = json.loads((folder / "model-settings.json").read_text())
    assert (settings["max_batch_size"], settings["max_batch_time"]) == (8, 0.002)
    assert settings["parameters"]["extra"] == {
        "intra_op_threads": 2,
        "inter_op_threads": 1,
        "inference_threads": 1,
        "max_batch_rows": 1,
    }
    verify_artifact(folder)  # the manifest was re-hashed: the runtime will accept it


@pytest.mark.slow  # needs the trained digits model (digits_artifact)
def test_the_runtimes_run_slots_and_merged_rows_are_searched_when_asked(tmp_path, digits_artifact):
    from slipway.runtime_settings import parse_runtime_settings

    space = _space(
        tmp_path,
        variants=("fp32",),
        parallel_workers=[0],
        max_batch_size=[1],
        intra_op_threads=[1],
        inference_threads=[1, 4],
        max_batch_rows=[1, 4],
    )
    keys = sorted(c.key for c in space.grid())
    assert keys == ["fp32-w0-b1-t1x1", "fp32-w0-b1-t1x1-s1r4", "fp32-w0-b1-t1x1-s4r1", "fp32-w0-b1-t1x1-s4r4"]
    assert space.known_good() == [ServingConfig(variant="fp32", parallel_workers=0, max_batch_size=1, intra_op_threads=1)]
    with_slots = _space(
        tmp_path,
        variants=("fp32",),
        parallel_workers=[0],
        max_batch_size=[1],
        intra_op_threads=[1],
        inference_threads=[1, 2],
        max_batch_rows=[1, 4],
    )
    assert [c.key for c in with_slots.known_good()] == ["fp32-w0-b1-t1x1", "fp32-w0-b1-t1x1-s2r4"]  # both starts lie in it
    config = next(c for c in space.grid() if c.key.endswith("-s4r4"))
    extra = json.loads((apply_config(config, digits_artifact, tmp_path / "trial") / "model-settings.json").read_text())
    runtime = parse_runtime_settings(extra["parameters"]["extra"])  # what the runtime will read at load
    assert (runtime.inference_threads, runtime.max_batch_rows, runtime.intra_op_threads) == (4, 4, 1)


def _landscape(space: SearchSpace, seed: int) -> list[Measurement]:
    """Separable effects (one process, int8, a small batching window, one thread win) with +-7% noise."""
    rng = random.Random(seed)
    table = []
    for c in space.grid():
        value = 500 * {0: 1.4, 1: 1.0}[c.parallel_workers] * {1: 1.0, 8: 1.05, 32: 0.9}[c.max_batch_size]
        value *= {1: 1.0, 2: 0.8}[c.intra_op_threads] * {"fp32": 1.0, "int8": 1.25}[c.variant] * rng.uniform(0.93, 1.07)
        table.append(Measurement(c, True, "", capacity_rps=value, cpu_cores=1.0, p95_ms=10.0))
    return table


def test_tuner_reaches_95_percent_of_the_grid_best_with_a_quarter_of_its_trials(tmp_path):
    space = _space(tmp_path)
    grid = _landscape(space, seed=3)
    result = run_check(space, TableMeasurer(grid), budget_fraction=0.25, target=0.95, robustness_seeds=5)
    report = result.as_dict()
    assert report["grid_trials"] == 40 and report["tuner_budget"] == 10
    assert report["tuner_trials"] <= 10 and report["ratio"] >= 0.95 and report["passed"]
    assert report["robustness"]["tuner"] >= 4
    assert set(report["tuner_order"]) <= {m.config.key for m in grid}
    table = check_markdown(result, cpu_count=2, load_before=0.5, minutes=12, day="2026-01-01")
    assert f"| grid (every config) | `{report['grid_best_config']}` |" in table
    assert f"| {report['tuner_trials']} of 10 allowed |" in table and "check passed" in table
    assert f"by the tuner {report['robustness']['tuner']} times" in table


def test_check_fails_when_the_tuner_cannot_get_there(tmp_path):
    space = _space(tmp_path)
    grid = _landscape(space, seed=3)
    # The best lies away from the known-good settings: batching and two workers win big.
    for m in grid:
        if m.config.parallel_workers == 1 and m.config.max_batch_size == 32:
            object.__setattr__(m, "capacity_rps", m.capacity_rps * 3)
    result = run_check(space, TableMeasurer(grid), budget_fraction=1 / 40, target=0.95, robustness_seeds=0)
    assert not result.passed and len(result.tuner) == 1 and result.ratio < 0.95
    assert "check **failed**" in check_markdown(result, cpu_count=2, load_before=0.5, minutes=1, day="2026-01-01")


def test_search_stops_after_patience_without_improvement(tmp_path):
    space = _space(tmp_path, variants=("fp32",))
    flat = [Measurement(c, True, "", capacity_rps=100.0, cpu_cores=1.0) for c in space.grid()]
    result = search(space, TableMeasurer(flat), budget=20, patience=3)
    assert len(result.measurements) == 4 and "3 configs in a row" in result.stopped


def test_a_config_with_no_step_within_the_slo_is_infeasible():
    config = ServingConfig(variant="fp32", parallel_workers=0, max_batch_size=1, intra_op_threads=1)
    steps = [
        {
            "users": 1,
            "rps": 300,
            "requests": 600,
            "p50_ms": 30,
            "p95_ms": 80,
            "p99_ms": 90,
            "error_rate": 0,
            "server_cpu_cores": 0.5,
        }
    ]
    measurement = judge_steps(config, steps, Slo(p95_ms=40))
    assert not measurement.feasible and measurement.objective == 0 and measurement.violation == 1.0
    assert "even 1 user(s) break the SLO" in measurement.reason and "p95 latency 80.0 ms > p95_ms 40" in measurement.reason
    holds = judge_steps(config, steps + [{**steps[0], "users": 2, "p95_ms": 30}], Slo(p95_ms=40))
    assert holds.feasible and holds.objective == 600 and holds.users == 2


@pytest.mark.slow  # needs the trained digits model (digits_artifact)
def test_short_real_tuning_run_measures_both_variants_and_writes_a_deployable_spec(two_variants, reports_env, tmp_path):
    out = tmp_path / "tune"
    result = run_module(
        "loadtest",
        "tune",
        "--variant",
        f"fp32={two_variants['fp32']}",
        "--variant",
        f"int8={two_variants['int8']}",
        "--workers",
        "0",
        "--batch-sizes",
        "1",
        "--intra",
        "1",
        "--trials",
        "2",
        "--step-seconds",
        "2",
        "--max-users",
        "4",
        "--p95-ms",
        "5000",
        "--out-dir",
        str(out),
        env=reports_env,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    report = json.loads((Path(reports_env["SLIPWAY_REPORTS_DIR"]) / "tune.json").read_text())
    assert sorted(trial["config"]["variant"] for trial in report["trials"]) == ["fp32", "int8"]
    for trial in report["trials"]:
        assert trial["feasible"] and trial["capacity_rps"] > 0 and trial["cpu_cores"] > 0 and trial["steps"]
        assert trial["objective"] == pytest.approx(trial["capacity_rps"] / trial["cpu_cores"], rel=1e-3)
    best = report["best"]
    assert best["objective"] == max(trial["objective"] for trial in report["trials"])
    assert Path(report["plot"]).read_bytes().startswith(b"\x89PNG")
    settings = json.loads((out / "best" / "model-settings.json").read_text())
    assert settings["parameters"]["extra"]["intra_op_threads"] == 1 and "max_batch_size" not in settings

    deployment = report["deployment"]
    assert deployment["per_replica_capacity_rps"] == best["capacity_rps"]
    sdep = _render_overlay(out / "overlay")
    component = sdep["spec"]["predictors"][0]["componentSpecs"][0]
    container = component["spec"]["containers"][0]
    assert container["resources"]["requests"]["cpu"] == cpu_quantity(deployment["cpu_request_cores"])
    assert {"name": "MLSERVER_PARALLEL_WORKERS", "value": "0"} in container["env"]
    assert [m["type"] for m in component["hpaSpec"]["metricsv2"]] == [deployment["hpa_metric"]["type"]]


@pytest.mark.parametrize("extra, scales_on", [({}, "ContainerResource"), ({"event_loop_spin_us": 1000}, "Pods")])
def test_a_tuned_spec_whose_settings_keep_a_cpu_busy_autoscales_on_requests(tmp_path, extra, scales_on):
    folder = tmp_path / "fp32"
    folder.mkdir()
    settings = {"name": "digits", "implementation": RUNTIME_IMPLEMENTATION, "parameters": {"extra": extra}}
    (folder / "model-settings.json").write_text(json.dumps(settings))
    space = SearchSpace(variants={"fp32": folder}, parallel_workers=[0], max_batch_size=[1], intra_op_threads=[1])
    best = Measurement(space.grid()[0], True, "", capacity_rps=400.0, p95_ms=4.0, cpu_cores=0.8, memory_bytes=2**28)
    write_tune_outputs(
        SearchResult(measurements=[best]),
        space,
        Slo(p95_ms=50),
        out_dir=tmp_path / "tune",
        settings={},
        hpa_metric="cpu",
        reports_dir=tmp_path / "reports",
    )
    deployment = json.loads((tmp_path / "reports" / "tune.json").read_text())["deployment"]
    metric = _render_overlay(tmp_path / "tune" / "overlay")["spec"]["predictors"][0]["componentSpecs"][0]["hpaSpec"]["metricsv2"]
    assert len(metric) == 1 and metric[0]["type"] == deployment["hpa_metric"]["type"] == scales_on
    if scales_on == "ContainerResource":  # the model container's CPU, its name pinned at render time; no memory target
        assert metric[0]["containerResource"] == {**deployment["hpa_metric"]["containerResource"], "container": "digits"}
        assert "without the cpu overlay's memory target" in (tmp_path / "tune" / "overlay" / "patch.yaml").read_text()
    else:
        assert metric == [deployment["hpa_metric"]]
    assert ("event_loop_spin_us: 1000" in deployment["why"]) == bool(extra)
    written = json.loads((tmp_path / "tune" / "best" / "model-settings.json").read_text())["parameters"]["extra"]
    assert written.get("event_loop_spin_us") == extra.get("event_loop_spin_us")


def _render_overlay(overlay: Path) -> dict:
    """Render a generated overlay for a model version with deployments' own renderer, and validate it."""
    from deployments.render.overlay import RenderOptions, render
    from deployments.render.records import ModelVersion
    from deployments.render.validate import load_crd_schema, validate_documents
    from slipway.paths import SELDON_CRD_SCHEMA

    rendered = render(
        overlay,
        RenderOptions(model=ModelVersion(name="digits", version="1", uri="s3://m/digits/1", digest="sha256:" + "ab" * 32)),
    )
    report = validate_documents(rendered.docs, crd_schema=load_crd_schema(SELDON_CRD_SCHEMA) or {})
    assert report.ok, report.errors
    return rendered.seldon_deployment


@pytest.mark.slow  # needs the trained digits model (digits_artifact)
def test_tune_check_refuses_a_grid_outside_24_to_48(tmp_path, digits_artifact, reports_env):
    result = run_module(
        "loadtest",
        "tune-check",
        "--model-dir",
        str(digits_artifact),
        "--workers",
        "0",
        "--intra",
        "1",
        env=reports_env,
        check=False,
    )
    assert result.returncode == 2 and "the space has 5 configurations; the check wants 24-48" in result.stderr


def test_recommend_overlay_renders_and_validates(tmp_path):
    from deployments.sizing.recommend.outputs import write_outputs
    from deployments.sizing.recommend.sizing import recommend
    from deployments.sizing.usage import parse_query_range
    from tests.deployments.traces import MIB, matrix, times

    stamps = times(1)
    usage = {
        kind: parse_query_range(matrix({"p": (stamps, np.full(stamps.shape, value))}), kind=kind, source=kind)
        for kind, value in (("cpu", 0.3), ("memory", 200.0 * MIB), ("rps", 30.0))
    }
    rec = recommend(usage["cpu"], usage["memory"], usage["rps"], capacity_rps=20)
    write_outputs(rec, usage["cpu"], usage["memory"], usage["rps"], model="digits", out_dir=tmp_path, reports_dir=tmp_path)
    component = _render_overlay(tmp_path / "overlay")["spec"]["predictors"][0]["componentSpecs"][0]
    assert (component["hpaSpec"]["minReplicas"], component["hpaSpec"]["maxReplicas"]) == (rec.min_replicas, rec.max_replicas)
    assert component["spec"]["containers"][0]["resources"]["limits"]["memory"] == memory_quantity(rec.memory_limit)
