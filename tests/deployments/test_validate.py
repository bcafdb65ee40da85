"""Every overlay with every autoscaler passes every layer of validation; each rule catches what it is for."""

from __future__ import annotations

import copy

import pytest

from deployments.render import autoscaling
from deployments.render.overlay import OVERLAYS
from deployments.render.validate import (
    cross_resource_errors,
    pod_security_errors,
    seldon_rule_errors,
    validate_documents,
)
from tests.deployments.rendering import rendering

# Slipway's renderer: test_kustomize shows it builds every overlay exactly as kubectl kustomize does.
render = rendering()


def _render(overlay, main_version, canary_version, mode="cpu"):
    return render(overlay, model=main_version, canary=canary_version if overlay == "canary" else None, autoscaling_mode=mode)


@pytest.mark.parametrize("mode", autoscaling.MODES)
@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_overlay_and_autoscaler_is_valid(overlay, mode, main_version, canary_version, seldon_crd_schema):
    report = validate_documents(_render(overlay, main_version, canary_version, mode).docs, crd_schema=seldon_crd_schema)
    assert report.ok, report.errors
    assert any("CRD v1 schema" in item and "Pod Security restricted" in item for item in report.checked)
    assert any("NetworkPolicy" in item and "1.29.0, 1.33.0 strict" in item for item in report.checked)


def test_without_the_crd_schema_that_layer_is_skipped_and_not_claimed(main_version, tmp_path):
    report = validate_documents(render("cpu", model=main_version).docs, crd_path=tmp_path / "absent.yaml")
    assert report.ok and len(report.skipped) == 1 and "CRD schema not found" in report.skipped[0]
    assert not any("CRD v1 schema" in item for item in report.checked)
    assert any(item.startswith("SeldonDeployment/digits (Seldon rules") for item in report.checked)


def test_shared_memory_manifests_are_valid(main_version, canary_version, seldon_crd_schema):
    rendered = render("canary", model=main_version, canary=canary_version, shared_memory="512Mi")
    report = validate_documents(rendered.docs, crd_schema=seldon_crd_schema)
    assert report.ok, report.errors


def test_crd_schema_rejects_a_wrong_field_type(main_version, seldon_crd_schema):
    docs = render("cpu", model=main_version).docs
    next(d for d in docs if d["kind"] == "SeldonDeployment")["spec"]["predictors"][0]["replicas"] = "three"
    report = validate_documents(docs, crd_schema=seldon_crd_schema)
    assert any("predictors.0.replicas" in error for error in report.errors), report.errors


def test_core_kinds_are_validated_strictly_on_two_versions(main_version):
    docs = render("cpu", model=main_version, autoscaling_mode="behavior").docs
    next(d for d in docs if d["kind"] == "ServiceAccount")["automountServiceAccountTokens"] = False  # a typo
    next(d for d in docs if d["kind"] == "HorizontalPodAutoscaler")["spec"]["maxReplica"] = 3
    errors = validate_documents(docs, crd_schema={}).errors
    for kind in ("ServiceAccount", "HorizontalPodAutoscaler"):
        assert any(kind in e and "1.29.0" in e for e in errors) and any(kind in e and "1.33.0" in e for e in errors), errors


def _predictor(sdep, index=0):
    return sdep["spec"]["predictors"][index]


def _component(sdep, index=0):
    return _predictor(sdep, index)["componentSpecs"][0]


def _model_container(sdep, index=0):
    return _component(sdep, index)["spec"]["containers"][0]


SELDON_RULES = [
    (lambda s: s["spec"].__setitem__("protocol", "seldon"), "protocol must be v2"),
    (lambda s: _predictor(s)["graph"].__setitem__("name", "other"), "no container is named 'other'"),
    (lambda s: _model_container(s)["resources"].pop("requests"), "no cpu/memory request"),
    (lambda s: _model_container(s)["resources"]["requests"].pop("memory"), "no memory request"),
    (lambda s: _predictor(s).__setitem__("traffic", 90), "a single predictor's traffic must be 100"),
    (lambda s: _predictor(s, 1).__setitem__("traffic", 20), "traffic must add up to 100"),
    (lambda s: _predictor(s, 1).__setitem__("name", "default"), "predictor names must be unique"),
    (
        lambda s: _component(s, 1).__setitem__("pdbSpec", {"maxUnavailable": 1}),
        "Kubernetes refuses to evict a pod covered by two",
    ),
    (lambda s: _model_container(s)["env"].append({"name": "MLSERVER_HTTP_PORT", "value": "9000"}), "set by the Seldon operator"),
    (lambda s: _model_container(s)["ports"].pop(), "must declare ports"),
    (lambda s: _model_container(s)["env"].append({"name": "AWS_SECRET_ACCESS_KEY", "value": "x"}), "holds a literal value"),
    (lambda s: _component(s).__setitem__("kedaSpec", {"triggers": []}), "hpaSpec and kedaSpec both set"),
    (lambda s: _predictor(s)["graph"].__setitem__("children", [{"name": "x"}]), "only valid for a one-node graph"),
    (
        lambda s: _component(s, 1)["hpaSpec"]["metricsv2"][0]["containerResource"].__setitem__("container", "istio-proxy"),
        "reads container 'istio-proxy', which the pod does not have",
    ),
]


@pytest.mark.parametrize("mutate, message", SELDON_RULES)
def test_seldon_rules(mutate, message, main_version, canary_version):
    single = "single predictor" in message or "one-node" in message
    rendered = render("cpu", model=main_version) if single else render("canary", model=main_version, canary=canary_version)
    sdep = copy.deepcopy(rendered.seldon_deployment)
    assert seldon_rule_errors(sdep) == []
    mutate(sdep)
    errors = seldon_rule_errors(sdep)
    assert any(message in error for error in errors), errors


def test_gpu_rules(main_version):
    sdep = render("gpu", model=main_version).seldon_deployment
    assert seldon_rule_errors(sdep) == []
    container = _model_container(sdep)
    container["env"][0]["value"] = "2"
    assert any("2 MLServer workers on 1 GPU(s)" in e for e in seldon_rule_errors(sdep))
    container["env"][0]["value"] = "1"
    container["resources"]["requests"]["nvidia.com/gpu"] = 2
    assert any("request and limit must be equal" in e for e in seldon_rule_errors(sdep))


POD_SECURITY = [
    (
        lambda p: [p["securityContext"].pop("runAsNonRoot"), p["containers"][0]["securityContext"].pop("runAsNonRoot")],
        "runAsNonRoot must be true",
    ),
    (lambda p: p["containers"][0]["securityContext"].__setitem__("allowPrivilegeEscalation", True), "allowPrivilegeEscalation"),
    (lambda p: p["containers"][0]["securityContext"]["capabilities"].__setitem__("drop", []), "must drop ALL"),
    (lambda p: p["containers"][0]["securityContext"]["capabilities"].__setitem__("add", ["SYS_ADMIN"]), "only NET_BIND_SERVICE"),
    (
        lambda p: [p["securityContext"].pop("seccompProfile"), p["containers"][0]["securityContext"].pop("seccompProfile")],
        "seccompProfile must be RuntimeDefault",
    ),
    (lambda p: p["containers"][0]["securityContext"].__setitem__("readOnlyRootFilesystem", False), "readOnlyRootFilesystem"),
    (lambda p: p["containers"][0]["securityContext"].__setitem__("privileged", True), "privileged is not allowed"),
    (lambda p: p.__setitem__("hostNetwork", True), "hostNetwork is not allowed"),
    (lambda p: p["volumes"].append({"name": "h", "hostPath": {"path": "/"}}), "'hostPath'"),
    (lambda p: p["securityContext"].__setitem__("runAsUser", 0), "runAsUser 0"),
    (lambda p: p["containers"][0]["ports"][0].__setitem__("hostPort", 80), "hostPort"),
    (lambda p: p.setdefault("initContainers", []).append({"name": "init", "image": "x"}), "container 'init'"),
]


@pytest.mark.parametrize("mutate, message", POD_SECURITY)
def test_pod_security_restricted(mutate, message, main_version):
    pod = copy.deepcopy(_component(render("cpu", model=main_version).seldon_deployment)["spec"])
    assert pod_security_errors("pod", pod) == []
    mutate(pod)
    errors = pod_security_errors("pod", pod)
    assert any(message in error for error in errors), errors


def _doc(docs, kind):
    return next(d for d in docs if d["kind"] == kind)


CROSS_RESOURCE = [
    (
        lambda d: _doc(d, "NetworkPolicy")["spec"]["podSelector"]["matchLabels"].update({"slipway.io/model": "x"}),
        "matches no predictor pod",
    ),
    (lambda d: _doc(d, "NetworkPolicy")["spec"]["ingress"][0]["ports"].append({"port": 22}), "must admit exactly"),
    (lambda d: _doc(d, "NetworkPolicy")["spec"]["ingress"][1].pop("from"), "admits every source on ports [6000]"),
    (lambda d: _doc(d, "PodMonitor")["spec"]["selector"]["matchLabels"].update({"slipway.io/model": "x"}), "selector matches no"),
    (lambda d: _doc(d, "PodMonitor")["spec"]["podMetricsEndpoints"][0].__setitem__("path", "/metrics"), "at /prometheus"),
    (
        lambda d: _doc(d, "HorizontalPodAutoscaler")["spec"].__setitem__(
            "scaleTargetRef", {"apiVersion": "machinelearning.seldon.io/v1", "kind": "SeldonDeployment", "name": "digits"}
        ),
        "scale subresource has no label selector",
    ),
    (
        lambda d: _doc(d, "HorizontalPodAutoscaler")["spec"]["scaleTargetRef"].__setitem__("name", "digits"),
        "is not a Deployment Seldon creates",
    ),
    (lambda d: _doc(d, "SeldonDeployment")["spec"]["predictors"][0].__setitem__("replicas", 2), "Seldon re-applies"),
    (
        lambda d: _doc(d, "HorizontalPodAutoscaler")["spec"]["metrics"][1]["containerResource"].__setitem__("container", "x"),
        "memory metric reads container 'x'",
    ),
    (
        lambda d: _doc(d, "SeldonDeployment")["spec"]["predictors"][0]["componentSpecs"][0].__setitem__(
            "hpaSpec", {"maxReplicas": 2}
        ),
        "two autoscalers on one Deployment",
    ),
]


@pytest.mark.parametrize("mutate, message", CROSS_RESOURCE)
def test_resources_agree_with_each_other(mutate, message, main_version):
    docs = copy.deepcopy(render("cpu", model=main_version, autoscaling_mode="behavior").docs)
    assert cross_resource_errors(docs) == []
    mutate(docs)
    errors = cross_resource_errors(docs)
    assert any(message in error for error in errors), errors


def test_manifests_carry_no_secrets(main_version):
    docs = render("cpu", model=main_version).docs
    docs.append({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s3"}, "stringData": {"key": "x"}})
    assert any("carry no Secrets" in e for e in validate_documents(docs, crd_schema={}).errors)
