"""The PrometheusRule `alerts` writes, met by a real API server that carries the Prometheus operator's own CRD
(v0.85.0, from its Go module): accepted whole (a structural schema prunes what it does not know, so reading back the
same spec says every field is one the operator reads), refused when a field breaks the schema, and removed by
`undeploy` with the model's other objects."""

from __future__ import annotations

import copy

import pytest
import yaml

from tests.conftest import run_module
from tests.localcluster.conftest import MODEL, make_namespace

pytestmark = pytest.mark.slow

RULES = ("monitoring.coreos.com/v1", "PrometheusRule")


def _rendered(tmp_path, namespace: str) -> dict:
    slo = tmp_path / "slo.yaml"
    slo.write_text("p99_ms: 20\nmax_error_rate: 0.001\nmin_rps: 2\n")
    out = tmp_path / "alerts"
    args = ("alerts", "--slo", str(slo), "--namespace", namespace, "--model", MODEL, "--out", str(out))
    run_module("deployments", *args, timeout=120)
    return yaml.safe_load((out / f"prometheusrule-{MODEL}-slo.yaml").read_text())


def _apply(api, doc: dict, *, dry_run: bool = False):
    from deployments.rollout.kube_api import dynamic_client

    resource = dynamic_client(api).resources.get(api_version=doc["apiVersion"], kind=doc["kind"])
    extra = {"dry_run": "All"} if dry_run else {}
    return resource.server_side_apply(
        body=doc, name=doc["metadata"]["name"], namespace=doc["metadata"]["namespace"], field_manager="test", **extra
    )


def test_the_rendered_prometheus_rule_is_accepted_whole_and_undeploy_removes_it(api, cluster_env, tmp_path):
    from deployments.rollout.kube_api import dynamic_client

    namespace = make_namespace(api, "alerts", secret=False)
    rule = _rendered(tmp_path, namespace)
    _apply(api, rule)
    resource = dynamic_client(api).resources.get(api_version=RULES[0], kind=RULES[1])
    stored = resource.get(name=f"{MODEL}-slo", namespace=namespace).to_dict()
    assert stored["spec"] == rule["spec"]  # nothing pruned: every field is in the operator's schema
    assert sum(len(group["rules"]) for group in stored["spec"]["groups"]) == 13

    done = run_module("deployments", "undeploy", "--name", MODEL, "--namespace", namespace, env=cluster_env)
    assert resource.get(namespace=namespace).items == [], done.stderr


# A value of the wrong type is refused by server-side apply's typed patch (HTTP 500 from 1.35, naming the field by the
# group's list key); one of the right type that breaks a pattern, by the CRD's validation (HTTP 422, by index).
@pytest.mark.parametrize(
    "breaks, status, said",
    [
        (lambda rule: rule.__setitem__("for", "5 minutes"), 422, "spec.groups[0].rules[{index}].for: Invalid value"),
        (lambda rule: rule["annotations"].__setitem__("runbook", 3), 500, "rules[{index}].annotations.runbook: expected string"),
        (lambda rule: rule.__setitem__("labels", ["page"]), 500, "rules[{index}].labels: expected map"),
    ],
    ids=["duration", "annotation-type", "labels-type"],
)
def test_a_prometheus_rule_that_breaks_the_operators_schema_is_refused(api, tmp_path, breaks, status, said, request):
    from kubernetes.client.exceptions import ApiException

    namespace = make_namespace(api, f"alerts-{request.node.callspec.id}", secret=False)
    rule = _rendered(tmp_path, namespace)
    _apply(api, copy.deepcopy(rule), dry_run=True)  # the rule as rendered passes: the refusal below is the change's
    index = next(i for i, r in enumerate(rule["spec"]["groups"][0]["rules"]) if "alert" in r)
    breaks(rule["spec"]["groups"][0]["rules"][index])
    with pytest.raises(ApiException) as refused:
        _apply(api, rule, dry_run=True)
    assert refused.value.status == status, refused.value.body
    assert said.format(index=index) in refused.value.body, refused.value.body
