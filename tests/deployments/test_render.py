"""Rendering an overlay for one version (two for a canary): what gets pinned where."""

from __future__ import annotations

import dataclasses
import json
import re

import pytest
import yaml

from deployments.render import autoscaling, seldon
from deployments.render.overlay import ADAPTER_RULES_FILE, OVERLAYS_DIR, RenderError, RenderOptions, write_manifests
from deployments.render.records import ModelVersion, RecordError
from slipway.artifact import RUNTIME_IMPLEMENTATION
from slipway.cli import UserError
from slipway.runtime_settings import SettingsError
from tests.deployments.rendering import rendering

# Slipway's renderer: test_kustomize shows it builds every overlay exactly as kubectl kustomize does.
render = rendering()


def _sdep(rendered):
    return rendered.seldon_deployment


def _container(predictor):
    return predictor["componentSpecs"][0]["spec"]["containers"][0]


def test_render_pins_model_version_image_and_namespace(main_version):
    rendered = render("cpu", model=main_version, image="registry.local:5000/team/mlserver-onnx:1.2.3", namespace="models")
    sdep = _sdep(rendered)
    predictor = sdep["spec"]["predictors"][0]
    assert sdep["metadata"]["name"] == predictor["graph"]["name"] == _container(predictor)["name"] == "digits"
    assert predictor["graph"]["modelUri"] == "s3://slipway-models/digits/3"
    assert _container(predictor)["image"] == "registry.local:5000/team/mlserver-onnx:1.2.3"
    assert sdep["metadata"]["annotations"]["slipway.io/model-digest"] == "sha256:" + "ab" * 32
    assert predictor["annotations"]["slipway.io/model-version"] == "3"  # reaches the pods
    assert {doc["metadata"]["namespace"] for doc in rendered.docs} == {"models"}
    for doc in rendered.docs:
        assert doc["metadata"]["labels"]["slipway.io/model"] == "digits"
        assert doc["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "slipway"
    account = next(doc for doc in rendered.docs if doc["kind"] == "ServiceAccount")
    assert predictor["componentSpecs"][0]["spec"]["serviceAccountName"] == account["metadata"]["name"] == "slipway-digits"
    assert rendered.inference_path == "/seldon/models/digits/v2/models/digits/infer"


def test_a_renamed_model_renames_everything_that_names_or_selects_it(main_version):
    other = main_version.model_copy(update={"name": "fraud-scorer", "uri": "s3://models/fraud-scorer/3"})
    rendered = render("cpu", model=other)
    text = yaml.safe_dump_all(rendered.docs)
    assert "digits" not in text
    policy = next(doc for doc in rendered.docs if doc["kind"] == "NetworkPolicy")
    assert policy["spec"]["podSelector"]["matchLabels"] == {"slipway.io/model": "fraud-scorer"}


def test_without_image_the_overlay_keeps_its_own(main_version):
    cpu = _container(_sdep(render("cpu", model=main_version))["spec"]["predictors"][0])
    gpu = _container(_sdep(render("gpu", model=main_version))["spec"]["predictors"][0])
    assert cpu["image"] == "slipway/mlserver-onnx:0.1.0"
    assert gpu["image"] == "slipway/mlserver-onnx-gpu:0.1.0"
    assert gpu["resources"]["limits"]["nvidia.com/gpu"] == 1


def test_the_image_pull_policy_is_always_unless_asked_for_every_predictor(main_version, canary_version):
    default = _sdep(render("canary", model=main_version, canary=canary_version))
    local = _sdep(render("canary", model=main_version, canary=canary_version, image_pull_policy="IfNotPresent"))
    assert [_container(p)["imagePullPolicy"] for p in default["spec"]["predictors"]] == ["Always", "Always"]
    assert [_container(p)["imagePullPolicy"] for p in local["spec"]["predictors"]] == ["IfNotPresent", "IfNotPresent"]


def test_the_network_policy_admits_the_gateway_the_namespace_and_prometheus_only(main_version):
    def sources(rendered) -> dict:
        policy = next(doc for doc in rendered.docs if doc["kind"] == "NetworkPolicy")
        return {tuple(port["port"] for port in rule["ports"]): rule["from"] for rule in policy["spec"]["ingress"]}

    def namespace(name: str) -> dict:
        return {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": name}}}

    assert sources(render("cpu", model=main_version)) == {
        (9000, 9500): [namespace("istio-system"), {"podSelector": {}}],
        (6000,): [namespace("monitoring")],
    }
    chosen = render("gpu", model=main_version, ingress_namespace="ambassador", monitoring_namespace="observability")
    assert sources(chosen) == {
        (9000, 9500): [namespace("ambassador"), {"podSelector": {}}],
        (6000,): [namespace("observability")],
    }
    with pytest.raises(RenderError, match="namespace 'Istio System' is not a DNS-1123 label"):
        render("cpu", model=main_version, ingress_namespace="Istio System")


def test_canary_splits_traffic_between_two_versions(main_version, canary_version):
    rendered = render("canary", model=main_version, canary=canary_version, canary_percent=25)
    main, canary = _sdep(rendered)["spec"]["predictors"]
    assert (main["name"], main["traffic"], canary["name"], canary["traffic"]) == ("default", 75, "canary", 25)
    assert main["graph"]["modelUri"].endswith("/3") and canary["graph"]["modelUri"].endswith("/4")
    assert canary["annotations"]["slipway.io/model-digest"] == "sha256:" + "cd" * 32
    assert main["graph"]["name"] == canary["graph"]["name"] == "digits"  # one model name: one inference URL
    assert canary["labels"]["slipway.io/predictor"] == "canary"
    assert "pdbSpec" not in canary["componentSpecs"][0]
    assert rendered.summary()["predictors"]["canary"]["version"] == "4"


def test_canary_default_split_comes_from_the_overlay(main_version, canary_version):
    predictors = _sdep(render("canary", model=main_version, canary=canary_version))["spec"]["predictors"]
    assert [p["traffic"] for p in predictors] == [90, 10]


@pytest.mark.parametrize(
    "overlay, canary, percent, message",
    [
        ("canary", None, None, "pass the canary's version record"),
        ("cpu", "other-version", None, "this overlay has no canary predictor"),
        ("cpu", None, 10, "needs an overlay with a main and a canary predictor"),
        ("canary", "other-version", 101, "between 0 and 100"),
        ("canary", "other-model", None, "a canary splits traffic between versions of one model"),
        ("nowhere", None, None, "neither one of cpu, gpu, canary nor a folder"),
    ],
)
def test_render_refuses_what_cannot_work(main_version, canary_version, overlay, canary, percent, message):
    versions = {None: None, "other-version": canary_version, "other-model": canary_version.model_copy(update={"name": "other"})}
    with pytest.raises(RenderError, match=message):
        render(overlay, model=main_version, canary=versions[canary], canary_percent=percent)


@pytest.mark.parametrize(
    "option,value,expected",
    [
        ("canary_percent", "20", "render option canary_percent: Input should be a valid integer, not '20'"),
        ("image_pull_policy", "Sometimes", "Input should be 'Always', 'IfNotPresent' or 'Never', not 'Sometimes'"),
        ("engine", "helm", "Input should be 'auto', 'kubectl' or 'builtin', not 'helm'"),
        ("dashboard", "yes", "render option dashboard: Input should be a valid boolean, not 'yes'"),
        ("gpu_node_selector", "a=b", "render option gpu_node_selector: Input should be a valid tuple, not 'a=b'"),
        (
            "model",
            {"name": "digits"},
            "render option model: a ModelVersion (ModelVersion.from_record_file or from_artifact), not dict",
        ),
        ("canary", "4", "render option canary: a ModelVersion (ModelVersion.from_record_file or from_artifact), not str"),
    ],
)
def test_render_options_refuse_a_value_of_the_wrong_type_naming_what_to_give(main_version, option, value, expected):
    with pytest.raises(RenderError, match=re.escape(expected)):
        RenderOptions(**{"model": main_version, option: value})


def test_render_options_are_frozen_and_take_argparse_lists_as_tuples(main_version):
    options = RenderOptions(model=main_version, gpu_node_selector=["a=b"], gpu_tolerations=["gpu:NoSchedule"])
    assert options.gpu_node_selector == ("a=b",) and options.gpu_tolerations == ("gpu:NoSchedule",)
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.namespace = "other"  # type: ignore[misc]
    with pytest.raises(TypeError, match="autoscaling"):
        RenderOptions(model=main_version, autoscaling="cpu")  # type: ignore[call-arg]


def test_unknown_autoscaling_mode_is_refused(main_version):
    with pytest.raises(RenderError, match="choose one of cpu, rps, keda, behavior"):
        render("cpu", model=main_version, autoscaling_mode="magic")


def test_rps_autoscaling_reads_the_adapter_rules_metric(main_version, tmp_path):
    rendered = render("cpu", model=main_version, autoscaling_mode="rps")
    hpa = _sdep(rendered)["spec"]["predictors"][0]["componentSpecs"][0]["hpaSpec"]
    assert hpa["metricsv2"][0]["pods"]["metric"]["name"] == autoscaling.RPS_METRIC
    rule = rendered.adapter_rules["rules"]["custom"][0]
    assert rule["name"]["as"] == autoscaling.RPS_METRIC
    assert rule["seriesQuery"].startswith(autoscaling.REQUEST_COUNTER + "{")
    paths = write_manifests(rendered, tmp_path / "out")
    assert (tmp_path / "out" / ADAPTER_RULES_FILE) in paths
    assert yaml.safe_load((tmp_path / "out" / ADAPTER_RULES_FILE).read_text()) == rendered.adapter_rules
    assert all(doc.get("rules") is None for doc in yaml.safe_load_all((tmp_path / "out" / "all.yaml").read_text()))
    assert render("cpu", model=main_version).adapter_rules is None


def test_keda_autoscaling_queries_this_predictors_requests(main_version, canary_version):
    rendered = render("canary", model=main_version, canary=canary_version, namespace="ml", autoscaling_mode="keda")
    main, canary = _sdep(rendered)["spec"]["predictors"]
    component = main["componentSpecs"][0]
    assert "hpaSpec" not in component
    query = component["kedaSpec"]["triggers"][0]["metadata"]["query"]
    assert query.startswith(f"sum(rate({autoscaling.REQUEST_COUNTER}{{")
    assert 'namespace="ml"' in query and 'slipway_io_model="digits"' in query and 'slipway_io_predictor="default"' in query
    assert "hpaSpec" in canary["componentSpecs"][0]  # the canary keeps its small CPU range


def test_behavior_autoscaling_scales_the_deployment_seldon_creates(main_version):
    rendered = render("cpu", model=main_version, autoscaling_mode="behavior")
    predictor = _sdep(rendered)["spec"]["predictors"][0]
    hpa = next(doc for doc in rendered.docs if doc["kind"] == "HorizontalPodAutoscaler")
    assert hpa["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": "digits-default-0-digits"}
    assert hpa["metadata"]["name"] == "digits-default"
    assert hpa["spec"]["behavior"]["scaleDown"]["stabilizationWindowSeconds"] == 300
    assert "hpaSpec" not in predictor["componentSpecs"][0] and "replicas" not in predictor


def _hpa_metrics(rendered):
    """(predictor, metrics) of every autoscaler: each hpaSpec, and each standalone HPA by its predictor label."""
    found = [
        (p["name"], p["componentSpecs"][0]["hpaSpec"]["metricsv2"])
        for p in _sdep(rendered)["spec"]["predictors"]
        if "hpaSpec" in p["componentSpecs"][0]
    ]
    return found + [
        (doc["metadata"]["labels"]["slipway.io/predictor"], doc["spec"]["metrics"])
        for doc in rendered.docs
        if doc["kind"] == "HorizontalPodAutoscaler"
    ]


@pytest.mark.parametrize("overlay, mode", [("cpu", "cpu"), ("canary", "cpu"), ("canary", "behavior"), ("gpu", "cpu")])
def test_the_hpa_reads_each_predictors_model_container(main_version, canary_version, overlay, mode):
    rendered = render(overlay, model=main_version, canary=canary_version if overlay == "canary" else None, autoscaling_mode=mode)
    predictors = {p["name"]: p for p in _sdep(rendered)["spec"]["predictors"]}
    found = _hpa_metrics(rendered)
    assert sorted(name for name, _ in found) == sorted(predictors)  # every predictor autoscales (behavior: standalone)
    for name, metrics in found:
        model_container = _container(predictors[name])["name"]
        assert model_container == predictors[name]["graph"]["name"] == "digits"
        assert {m["type"] for m in metrics} == {"ContainerResource"}
        assert {m["containerResource"]["container"] for m in metrics} == {model_container}
        targets = {m["containerResource"]["name"]: m["containerResource"]["target"]["averageUtilization"] for m in metrics}
        assert targets == ({"cpu": 60} if overlay == "gpu" else {"cpu": 70, "memory": 80})  # gpu: no memory target
    assert rendered.summary()["hpa_metric_source"] == "container"


def test_a_renamed_model_pins_the_hpa_to_its_container_wherever_the_overlay_named_it(main_version, tmp_path):
    """$(MODEL_CONTAINER), or the base's container name (digits) an SRE's overlay wrote, becomes the model's name."""
    overlay = tmp_path / "mine"
    overlay.mkdir()
    (overlay / "kustomization.yaml").write_text(
        f"resources: [{OVERLAYS_DIR / 'cpu'}]\npatches:\n  - path: hpa.yaml\n    target: {{kind: SeldonDeployment}}\n"
    )
    (overlay / "hpa.yaml").write_text(
        yaml.safe_dump(
            [
                {
                    "op": "replace",
                    "path": "/spec/predictors/0/componentSpecs/0/hpaSpec/metricsv2/1/containerResource/container",
                    "value": "digits",
                }
            ]
        )
    )
    other = main_version.model_copy(update={"name": "fraud-scorer", "uri": "s3://models/fraud-scorer/3"})
    for folder in ("cpu", overlay):
        ((_, metrics),) = _hpa_metrics(render(folder, model=other))
        assert [m["containerResource"]["container"] for m in metrics] == ["fraud-scorer", "fraud-scorer"]


@pytest.mark.parametrize("overlay, mode", [("canary", "cpu"), ("cpu", "behavior")])
def test_hpa_metric_source_pod_falls_back_to_the_pods_resource_metric(main_version, canary_version, overlay, mode):
    canary = canary_version if overlay == "canary" else None
    container = _hpa_metrics(render(overlay, model=main_version, canary=canary, autoscaling_mode=mode))
    rendered = render(overlay, model=main_version, canary=canary, autoscaling_mode=mode, hpa_metric_source="pod")
    pod = _hpa_metrics(rendered)
    assert len(pod) == len(container) == (2 if overlay == "canary" else 1)
    for (_, by_container), (_, by_pod) in zip(container, pod, strict=True):
        assert by_pod == [
            {"type": "Resource", "resource": {"name": m["containerResource"]["name"], "target": m["containerResource"]["target"]}}
            for m in by_container
        ]
    assert rendered.summary()["hpa_metric_source"] == "pod"


def test_unknown_hpa_metric_source_is_refused(main_version):
    with pytest.raises(RenderError, match="choose one of container, pod"):
        render("cpu", model=main_version, hpa_metric_source="node")


@pytest.mark.parametrize("source", ["container", "pod"])
def test_both_metric_sources_count_as_cpu_autoscaling(main_version, source):
    docs = render("cpu", model=main_version, hpa_metric_source=source).docs
    assert autoscaling.scales_on_cpu(docs, "default")
    assert not autoscaling.scales_on_cpu(
        render("cpu", model=main_version, autoscaling_mode="rps", hpa_metric_source=source).docs, "default"
    )


def test_seldon_deployment_names_follow_the_operator():
    predictor = {"name": "default", "componentSpecs": [{"spec": {"containers": [{"name": "digits"}]}}]}
    assert seldon.deployment_name("digits", predictor, 0) == "digits-default-0-digits"
    named = {"name": "p", "componentSpecs": [{"metadata": {"name": "srv"}, "spec": {"containers": [{"name": "x"}]}}]}
    assert seldon.deployment_name("m", named, 0) == "m-p-0-srv"
    long_name = "a" * 40
    long = {"name": "default", "componentSpecs": [{"spec": {"containers": [{"name": long_name}]}}]}
    assert (
        seldon.deployment_name(long_name, long, 0).startswith("seldon-") and len(seldon.deployment_name(long_name, long, 0)) == 39
    )


def test_write_manifests_writes_one_file_per_resource(main_version, tmp_path):
    rendered = render("cpu", model=main_version)
    paths = write_manifests(rendered, tmp_path / "out")
    assert sorted(p.name for p in paths) == [
        "networkpolicy-digits-ingress.yaml",
        "podmonitor-digits-mlserver.yaml",
        "seldondeployment-digits.yaml",
        "serviceaccount-slipway-digits.yaml",
    ]
    assert list(yaml.safe_load_all((tmp_path / "out" / "all.yaml").read_text())) == rendered.docs
    assert json.loads((tmp_path / "out" / "rendering.json").read_text())["predictors"]["default"]["version"] == "3"


def test_a_failed_rendering_leaves_the_previous_one_in_place(main_version, tmp_path):
    rendered = render("cpu", model=main_version)
    write_manifests(rendered, tmp_path / "out")
    before = (tmp_path / "out" / "all.yaml").read_text()
    rendered.docs.append({"kind": "Broken"})  # no metadata: writing fails half-way
    with pytest.raises(KeyError):
        write_manifests(rendered, tmp_path / "out")
    assert (tmp_path / "out" / "all.yaml").read_text() == before
    assert [p.name for p in tmp_path.iterdir()] == ["out"]


def test_a_rendering_replaces_an_earlier_one_but_never_a_folder_it_did_not_write(main_version, tmp_path):
    rendered = render("cpu", model=main_version)
    old = tmp_path / "old"
    old.mkdir()
    (old / "rendering.json").write_text("{}")  # rendered by a Slipway that left no other mark
    (old / "seldondeployment-gone.yaml").write_text("kind: SeldonDeployment\n")
    write_manifests(rendered, old)
    assert not (old / "seldondeployment-gone.yaml").exists() and (old / "all.yaml").is_file()
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    with pytest.raises(UserError, match="mine"):
        write_manifests(rendered, mine)
    assert [p.name for p in mine.iterdir()] == ["notes.txt"]


def test_version_records_are_read_and_checked_at_the_edge(record_files, tmp_path):
    version = ModelVersion.from_record_file(record_files("7", tags=["champion"]))
    assert (version.name, version.version, version.digest[:9], version.tags) == ("digits", "7", "sha256:ab", ("champion",))
    moved = ModelVersion.from_record_file(record_files("7"), uri="gs://elsewhere/digits/7")
    assert moved.uri == "gs://elsewhere/digits/7"
    bad = tmp_path / "bad.json"
    for content, message in [
        ("not json", "is not JSON"),
        ("[1]", "must be a JSON object"),
        (
            '{"name": "Digits_V2", "version": 1, "uri": "s3://b/x", "digest": "' + "a" * 64 + '"}',
            "cannot name Kubernetes objects",
        ),
        ('{"name": "digits", "version": 1, "uri": "file:///store/digits/1", "digest": "' + "a" * 64 + '"}', "pass --model-uri"),
        ('{"name": "digits", "version": 1, "uri": "s3://b/x", "digest": "md5:00"}', "is not a sha256 digest"),
        ('{"name": "digits", "uri": "s3://b/x", "digest": "' + "a" * 64 + '"}', "version: Field required"),
    ]:
        bad.write_text(content)
        with pytest.raises(RecordError, match=message):
            ModelVersion.from_record_file(bad)
    with pytest.raises(RecordError, match="does not exist"):
        ModelVersion.from_record_file(tmp_path / "missing.json")


def test_a_local_stores_record_keeps_its_folder_for_the_settings(record_files, tmp_path):
    folder = _settings_folder(tmp_path / "store" / "digits" / "7", {})
    for uri in (folder.as_uri(), str(folder)):  # as fsspec writes a local store's URI, or a plain path
        version = ModelVersion.from_record_file(record_files("7", uri=uri), uri="s3://bucket/digits/7")
        assert (version.uri, version.local_dir) == ("s3://bucket/digits/7", folder)
    assert ModelVersion.from_record_file(record_files("8")).local_dir is None  # in object storage
    gone = record_files("9", uri=(tmp_path / "gone").as_uri())
    assert ModelVersion.from_record_file(gone, uri="s3://bucket/digits/9").local_dir is None
    assert "local_dir" not in ModelVersion.from_record_file(record_files("8")).model_dump()


def _settings_folder(folder, extra, implementation=RUNTIME_IMPLEMENTATION):
    folder.mkdir(parents=True, exist_ok=True)
    settings = {"name": "digits", "implementation": implementation, "parameters": {"uri": "./model.onnx", "extra": extra}}
    (folder / "model-settings.json").write_text(json.dumps(settings))
    return folder


@pytest.mark.parametrize(
    "mode, overlay, predictor, warned",
    [
        ("cpu", "cpu", "default", True),  # the base's hpaSpec on CPU utilization
        ("behavior", "cpu", "default", True),  # a standalone HPA, on CPU too
        ("rps", "cpu", "default", False),
        ("keda", "canary", "default", False),  # KEDA on the request rate
        ("keda", "canary", "canary", True),  # the canary keeps its hpaSpec on CPU
    ],
)
def test_settings_that_keep_a_cpu_busy_are_warned_of_under_cpu_autoscaling(
    main_version, canary_version, tmp_path, mode, overlay, predictor, warned
):
    rendered = render(overlay, model=main_version, canary=canary_version if overlay == "canary" else None, autoscaling_mode=mode)
    spinning = _settings_folder(tmp_path / "spin", {"event_loop_spin_us": 1000})
    warning = autoscaling.busy_cpu_warning(rendered.docs, predictor, spinning)
    assert (warning is not None) == warned
    if warned:
        assert f"predictor {predictor} autoscales on CPU utilization" in warning
        assert "event_loop_spin_us: 1000" in warning and "--autoscaling rps" in warning


def test_only_settings_that_spin_are_warned_of(main_version, tmp_path):
    docs = render("cpu", model=main_version).docs
    assert autoscaling.busy_cpu_warning(docs, "default", None) is None  # settings not on this machine
    quiet = {"intra_op_threads": 1, "allow_spinning": True}  # one thread: no pool to spin
    assert autoscaling.busy_cpu_warning(docs, "default", _settings_folder(tmp_path / "quiet", quiet)) is None
    warning = autoscaling.busy_cpu_warning(docs, "default", _settings_folder(tmp_path / "pool", {"allow_spinning": True}))
    assert "allow_spinning: true" in warning
    other = _settings_folder(tmp_path / "other", {"event_loop_spin_us": 1000}, implementation="mlserver_sklearn.SKLearnModel")
    assert autoscaling.busy_cpu_warning(docs, "default", other) is None  # not our runtime's settings
    with pytest.raises(SettingsError, match="event_loop_spin_us"):
        autoscaling.busy_cpu_warning(docs, "default", _settings_folder(tmp_path / "bad", {"event_loop_spin_us": -1}))


@pytest.mark.parametrize("overlay", ["cpu", "canary"])
def test_shared_memory_mounts_one_memory_backed_dev_shm_in_every_container(main_version, canary_version, overlay):
    rendered = render(overlay, model=main_version, canary=canary_version if overlay == "canary" else None, shared_memory="1Gi")
    assert render("cpu", model=main_version, shared_memory="1.5Gi").shared_memory == "1.5Gi"
    specs = [component["spec"] for _, _, component in seldon.pod_specs(_sdep(rendered))]
    assert len(specs) == (2 if overlay == "canary" else 1)  # the canary's pods too
    for spec in specs:
        volumes = [volume for volume in spec["volumes"] if volume["name"] == "dshm"]
        assert volumes == [{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "1Gi"}}]
        for container in spec["containers"]:
            assert {"name": "dshm", "mountPath": "/dev/shm"} in container["volumeMounts"]
            assert {"name": "tmp", "mountPath": "/tmp"} in container["volumeMounts"]  # the others stay
    assert rendered.summary()["shared_memory"] == "1Gi"
    assert "dshm" not in json.dumps(
        render(overlay, model=main_version, canary=canary_version if overlay == "canary" else None).docs
    )


@pytest.mark.parametrize("size", ["1 GiB", "0", "0.0Gi", "-1Gi", "lots", "1Gb"])
def test_shared_memory_sizes_that_are_not_quantities_are_refused(main_version, size):
    with pytest.raises(RenderError, match="not a Kubernetes quantity: give one such as 512Mi or 1Gi"):
        render("cpu", model=main_version, shared_memory=size)


@pytest.mark.parametrize(
    "settings, message",
    [
        (
            b'{name: "digits"}',
            "model-settings.json is not JSON (Expecting property name enclosed in double quotes at line 1, column 2)",
        ),
        (b'\xff{"name": "digits"}', "model-settings.json is not UTF-8 text (byte 0xff at line 1, column 1: invalid start byte)"),
        (b'{"implementation": "x", "parameters": [1]}', 'model-settings.json names no model (a JSON object with a "name" string'),
        (b'["digits"]', "model-settings.json names no model"),
    ],
)
def test_an_artifact_whose_settings_cannot_be_read_is_one_line(tmp_path, settings, message):
    (tmp_path / "model-settings.json").write_bytes(settings)
    with pytest.raises(RecordError) as caught:
        ModelVersion.from_artifact(tmp_path)
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_a_version_record_that_is_a_folder_or_not_utf8_is_one_line(tmp_path):
    with pytest.raises(RecordError, match="version record .* is a folder, not a file; write it with"):
        ModelVersion.from_record_file(tmp_path)
    (tmp_path / "record.json").write_bytes(b'{"name": "digits\xe9"}')
    with pytest.raises(RecordError, match=r"is not UTF-8 text \(byte 0xe9 at line 1, column 17: invalid continuation byte\)"):
        ModelVersion.from_record_file(tmp_path / "record.json")


@pytest.mark.parametrize(
    "namespace, suggestion", [("Bad_NS", "bad-ns"), ("-models", "models"), ("a" * 64, "a" * 63), ("", "slipway")]
)
def test_a_namespace_kubernetes_refuses_is_refused_before_rendering(main_version, namespace, suggestion):
    with pytest.raises(RenderError, match="is not a DNS-1123 label") as caught:
        render("cpu", model=main_version, namespace=namespace)
    assert str(caught.value).endswith(f"(e.g. {suggestion})")
