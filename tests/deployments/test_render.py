import copy
import subprocess
import sys

import pytest
import yaml

from deployments.kustomize import split_image, strategic_merge
from deployments.render import ModelRef, render, write_manifests
from deployments.validate import seldon_rule_errors, validate_documents
from slipway.paths import PROJECT_ROOT

MODEL = ModelRef(name="digits", version="3", uri="s3://models/digits/3", digest="ab" * 32)


def _seldon(docs):
    return next(doc for doc in docs if doc["kind"] == "SeldonDeployment")


def test_render_pins_the_model_version_and_image():
    docs = render(MODEL, image="registry.local:5000/team/mlserver-onnx:1.2.3")
    sdep = _seldon(docs)
    predictor = sdep["spec"]["predictors"][0]
    container = predictor["componentSpecs"][0]["spec"]["containers"][0]
    assert sdep["metadata"]["name"] == "digits"
    assert predictor["graph"]["name"] == container["name"] == "digits"
    assert predictor["graph"]["modelUri"] == "s3://models/digits/3"
    assert container["image"] == "registry.local:5000/team/mlserver-onnx:1.2.3"
    assert sdep["metadata"]["annotations"]["slipway.io/model-digest"] == "sha256:" + "ab" * 32
    assert sdep["metadata"]["labels"]["app.kubernetes.io/part-of"] == "slipway"


def test_rendered_base_is_valid(seldon_crd_schema):
    report = validate_documents(render(MODEL), crd_schema=seldon_crd_schema)
    assert report.ok, report.errors
    assert any("SeldonDeployment" in item for item in report.checked)
    assert any("ServiceAccount" in item for item in report.checked)


def test_crd_schema_rejects_a_wrong_field_type(seldon_crd_schema):
    docs = render(MODEL)
    _seldon(docs)["spec"]["predictors"][0]["replicas"] = "three"
    report = validate_documents(docs, crd_schema=seldon_crd_schema)
    assert any("replicas" in error for error in report.errors), report.errors


def test_core_kinds_are_validated_strictly():
    docs = render(MODEL)
    account = next(doc for doc in docs if doc["kind"] == "ServiceAccount")
    account["automountServiceAccountTokens"] = False  # a typo strict validation must catch
    report = validate_documents(docs, crd_schema={})
    assert any("ServiceAccount" in error and "1.29.0" in error for error in report.errors), report.errors
    assert any("ServiceAccount" in error and "1.33.0" in error for error in report.errors), report.errors


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda s: s["spec"].__setitem__("protocol", "seldon"), "protocol must be v2"),
        (lambda s: s["spec"]["predictors"][0]["graph"].__setitem__("name", "other"), "no container is named 'other'"),
        (lambda s: s["spec"]["predictors"][0]["componentSpecs"][0]["spec"]["containers"][0]["resources"].pop("requests"),
         "no cpu/memory request"),
        (lambda s: s["spec"]["predictors"][0].__setitem__("traffic", 90), "traffic must add up to 100"),
    ],
)
def test_seldon_rules(mutate, message):
    sdep = copy.deepcopy(_seldon(render(MODEL)))
    assert seldon_rule_errors(sdep) == []
    mutate(sdep)
    assert any(message in error for error in seldon_rule_errors(sdep))


def test_strategic_merge_merges_named_lists_and_deletes_nulls():
    base = {"containers": [{"name": "a", "image": "x", "env": [{"name": "K", "value": "1"}]}], "keep": 1, "drop": 2}
    patch = {"containers": [{"name": "a", "env": [{"name": "K", "value": "2"}, {"name": "L", "value": "3"}]}], "drop": None}
    merged = strategic_merge(base, patch)
    assert merged == {"containers": [{"name": "a", "image": "x", "env": [{"name": "K", "value": "2"}, {"name": "L", "value": "3"}]}], "keep": 1}


def test_split_image_keeps_registry_ports():
    assert split_image("registry.local:5000/a/b:1.0") == ("registry.local:5000/a/b", "1.0", None)
    assert split_image("a/b@sha256:00") == ("a/b", None, "sha256:00")
    assert split_image("a/b") == ("a/b", None, None)


def test_write_manifests_writes_one_file_per_resource(tmp_path):
    docs = render(MODEL)
    paths = write_manifests(docs, tmp_path / "out")
    assert sorted(p.name for p in paths) == ["seldondeployment-digits.yaml", "serviceaccount-slipway-model.yaml"]
    assert list(yaml.safe_load_all((tmp_path / "out" / "all.yaml").read_text())) == docs


def test_deploy_without_a_cluster_is_one_clear_line(digits_artifact, tmp_path, reports_env):
    env = {**reports_env, "KUBECONFIG": str(tmp_path / "no-such-kubeconfig"), "KUBERNETES_SERVICE_HOST": ""}
    result = subprocess.run(
        [sys.executable, "-m", "deployments", "deploy", "--model-dir", str(digits_artifact)],
        cwd=PROJECT_ROOT, env={**__import__("os").environ, **env}, capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 2
    lines = [line for line in result.stderr.strip().splitlines() if line.strip()]
    assert "nothing was applied" in result.stderr and "make manifests" in result.stderr
    assert "Traceback" not in result.stderr
    assert len(" ".join(lines)) < 400
