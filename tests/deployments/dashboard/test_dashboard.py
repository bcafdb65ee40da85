"""The Grafana dashboard component: rendered only when asked, as a ConfigMap Grafana's sidecar loads; valid JSON
whose model-dependent names render fills or leaves to dashboard variables; every panel's PromQL parsed by Prometheus'
own promtool, and every metric it reads one that MLServer, the runtime or the cluster's exporters really export."""

from __future__ import annotations

import json
import re
import subprocess

import pytest
import yaml

from deployments.delivery.canary.queries import FAILURE_COUNTER
from deployments.render import kustomize
from deployments.render.autoscaling import REQUEST_COUNTER
from deployments.render.dashboard import COMPONENT_DIR, SIDECAR_LABEL, uid
from deployments.render.overlay import OVERLAYS_DIR, RenderOptions, render
from deployments.render.records import ModelVersion
from deployments.render.validate import validate_documents
from slipway.metric_names import BATCH_ROWS, INFERENCE_SECONDS, QUEUE_SECONDS, REQUEST_SECONDS
from tests.deployments.conftest import record

# What Grafana puts in for its variables, as a query over a real Prometheus would get them.
GRAFANA_VARIABLES = {"$__rate_interval": "1m", "$namespace": "slipway", "$model": "digits"}
# Exported by the cluster, not by anything installed here: cAdvisor (the kubelet), kube-state-metrics, Prometheus's
# own `up`.
CLUSTER_METRICS = {
    "container_cpu_usage_seconds_total",
    "container_memory_working_set_bytes",
    "kube_pod_container_resource_requests",
    "kube_pod_container_resource_limits",
    "kube_horizontalpodautoscaler_status_current_replicas",
    "kube_horizontalpodautoscaler_status_desired_replicas",
    "kube_horizontalpodautoscaler_spec_min_replicas",
    "kube_horizontalpodautoscaler_spec_max_replicas",
    "up",
}
_SELECTED = re.compile(r"([a-zA-Z_:][a-zA-Z0-9_:]*)\{")
_NAME_MATCHER = re.compile(r'__name__=~"([^"]+)"')


def _dashboard(rendered) -> tuple[dict, dict]:
    configmaps = [doc for doc in rendered.docs if doc["kind"] == "ConfigMap"]
    assert len(configmaps) == 1
    (text,) = configmaps[0]["data"].values()
    return configmaps[0], json.loads(text)


def _expressions(dashboard: dict) -> list[str]:
    return [target["expr"] for panel in dashboard["panels"] for target in panel.get("targets", [])]


_MLSERVER_METRICS = """
import json
from mlserver.settings import Settings
from prometheus_client import CollectorRegistry
from py_grpc_prometheus import server_metrics

registry = CollectorRegistry()
collectors = [*server_metrics.init_metrics(registry).values(),
              server_metrics.get_grpc_server_handled_counter(False, registry)]  # MLServer: legacy=False
names = [f"{c._name}{'_total' if c._type == 'counter' else '_bucket'}" for c in collectors]
rest = Settings().metrics_rest_server_prefix  # starlette_exporter's prefix in MLServer's REST app
print(json.dumps(names + [f"{rest}_requests_total", f"{rest}_request_duration_seconds_bucket"]))
"""


def _mlserver_metrics() -> set[str]:
    """The names MLServer 1.7's REST middleware and gRPC interceptor export, read from the installed packages in a
    Python of their own (MLServer's protos clash with tritonclient's in the test process: tests/conftest.py)."""
    import json
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", _MLSERVER_METRICS], capture_output=True, text=True, timeout=120, check=True)
    return set(json.loads(done.stdout)) | {REQUEST_COUNTER, FAILURE_COUNTER}


def test_the_dashboard_is_opt_in(main_version):
    assert not [doc for doc in render("cpu", RenderOptions(model=main_version)).docs if doc["kind"] == "ConfigMap"]


@pytest.mark.parametrize("overlay", ["cpu", "canary"])
def test_the_dashboard_is_a_configmap_the_grafana_sidecar_loads(main_version, canary_version, overlay):
    rendered = render(
        overlay,
        RenderOptions(model=main_version, canary=canary_version if overlay == "canary" else None, namespace="ml", dashboard=True),
    )
    configmap, dashboard = _dashboard(rendered)
    metadata = configmap["metadata"]
    assert metadata["labels"][SIDECAR_LABEL] == "1"
    assert (metadata["name"], metadata["namespace"]) == ("digits-dashboard", "ml")
    assert metadata["labels"]["app.kubernetes.io/managed-by"] == "slipway"  # undeploy finds it by these
    assert metadata["labels"]["slipway.io/model"] == "digits"
    report = validate_documents(rendered.docs)
    assert report.ok, report.errors
    assert "ConfigMap/digits-dashboard (Kubernetes 1.29.0, 1.33.0 strict)" in report.checked
    assert dashboard["uid"] == "slipway-ml-digits" and dashboard["title"] == "Slipway / digits (ml)"
    # the datasource variable has none: Grafana picks the default Prometheus data source (its schema requires a
    # current option's text and value, which no rendering can know)
    current = {var["name"]: var.get("current", {}).get("value") for var in dashboard["templating"]["list"]}
    assert current == {"datasource": None, "namespace": "ml", "model": "digits"}


def test_names_that_depend_on_the_model_are_filled_by_render_or_dashboard_variables():
    model = ModelVersion.model_validate({**record("7"), "name": "mnist", "uri": "s3://slipway-models/mnist/7"})
    configmap, dashboard = _dashboard(render("cpu", RenderOptions(model=model, namespace="vision", dashboard=True)))
    text = json.dumps(dashboard)
    assert "digits" not in text and "$(" not in text and configmap["metadata"]["name"] == "mnist-dashboard"
    for expr in _expressions(dashboard):
        assert "$namespace" in expr, expr  # every query is bound to the chosen namespace...
        assert "$model" in expr, expr  # ...and model
    assert len(uid("a" * 63, "b" * 40)) <= 40  # Grafana's limit, for the longest names Kubernetes allows


def test_builtin_renderer_matches_kubectl_kustomize_on_the_dashboard_component():
    if kustomize.kubectl_binary() is None:
        pytest.skip("kubectl is not installed here: the builtin renderer alone builds the component")
    real, _ = kustomize.build(OVERLAYS_DIR / "cpu", extra_components=[COMPONENT_DIR], engine="kubectl")
    ours, _ = kustomize.build(OVERLAYS_DIR / "cpu", extra_components=[COMPONENT_DIR], engine="builtin")
    assert ours == real


def test_every_panel_query_parses_and_reads_metrics_that_are_exported(prometheus_tools, main_version, tmp_path):
    _, dashboard = _dashboard(render("cpu", RenderOptions(model=main_version, dashboard=True)))
    expressions = _expressions(dashboard)
    assert len(expressions) >= 25
    rules = []
    for index, expr in enumerate(expressions):
        for variable, value in GRAFANA_VARIABLES.items():
            expr = expr.replace(variable, value)
        assert "$" not in expr, expr  # only the variables the dashboard defines
        rules.append({"record": f"slipway_dashboard:query:{index}", "expr": expr})
    path = tmp_path / "panels.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    result = subprocess.run(
        [str(prometheus_tools["promtool"]), "check", "rules", str(path)], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
    read = {name for expr in expressions for name in _SELECTED.findall(expr)}
    read |= {
        name
        for expr in expressions
        for pattern in _NAME_MATCHER.findall(expr)
        for name in (f"model_infer_request_{outcome}_total" for outcome in ("success", "failure"))
        if re.fullmatch(pattern, name)
    }
    runtime = {
        f"{name}_{suffix}"
        for name in (INFERENCE_SECONDS, REQUEST_SECONDS, QUEUE_SECONDS, BATCH_ROWS)
        for suffix in ("bucket", "sum", "count")
    }
    exported = runtime | _mlserver_metrics() | CLUSTER_METRICS
    assert read <= exported, f"not exported by anything: {sorted(read - exported)}"
    assert {
        f"{INFERENCE_SECONDS}_bucket",
        f"{REQUEST_SECONDS}_bucket",
        f"{QUEUE_SECONDS}_bucket",
        f"{BATCH_ROWS}_bucket",
        "rest_server_request_duration_seconds_bucket",
        "grpc_server_handling_seconds_bucket",
        "grpc_server_handled_total",
    } <= read
