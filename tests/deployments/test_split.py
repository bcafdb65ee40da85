"""`render --split cpu-gpu`: the three-node graph, each node's component, and what is refused."""

from __future__ import annotations

import json

import pytest

from deployments.render import seldon
from deployments.render.overlay import RenderError, RenderOptions
from deployments.render.overlay import render as _render
from deployments.render.records import ModelVersion
from deployments.render.validate import validate_documents
from slipway.artifact import SETTINGS_FILE
from tests.deployments.rendering import rendering

render = rendering(split_mode="cpu-gpu")


def _components(rendered) -> dict[str, dict]:
    """componentSpec by its container's name."""
    return {
        component["spec"]["containers"][0]["name"]: component for _, _, component in seldon.pod_specs(rendered.seldon_deployment)
    }


def _limits(component) -> dict:
    return component["spec"]["containers"][0]["resources"]["limits"]


def test_the_gpu_overlay_splits_into_three_nodes_with_the_gpu_and_its_placement_only_on_the_model(main_version):
    rendered = render("gpu", model=main_version, autoscaling_mode="gpu-util")
    predictor = rendered.seldon_deployment["spec"]["predictors"][0]
    post = predictor["graph"]
    pre = post["children"][0]
    model = pre["children"][0]
    assert [(n["name"], n["type"]) for n in (post, pre, model)] == [
        ("digits-post", "OUTPUT_TRANSFORMER"),
        ("digits-pre", "TRANSFORMER"),
        ("digits", "MODEL"),
    ]
    assert {n["modelUri"] for n in (post, pre, model)} == {"s3://slipway-models/digits/3"} and not model["children"]
    assert "seldon.io/no-engine" not in predictor.get("annotations", {})  # the executor runs the graph
    components = _components(rendered)
    assert list(components) == ["digits", "digits-pre", "digits-post"]  # the model's first: standalone HPAs aim at 0
    assert _limits(components["digits"])["nvidia.com/gpu"] == 1 and "kedaSpec" in components["digits"]
    for name, role in (("digits-pre", "transformer"), ("digits-post", "output-transformer")):
        component = components[name]
        container = component["spec"]["containers"][0]
        assert container["args"] == ["python", "-m", "wrappers.roles.serve", role, "/mnt/models", "--name", "digits"]
        assert "nvidia.com/gpu" not in _limits(component) and "nodeSelector" not in component["spec"]
        assert "tolerations" not in component["spec"] and "pdbSpec" not in component and "kedaSpec" not in component
        assert [v["name"] for v in component["spec"]["volumes"]] == ["tmp"]
        assert "SLIPWAY_TENSORRT_CACHE_DIR" not in {e["name"] for e in container["env"]}
        assert {"name": "SLIPWAY_EXPECTED_DIGESTS", "value": "digits=sha256:" + "ab" * 32} in container["env"]
        [metric] = component["hpaSpec"]["metricsv2"]
        assert metric["containerResource"]["container"] == name
    assert components["digits"]["spec"]["containers"][0]["args"][3] == "model"
    assert validate_documents(rendered.docs).ok
    policy = next(doc for doc in rendered.docs if doc["kind"] == "NetworkPolicy")
    assert {port["port"] for port in policy["spec"]["ingress"][0]["ports"]} == {9000, 9500, 8000, 5001}  # + the executor
    assert rendered.summary()["split"] == "cpu-gpu"


def test_pod_level_metrics_reach_the_cpu_components_too(main_version):
    rendered = render("cpu", model=main_version, hpa_metric_source="pod")
    for component in _components(rendered).values():
        assert {metric["type"] for metric in component["hpaSpec"]["metricsv2"]} == {"Resource"}


def test_a_canary_an_unknown_split_or_an_artifact_without_both_stages_is_refused(main_version, canary_version, tmp_path):
    with pytest.raises(RenderError, match="a canary's two are not split"):
        render("canary", model=main_version, canary=canary_version)
    with pytest.raises(RenderError, match="unknown split 'gpu-only'; choose one of cpu-gpu"):
        _render("cpu", RenderOptions(model=main_version, engine="builtin", split_mode="gpu-only"))
    (tmp_path / SETTINGS_FILE).write_text(json.dumps({"name": "digits", "parameters": {"extra": {"preprocess": {}}}}))
    local = ModelVersion.model_validate({**main_version.model_dump(), "local_dir": tmp_path})
    with pytest.raises(RenderError, match="sets no parameters.extra.postprocess: --split cpu-gpu serves"):
        render("cpu", model=local)
