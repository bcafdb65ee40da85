"""`render --engine kserve`: a ServingRuntime and an InferenceService (RawDeployment) from the Seldon rendering's
settings, validated against KServe v0.15.2's own CRD schemas (from its Go module, through the cluster cache)."""

from __future__ import annotations

import copy
import json

import pytest
import yaml

from deployments.kserve import api
from deployments.kserve.render import STORAGE_SECRET, render_kserve
from deployments.kserve.validate import CRD_DIR_ENV, load_schemas, validate_kserve
from deployments.render.overlay import RenderError
from localcluster.build import build_component, go_binary
from localcluster.components import KSERVE_CRDS
from slipway.artifact import EXPECTED_DIGESTS_ENV
from tests.conftest import run_module
from tests.deployments.rendering import rendering

render = rendering(render_kserve)


@pytest.fixture(scope="module")
def crd_folder():
    """KServe's CRDs, copied from its module at the pinned release into the cluster cache (once per machine)."""
    return build_component(KSERVE_CRDS, go_binary()) / "share"


@pytest.fixture(scope="module")
def schemas(crd_folder):
    loaded = load_schemas(crd_folder)
    assert all(loaded.values()), f"KServe's CRDs are missing from {crd_folder}"
    return loaded


def _kind(docs, kind):
    return next(doc for doc in docs if doc["kind"] == kind)


@pytest.mark.parametrize("overlay,mode", [("cpu", "cpu"), ("gpu", "cpu"), ("cpu", "behavior")])
def test_the_rendered_objects_validate_against_kserves_schemas(overlay, mode, main_version, schemas):
    report = validate_kserve(render(overlay, model=main_version, autoscaling_mode=mode).docs, schemas=schemas)
    assert report.ok, report.errors
    assert not report.skipped
    assert any(item.startswith("InferenceService/digits (KServe v1beta1 CRD schema") for item in report.checked)
    assert any(item.startswith("ServingRuntime/slipway-digits (KServe v1alpha1 CRD schema") for item in report.checked)


def test_one_version_as_a_runtime_and_a_raw_inference_service(main_version):
    docs = render("cpu", model=main_version, namespace="models", image="registry.local/mlserver-onnx:1.2.3").docs
    assert [doc["kind"] for doc in docs] == [
        "ServiceAccount",
        "ServingRuntime",
        "InferenceService",
        "HorizontalPodAutoscaler",
        "PodDisruptionBudget",
        "PodMonitor",
        "NetworkPolicy",
    ]
    runtime, isvc = _kind(docs, api.RUNTIME_KIND), _kind(docs, api.ISVC_KIND)
    assert runtime["spec"]["protocolVersions"] == ["v2"]
    (container,) = runtime["spec"]["containers"]
    assert container["name"] == "kserve-container" and container["image"] == "registry.local/mlserver-onnx:1.2.3"
    env = {item["name"]: item["value"] for item in container["env"]}
    assert env["SLIPWAY_REPOSITORY_API"] == "closed"
    assert env["MLSERVER_MODEL_REPOSITORY_IMPLEMENTATION"] == "wrappers.repository_api.GuardedRepository"
    assert env["MLSERVER_LOGGING_SETTINGS"] == "/etc/slipway/logging.json"
    assert env["MLSERVER_HTTP_PORT"] == "9000" and env["MLSERVER_METRICS_ENDPOINT"] == "/prometheus"
    assert EXPECTED_DIGESTS_ENV not in env  # the version's pin is on the InferenceService, which names the version
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["readinessProbe"]["httpGet"]["path"] == "/v2/health/ready"
    predictor = isvc["spec"]["predictor"]
    assert isvc["metadata"]["annotations"][api.DEPLOYMENT_MODE_ANNOTATION] == "RawDeployment"
    assert isvc["metadata"]["annotations"][api.AUTOSCALER_CLASS_ANNOTATION] == "external"
    assert predictor["securityContext"]["runAsUser"] == 10001
    assert predictor["model"]["storageUri"] == main_version.uri
    assert predictor["model"]["runtime"] == runtime["metadata"]["name"] == "slipway-digits"
    assert predictor["model"]["env"] == [{"name": EXPECTED_DIGESTS_ENV, "value": f"digits={main_version.digest}"}]
    assert predictor["labels"] == {"slipway.io/model": "digits", "slipway.io/predictor": "default"}
    account = _kind(docs, "ServiceAccount")
    assert predictor["serviceAccountName"] == account["metadata"]["name"]
    assert account["secrets"] == [{"name": STORAGE_SECRET}]  # where KServe looks for S3 credentials
    hpa = _kind(docs, "HorizontalPodAutoscaler")
    assert hpa["spec"]["scaleTargetRef"]["name"] == "digits-predictor"
    assert hpa["metadata"]["name"] == "digits-predictor-hpa"  # not KServe's own HPA's name, which its controller takes
    assert {m["containerResource"]["container"] for m in hpa["spec"]["metrics"]} == {"kserve-container"}
    assert _kind(docs, "PodDisruptionBudget")["spec"]["selector"]["matchLabels"] == {
        "serving.kserve.io/inferenceservice": "digits",
        "component": "predictor",
    }
    assert {doc["metadata"]["namespace"] for doc in docs} == {"models"}


def test_a_pvc_version_lists_no_storage_secret(main_version):
    version = main_version.model_copy(update={"uri": "pvc://models/digits/3"})
    assert "secrets" not in _kind(render("cpu", model=version).docs, "ServiceAccount")


def _broken(docs, change):
    docs = copy.deepcopy(docs)
    change({doc["kind"]: doc for doc in docs})
    return docs


@pytest.mark.parametrize(
    "change,expected",
    [
        (lambda d: d[api.RUNTIME_KIND]["spec"].update(protocolVersions=["v1"]), "spec.protocolVersions must be [v2]"),
        (lambda d: d[api.ISVC_KIND]["spec"]["predictor"]["model"].update(protocolVersion="v1"), "protocolVersion must be v2"),
        (
            lambda d: d[api.ISVC_KIND]["spec"]["predictor"]["model"].pop("storageUri"),
            "spec.predictor.model.storageUri is missing",
        ),
        (
            lambda d: d[api.ISVC_KIND]["spec"]["predictor"]["model"].update(storageURI="s3://x/y"),
            "spec.predictor.model.storageURI: not a field of KServe's schema",
        ),
        (lambda d: d[api.ISVC_KIND]["spec"]["predictor"].update(minReplicas="two"), "minReplicas: 'two' is not of type"),
        (lambda d: d[api.ISVC_KIND]["metadata"]["annotations"].pop(api.DEPLOYMENT_MODE_ANNOTATION), "must be RawDeployment"),
        (lambda d: d[api.ISVC_KIND]["metadata"]["annotations"].pop(api.AUTOSCALER_CLASS_ANNOTATION), "KServe's own HPA"),
        (lambda d: d[api.ISVC_KIND]["spec"]["predictor"]["model"].update(runtime="other"), "runtime 'other' is not among"),
        (
            lambda d: d[api.RUNTIME_KIND]["spec"]["containers"][0]["securityContext"].pop("readOnlyRootFilesystem"),
            "readOnlyRootFilesystem must be true",
        ),
        (lambda d: d["HorizontalPodAutoscaler"]["spec"]["scaleTargetRef"].update(name="digits"), "not the predictor Deployment"),
        (
            lambda d: d["HorizontalPodAutoscaler"]["metadata"].update(name="digits-predictor"),
            "takes an HPA named digits-predictor over",
        ),
        (
            lambda d: d["PodDisruptionBudget"]["spec"]["selector"]["matchLabels"].update(component="transformer"),
            "matches no predictor pod",
        ),
    ],
)
def test_a_broken_object_is_refused_naming_what_is_wrong(change, expected, main_version, schemas):
    docs = render("cpu", model=main_version).docs
    assert validate_kserve(docs, schemas=schemas).ok
    report = validate_kserve(_broken(docs, change), schemas=schemas)
    assert any(expected in error for error in report.errors), report.errors


@pytest.fixture(scope="module")
def scaled_object_schema():
    """KEDA's own ScaledObject CRD at the release the local cluster runs, copied from its module into the cluster cache
    (the `crds` component `make cluster` applies; once per machine)."""
    from deployments.render.validate import crd_version_schema
    from localcluster.components import COMPONENTS

    crds = next(component for component in COMPONENTS if component.name == "crds")
    schema = crd_version_schema(build_component(crds, go_binary()) / "share" / "crd-scaledobjects.yaml", "v1alpha1")
    assert schema is not None
    return schema


def test_rps_renders_an_hpa_on_the_predictor_reading_the_adapter_s_metric(main_version, schemas, tmp_path):
    """`--autoscaling rps`: the rps component's hpaSpec as Slipway's HPA on the Deployment KServe makes, reading the
    per-pod request rate prometheus-adapter serves; KServe told to make no HPA of its own; the adapter's rules written
    beside the manifests, as for Seldon (the adapter keys the counter by the scrape's `namespace` and `pod` labels)."""
    from deployments.render import autoscaling
    from deployments.render.overlay import ADAPTER_RULES_FILE, write_manifests

    seldon_rendering = rendering()("cpu", model=main_version, namespace="models", autoscaling_mode="rps")
    (component,) = [c for p in seldon_rendering.seldon_deployment["spec"]["predictors"] for c in p["componentSpecs"]]
    rendered = render("cpu", model=main_version, namespace="models", autoscaling_mode="rps")
    docs = rendered.docs
    assert [doc["kind"] for doc in docs if doc["kind"] in ("HorizontalPodAutoscaler", "ScaledObject")] == [
        "HorizontalPodAutoscaler"
    ]
    hpa = _kind(docs, "HorizontalPodAutoscaler")
    assert hpa["metadata"]["name"] == "digits-predictor-hpa" and hpa["metadata"]["namespace"] == "models"
    assert hpa["metadata"]["labels"]["slipway.io/model"] == "digits"  # what undeploy finds it by
    assert hpa["spec"] == {
        "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "digits-predictor"},
        "minReplicas": component["hpaSpec"]["minReplicas"],
        "maxReplicas": component["hpaSpec"]["maxReplicas"],
        "metrics": component["hpaSpec"]["metricsv2"],
    }
    (metric,) = hpa["spec"]["metrics"]
    assert metric["type"] == "Pods" and metric["pods"]["metric"]["name"] == autoscaling.RPS_METRIC
    isvc = _kind(docs, api.ISVC_KIND)
    assert isvc["metadata"]["annotations"][api.AUTOSCALER_CLASS_ANNOTATION] == "external"
    assert isvc["spec"]["predictor"]["minReplicas"] == component["hpaSpec"]["minReplicas"]
    report = validate_kserve(docs, schemas=schemas)
    assert report.ok, report.errors
    assert rendered.adapter_rules == seldon_rendering.adapter_rules == autoscaling.adapter_rules()
    write_manifests(rendered, tmp_path / "out")
    assert yaml.safe_load((tmp_path / "out" / ADAPTER_RULES_FILE).read_text()) == rendered.adapter_rules


@pytest.mark.parametrize("overlay,mode", [("cpu", "keda"), ("gpu", "gpu-queue"), ("gpu", "gpu-util")])
def test_a_keda_mode_renders_a_scaled_object_on_the_predictor_deployment(
    overlay, mode, main_version, schemas, scaled_object_schema
):
    """The kedaSpec Seldon's rendering carries, as the ScaledObject Seldon's operator would make of it, on the
    Deployment KServe makes; KServe told to make no autoscaler of its own; valid against KEDA's own schema."""
    import jsonschema

    from deployments.kserve.validate import unknown_fields

    seldon_rendering = rendering()(overlay, model=main_version, namespace="models", autoscaling_mode=mode)
    (component,) = [c for p in seldon_rendering.seldon_deployment["spec"]["predictors"] for c in p["componentSpecs"]]
    docs = render(overlay, model=main_version, namespace="models", autoscaling_mode=mode).docs
    assert "HorizontalPodAutoscaler" not in {doc["kind"] for doc in docs}
    scaled = _kind(docs, "ScaledObject")
    assert scaled["apiVersion"] == "keda.sh/v1alpha1" and scaled["metadata"]["name"] == "digits-predictor-keda"
    assert scaled["metadata"]["namespace"] == "models"
    assert scaled["metadata"]["labels"]["slipway.io/model"] == "digits"  # what undeploy finds it by
    assert scaled["spec"] == {
        "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "digits-predictor"},
        **component["kedaSpec"],
    }
    (query,) = [trigger["metadata"]["query"] for trigger in scaled["spec"]["triggers"]]
    assert "$(" not in query and 'namespace="models"' in query  # the pods' labels, filled in as for Seldon
    assert _kind(docs, api.ISVC_KIND)["metadata"]["annotations"][api.AUTOSCALER_CLASS_ANNOTATION] == "external"
    report = validate_kserve(docs, schemas=schemas)
    assert report.ok, report.errors
    assert "ScaledObject/digits-predictor-keda (Slipway rules; KEDA's schema in the server-side dry run)" in report.checked
    assert list(jsonschema.Draft7Validator(scaled_object_schema).iter_errors(scaled)) == []
    assert unknown_fields(scaled_object_schema, scaled) == []


@pytest.mark.parametrize(
    "change,expected",
    [
        (
            lambda d: d["ScaledObject"]["spec"]["scaleTargetRef"].update(name="digits"),
            "is not the predictor Deployment KServe creates (digits-predictor)",
        ),
        (
            lambda d: d["ScaledObject"]["metadata"].update(name="digits-predictor"),
            "KServe's `keda` autoscaler class makes a ScaledObject of that name",
        ),
        (lambda d: d["ScaledObject"]["spec"].update(triggers=[]), "spec.triggers is empty"),
        (
            lambda d: d[api.ISVC_KIND]["metadata"]["annotations"].update({api.AUTOSCALER_CLASS_ANNOTATION: "keda"}),
            "with Slipway's ScaledObject rendered, annotation serving.kserve.io/autoscalerClass must be external",
        ),
    ],
)
def test_a_broken_scaled_object_is_refused(change, expected, main_version, schemas):
    docs = render("cpu", model=main_version, autoscaling_mode="keda").docs
    report = validate_kserve(_broken(docs, change), schemas=schemas)
    assert any(expected in error for error in report.errors), report.errors


def test_an_hpa_beside_the_scaled_object_is_refused(main_version, schemas):
    docs = render("cpu", model=main_version, autoscaling_mode="keda").docs
    hpa = _kind(render("cpu", model=main_version).docs, "HorizontalPodAutoscaler")
    report = validate_kserve([*docs, hpa], schemas=schemas)
    expected = "ScaledObject/digits-predictor-keda and HorizontalPodAutoscaler/digits-predictor-hpa both scale the predictor"
    assert any(expected in error for error in report.errors), report.errors


def test_without_the_crds_the_schema_layer_is_skipped_and_not_claimed(main_version, tmp_path):
    report = validate_kserve(render("cpu", model=main_version).docs, schemas=load_schemas(tmp_path))
    assert report.ok and len(report.skipped) == 2 and "KServe's CRD schema not found" in report.skipped[0]
    assert not any("CRD schema" in item for item in report.checked)


def test_what_kserve_does_not_render_yet_is_refused(main_version):
    with pytest.raises(RenderError, match="--split is a Seldon graph"):
        render("cpu", model=main_version, split_mode="cpu-gpu")


def test_render_engine_kserve_writes_valid_manifests(record_files, reports_env, crd_folder, tmp_path):
    out = tmp_path / "kserve"
    env = {**reports_env, CRD_DIR_ENV: str(crd_folder)}
    args = ("deployments", "render", "--engine", "kserve", "--version-record", str(record_files("3")), "--kustomize")
    result = run_module(*args, "builtin", "--out", str(out), env=env)
    assert "valid (7 checked)" in result.stderr
    docs = list(yaml.safe_load_all((out / "all.yaml").read_text()))
    assert _kind(docs, api.ISVC_KIND)["spec"]["predictor"]["model"]["storageUri"] == "s3://slipway-models/digits/3"
    rendering = json.loads((out / "rendering.json").read_text())
    assert rendering["serving_engine"] == "kserve"
    assert rendering["inference_path"] == "http://digits-predictor.slipway.svc.cluster.local/v2/models/digits/infer"


def test_render_engine_kserve_refuses_a_canary_in_one_line(record_files, reports_env, tmp_path):
    args = ("deployments", "render", "--engine", "kserve", "--overlay", "canary", "--version-record")
    result = run_module(*args, str(record_files("3")), "--out", str(tmp_path / "x"), env=reports_env, check=False)
    assert result.returncode != 0 and not (tmp_path / "x").exists()
    assert "--engine kserve renders one version" in result.stderr


@pytest.mark.parametrize("command", ["canary", "shadow"])
def test_a_canary_or_shadow_of_kserve_is_refused_in_one_line_before_the_cluster(command, reports_env):
    env = {**reports_env, "KUBECONFIG": "/nonexistent"}  # the refusal comes first: no cluster is asked
    result = run_module("deployments", command, "--engine", "kserve", "--ref", "digits:3", env=env, check=False)
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert result.returncode == 2 and len(errors) == 1, result.stderr
    assert f"{command} --engine kserve is not built, nothing was changed" in errors[0]
    assert "RawDeployment has no traffic split" in errors[0]


def test_the_storage_secret_in_kserves_form():
    from deployments.kserve.storage import s3_secret

    environ = {
        "AWS_ACCESS_KEY_ID": "id",
        "AWS_SECRET_ACCESS_KEY": "key",
        "AWS_ENDPOINT_URL": "http://127.0.0.1:9000",
        "AWS_REGION": "eu-west-1",
    }
    manifest, used = s3_secret(STORAGE_SECRET, "models", environ)
    assert sorted(manifest["data"]) == ["AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"]
    assert manifest["metadata"]["annotations"] == {
        "serving.kserve.io/s3-endpoint": "127.0.0.1:9000",
        "serving.kserve.io/s3-usehttps": "0",
        "serving.kserve.io/s3-region": "eu-west-1",
    }
    assert used == ["AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_ENDPOINT_URL", "AWS_REGION"]


@pytest.mark.parametrize(
    "environ,expected",
    [
        ({}, "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY not set"),
        ({"AWS_ACCESS_KEY_ID": "i", "AWS_SECRET_ACCESS_KEY": "k", "AWS_SESSION_TOKEN": "t"}, "carries no session token"),
        ({"AWS_ACCESS_KEY_ID": "i", "AWS_SECRET_ACCESS_KEY": "k", "AWS_ENDPOINT_URL": "s3.example.com"}, "not an http(s) URL"),
    ],
)
def test_secret_engine_kserve_refuses_what_kserve_cannot_use_in_one_line(environ, expected, reports_env):
    env = {key: value for key, value in {**reports_env, **environ}.items()}
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"):
        env.setdefault(name, "")
    result = run_module("deployments", "secret", "--engine", "kserve", "--dry-run", "client", env=env, check=False)
    assert result.returncode != 0 and expected in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_the_dashboard_reads_kserves_model_container(main_version, schemas):
    docs = render("cpu", model=main_version, dashboard=True).docs
    assert validate_kserve(docs, schemas=schemas).ok
    panels = json.loads(next(iter(_kind(docs, "ConfigMap")["data"].values())))
    exprs = [t["expr"] for p in panels["panels"] for t in p.get("targets", []) if "expr" in t]
    resource = [e for e in exprs if "container_cpu_usage_seconds_total" in e or "kube_pod_container_resource" in e]
    assert resource and all('container="kserve-container"' in e and 'pod=~"$model-.+"' in e for e in resource)
    assert not any('container="$model"' in e for e in exprs)


def test_alerts_for_a_kserve_model_name_its_objects(tmp_path):
    from deployments.delivery.alerts.rules import RuleError, SloRules
    from slipway.slo import load_slo

    path = tmp_path / "slo.yaml"
    path.write_text(yaml.safe_dump({"p95_ms": 50, "min_rps": 5}))
    slo = load_slo(path)
    rules = SloRules(slo, namespace="models", model="digits", engine="kserve").groups()[0]["rules"]
    runbooks = " ".join(rule["annotations"]["runbook"] for rule in rules if "alert" in rule)
    assert "get inferenceservice digits" in runbooks and "digits-predictor.models" in runbooks
    assert "seldon" not in runbooks
    # the series they read carry the labels the InferenceService puts on its pods
    assert 'slipway_io_model="digits"' in " ".join(rule["expr"] for rule in rules)
    with pytest.raises(RuleError, match="engine 'knative' is not one of"):
        SloRules(slo, namespace="models", model="digits", engine="knative")
