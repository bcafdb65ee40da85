"""KEDA really scales on the local cluster: its operator, metrics API server and admission webhooks built from
`github.com/kedacore/keda/v2` and started as processes (localcluster/keda.py), the Seldon operator making the
ScaledObject from the kedaSpec Slipway renders, and the real HPA controller acting on what KEDA serves it.

The pre-scaling overlay `recommend` writes is deployed with a cron window a couple of minutes from now, and the
Deployment's replicas follow the window up and back down; the request-rate trigger reads a local Prometheus that
scrapes a real counter, and the replicas follow the rate up and down; the GPU utilization trigger reads DCGM's gauge
from the same Prometheus, and the replicas follow the cards' busy time; the request-rate trigger also scales the
predictor Deployment KServe makes, from the ScaledObject `deploy --engine kserve` renders (KServe's controller runs in
the module's cluster too, where it is built; its figures go to reports/kserve-cluster.json). Every change of replicas
lands in reports/keda-scaling.json (and a PNG). The module has a cluster of its own (module scope), since KEDA is
opt-in (`make cluster KEDA=1`): the package's shared cluster stays without it.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import numpy as np
import pytest
import yaml

from deployments.render.autoscaling import component_dir
from slipway.paths import PROJECT_ROOT
from tests.conftest import run_module
from tests.deployments.traces import MIB, matrix, write
from tests.localcluster.conftest import MODEL, control_plane, until

pytestmark = pytest.mark.slow

PREDICTOR = "default"
DEPLOYMENT = f"{MODEL}-{PREDICTOR}-0-{MODEL}"  # what the Seldon operator names predictor 0's Deployment
COMPONENT = "/spec/predictors/0/componentSpecs/0/kedaSpec"
SCALE_DOWN_WINDOW_S = 20
# The KEDA component's HPA behaviour, sized for a test: up by 100% and down by 100% per 15 s, down after 20 s.
TEST_BEHAVIOR = {
    "scaleUp": {"stabilizationWindowSeconds": 0, "policies": [{"type": "Percent", "value": 100, "periodSeconds": 15}]},
    "scaleDown": {
        "stabilizationWindowSeconds": SCALE_DOWN_WINDOW_S,
        "policies": [{"type": "Percent", "value": 100, "periodSeconds": 15}],
    },
}
DAY_S = 86400
T = TypeVar("T")


@pytest.fixture(scope="module")
def keda_cluster(tmp_path_factory):
    """A control plane with KEDA, and with KServe's controller where it is built (for the test on KServe's predictor:
    one control plane for the module), stopped by PID afterwards. KEDA is opt-in: where its binaries are not built
    (`make cluster-build KEDA=1`, or `make test`) the module skips, saying so, rather than build them here."""
    from localcluster.build import cached
    from localcluster.components import KEDA, KSERVE

    if not cached(KEDA):
        pytest.skip(
            f"KEDA {KEDA.version} is not built: it is opt-in, `make cluster-build KEDA=1` builds it (docs/local-cluster.md)"
        )
    with control_plane(tmp_path_factory, "keda", with_keda=True, with_kserve=cached(KSERVE)) as state:
        yield state


@pytest.fixture(scope="module")
def api(keda_cluster):
    from localcluster.objects import client

    return client(keda_cluster.kubeconfig)


@pytest.fixture(scope="module")
def env(keda_cluster, reports_env) -> dict[str, str]:
    return {**reports_env, **keda_cluster.storage_environment(), "KUBECONFIG": str(keda_cluster.kubeconfig), "COLUMNS": "400"}


@pytest.fixture(scope="module")
def series(tmp_path_factory):
    """The exporter (request counters, DCGM gauges) and the Prometheus scraping it: (exporter, Prometheus URL)."""
    from localcluster.build import build_all
    from localcluster.components import COMPONENTS
    from tests.localcluster.keda_series import Exporter, scraping

    binary = build_all(tuple(c for c in COMPONENTS if c.name == "prometheus"))["prometheus"] / "bin" / "prometheus"
    exporter = Exporter()
    with exporter.serving() as target, scraping(binary, target, tmp_path_factory.mktemp("keda-prometheus")) as url:
        yield exporter, url


def _namespace(api, keda_cluster, name: str) -> str:
    from localcluster.objects import create_namespace

    create_namespace(api, name, keda_cluster.storage_environment())
    return name


def _artifact(tmp_path: Path) -> Path:
    """An artifact folder `deploy` uploads and pins by digest: a one-node ONNX graph no container loads (kwok runs
    none)."""
    from slipway.artifact import SETTINGS_FILE, write_manifest

    folder = tmp_path / "artifact"
    folder.mkdir()
    (folder / SETTINGS_FILE).write_text(json.dumps({"name": MODEL, "parameters": {"version": "1"}}))
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"])],
        "identity",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
    )
    onnx.save(helper.make_model(graph), folder / "model.onnx")  # the gpu overlay reads its numerics
    write_manifest(folder)
    return folder


def _overlay(folder: Path, base: Path, *, components: list[Path], ops: list[dict]) -> Path:
    """An SRE's overlay over `base`: `components` added, then JSON-patch `ops` on the SeldonDeployment."""
    folder.mkdir(parents=True)
    kustomization = {
        "resources": [os.path.relpath(base, folder)],
        "components": [os.path.relpath(component, folder) for component in components],
        "patches": [{"path": "test.yaml", "target": {"kind": "SeldonDeployment"}}],
    }
    (folder / "kustomization.yaml").write_text(yaml.safe_dump(kustomization))
    (folder / "test.yaml").write_text(yaml.safe_dump(ops))
    return folder


def _local_prometheus(url: str) -> list[dict]:
    """The request-rate trigger pointed at the local Prometheus, KEDA polling every 5 s, the test's behaviour."""
    return [
        {"op": "replace", "path": f"{COMPONENT}/triggers/0/metadata/serverAddress", "value": url},
        {"op": "replace", "path": f"{COMPONENT}/pollingInterval", "value": 5},
        {"op": "replace", "path": f"{COMPONENT}/advanced/horizontalPodAutoscalerConfig/behavior", "value": TEST_BEHAVIOR},
    ]


def _deploy(env: dict[str, str], namespace: str, overlay: Path, artifact: Path, *options: str) -> None:
    run_module(
        "deployments",
        "deploy",
        *options,
        "--namespace",
        namespace,
        "--overlay",
        str(overlay),
        "--model-dir",
        str(artifact),
        "--wait",
        "120",
        env=env,
    )


def _deploy_scaled(api, env, namespace: str, tmp_path: Path, url: str, *options: str, base="cpu", component="keda"):
    """`deploy` over the `base` overlay with the autoscaling `component`, its trigger on the local Prometheus at `url`;
    the ScaledObject it made."""
    overlay = _overlay(
        tmp_path / "overlay",
        PROJECT_ROOT / "deployments" / "overlays" / base,
        components=[component_dir(component)],
        ops=_local_prometheus(url),
    )
    _deploy(env, namespace, overlay, _artifact(tmp_path), *options)
    return _scaled_object(api, namespace)


def _scaled_object(api, namespace: str):
    from kubernetes.dynamic import DynamicClient

    items = DynamicClient(api).resources.get(api_version="keda.sh/v1alpha1", kind="ScaledObject").get(namespace=namespace).items
    assert len(items) == 1, [item.metadata.name for item in items]
    return items[0]


def _ready(scaled):
    """The ScaledObject once KEDA has made it Ready (its HPA made), else None."""
    conditions = scaled.to_dict().get("status", {}).get("conditions", [])
    return scaled if any(c["type"] == "Ready" and c["status"] == "True" for c in conditions) else None


def _clock(epoch: float) -> str:
    return time.strftime("%H:%M", time.gmtime(epoch))


def _rate_up_and_down(
    api, exporter, watched: dict[str, str], high: float, *, hold_s: float = 0.0, while_held: Callable[[], T] = lambda: None
) -> tuple[list, T]:
    """The request-rate trigger's scenario, on the Deployment `watched` names: 0 req/s until KEDA's HPA has read the
    trigger and holds the minimum (2 replicas); `high` until 5 replicas, then `hold_s` more, `while_held()` read at its
    end; 0 req/s again until 2. The samples, each with its phase, and what `while_held()` gave."""
    from localcluster.keda_proof import watch

    phase = {"now": "0 req/s"}
    samples: list = []
    began = time.monotonic()

    def until(condition: Callable[[list], bool], timeout_s: float) -> None:
        watch(api, **watched, until=condition, phase=lambda: phase["now"], timeout_s=timeout_s, samples=samples, began=began)

    until(lambda s: s[-1].replicas == 2 and any(value is not None for value in s[-1].metrics.values()), 120)
    exporter.set_rate(watched["namespace"], MODEL, PREDICTOR, high)
    loaded_since = time.monotonic()
    phase["now"] = f"{high:g} req/s"
    until(lambda s: s[-1].replicas == 5, 240)
    if hold_s:
        until(lambda s: time.monotonic() > loaded_since + hold_s, hold_s + 45)
    reading = while_held()
    exporter.set_rate(watched["namespace"], MODEL, PREDICTOR, 0.0)
    phase["now"] = "0 req/s again"
    until(lambda s: s[-1].replicas == 2, 240)
    return samples, reading


# ------------------------------------------------------------------ the admission webhook


def test_keda_s_webhook_refuses_a_second_scaled_object_on_one_deployment(api, keda_cluster, env, series, tmp_path):
    """The request-rate overlay applies; KEDA makes its HPA for the ScaledObject the Seldon operator made; a second
    ScaledObject on the same Deployment is refused by KEDA's own admission webhook, called on loopback."""
    from kubernetes import client
    from kubernetes.client import ApiException
    from kubernetes.dynamic import DynamicClient

    from localcluster.keda_proof import HPA_PREFIX

    _, url = series
    namespace = _namespace(api, keda_cluster, "keda-webhook")
    assert _deploy_scaled(api, env, namespace, tmp_path, url).spec.scaleTargetRef.name == DEPLOYMENT
    scaled = until(lambda: _ready(_scaled_object(api, namespace)), 60, "the ScaledObject's Ready condition")

    hpa = client.AutoscalingV2Api(api).read_namespaced_horizontal_pod_autoscaler(HPA_PREFIX + scaled.metadata.name, namespace)
    assert hpa.spec.scale_target_ref.name == DEPLOYMENT and hpa.spec.min_replicas == 2

    second = {
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "ScaledObject",
        "metadata": {"name": "second", "namespace": namespace},
        "spec": {
            "scaleTargetRef": {"name": DEPLOYMENT},
            "triggers": [
                {
                    "type": "cron",
                    "metadata": {"timezone": "UTC", "start": "0 1 * * *", "end": "0 2 * * *", "desiredReplicas": "3"},
                }
            ],
        },
    }
    resource = DynamicClient(api).resources.get(api_version="keda.sh/v1alpha1", kind="ScaledObject")
    with pytest.raises(ApiException) as refused:
        resource.create(body=second, namespace=namespace)
    assert refused.value.status == 403, refused.value.body
    message = json.loads(refused.value.body)["message"]
    assert message.startswith('admission webhook "vscaledobject.kb.io" denied the request: ')
    assert f"'{DEPLOYMENT}'" in message and "already managed" in message  # KEDA names the workload and what has it


# ------------------------------------------------------------------ the request-rate trigger


def test_the_request_rate_trigger_scales_up_and_down_on_a_scraped_series(api, keda_cluster, env, series, tmp_path):
    """0 req/s: the KEDA component's 2 replicas; 240 req/s at 50 per replica: 5; back to 0: 2 again."""
    from localcluster.keda_proof import record
    from tests.localcluster.keda_series import query

    exporter, url = series
    namespace = _namespace(api, keda_cluster, "keda-rps")
    exporter.set_rate(namespace, MODEL, PREDICTOR, 0.0)
    scaled = _deploy_scaled(api, env, namespace, tmp_path, url)
    trigger = scaled.spec.triggers[0]
    threshold = float(trigger.metadata.threshold)
    assert trigger.type == "prometheus" and trigger.metadata.serverAddress == url and threshold == 50

    high = 240.0
    watched = {"namespace": namespace, "deployment": DEPLOYMENT, "scaled_object": scaled.metadata.name}
    # the load held until the minute's rate holds only loaded samples: the HPA stays at 5, not past it
    samples, rate = _rate_up_and_down(
        api, exporter, watched, high, hold_s=75, while_held=lambda: query(url, trigger.metadata.query)
    )

    path = record(
        "request_rate",
        {
            "description": f"prometheus trigger, {threshold:g} req/s per replica, 0 -> {high:g} -> 0 req/s",
            "namespace": namespace,
            "query": trigger.metadata.query,
            "threshold_rps_per_replica": threshold,
            "driven_rps": [0, high, 0],
            "prometheus_rate_after_a_loaded_minute": rate,
            "behavior": TEST_BEHAVIOR,
        },
        samples,
        Path(env["SLIPWAY_REPORTS_DIR"]),
    )
    report = json.loads(path.read_text())["scenarios"]["request_rate"]
    assert rate is not None and abs(rate - high) < 0.05 * high  # the scraped series' rate, as the trigger reads it
    up = [s for s in samples if s.phase == f"{high:g} req/s"]
    down = [s for s in samples if s.phase == "0 req/s again"]
    assert samples[0].replicas == 2 and up[-1].replicas == 5 and down[-1].replicas == 2
    assert max(s.replicas for s in samples) == 5  # ceil(240 / 50): never past what the rate asks for
    assert all(change["phase"] != "0 req/s" for change in report["scaled"])  # nothing moved before the load came
    ups = [i for i, change in enumerate(report["scaled"]) if change["to"] > change["from"]]
    downs = [i for i, change in enumerate(report["scaled"]) if change["to"] < change["from"]]
    assert ups and downs and max(ups) < min(downs)  # up while loaded, then down: no flapping
    # what the HPA read once at 5 replicas (the first sample there still holds the reading taken at 4): the
    # per-replica average of the rate, 240 / 5
    at_top = [v for s in up if s.replicas == 5 for v in s.metrics.values() if v is not None][1:]
    assert at_top and abs(at_top[-1] * 5 - high) < 0.05 * high, at_top
    assert Path(path).with_suffix(".png").stat().st_size > 10_000


# ------------------------------------------------------------------ cron pre-scaling from `recommend`


def _daily_peak_history(folder: Path, peak_at: float, *, base: float, peak: float) -> list[str]:
    """Seven days of 5-minute samples for two pods, `base` req/s in all but the 5-minute slot of the day `peak_at`
    starts, where it is `peak`: recommend's --cpu, --memory and --rps arguments."""
    start = (math.floor(time.time() / DAY_S) - 8) * DAY_S
    stamps = start + np.arange(0, 7 * DAY_S, 300.0)
    rps = np.where(stamps % DAY_S == peak_at % DAY_S, peak, base)
    pods = ("digits-a", "digits-b")
    bodies = {
        "cpu": {pod: (stamps, np.full(stamps.shape, 0.3)) for pod in pods},
        "memory": {pod: (stamps, np.full(stamps.shape, 200.0 * MIB)) for pod in pods},
        "rps": {pod: (stamps, rps / len(pods)) for pod in pods},
    }
    return [arg for kind, body in bodies.items() for arg in (f"--{kind}", str(write(folder, kind, matrix(body))))]


def test_the_cron_pre_scaling_overlay_raises_the_floor_for_its_window_and_lowers_it_after(
    api, keda_cluster, env, series, tmp_path
):
    """`recommend` on a history whose daily peak falls in the 5-minute slot a few minutes from now writes a KEDA
    overlay with a cron window from a minute ahead of it (its lead) to its end; deployed, the Deployment sits at the
    plan's minimum, rises to the window's replicas when the window opens and comes back down when it closes."""
    from localcluster.keda_proof import record, watch

    exporter, url = series
    now = time.time()
    opens = math.ceil((now + 150) / 60) * 60  # room for recommend and deploy before the window opens
    peak_at = math.ceil(opens / 300) * 300  # the 5-minute slot the history peaks in
    lead_min = int(peak_at - opens) // 60
    closes = peak_at + 300
    result = run_module(
        "deployments",
        "recommend",
        "--model",
        MODEL,  # named: recommend runs before the model is deployed
        *_daily_peak_history(tmp_path, peak_at, base=20.0, peak=100.0),
        "--capacity-rps",
        "50",
        "--prescale-slot",
        "5m",
        "--prescale-lead",
        f"{lead_min}m",
        "--out-dir",
        str(tmp_path / "recommend"),
        env=env,
    )
    prescale = json.loads((Path(env["SLIPWAY_REPORTS_DIR"]) / "recommend.json").read_text())["prescale"]
    assert [(w["start"], w["end"], w["replicas"]) for w in prescale["windows"]] == [(_clock(opens), _clock(closes), 4)], (
        result.stderr
    )
    floor, top = 1, 4  # ceil(20 / 35) and ceil(100 x 1.15 / 35) at 50 req/s x 70%

    namespace = _namespace(api, keda_cluster, "keda-cron")
    exporter.set_rate(namespace, MODEL, PREDICTOR, 0.0)  # the request-rate trigger beside the cron one reads 0
    overlay = _overlay(tmp_path / "sre", tmp_path / "recommend" / "prescale", components=[], ops=_local_prometheus(url))
    _deploy(env, namespace, overlay, _artifact(tmp_path))
    scaled = _scaled_object(api, namespace)
    assert [t.type for t in scaled.spec.triggers] == ["prometheus", "cron"]
    assert scaled.spec.triggers[1].metadata.start == f"{time.gmtime(opens).tm_min} {time.gmtime(opens).tm_hour} * * *"
    assert time.time() < opens - 10, f"recommend and deploy took until {time.time() - now:.0f}s after the plan's start"

    def phase() -> str:
        moment = time.time()
        return "before the window" if moment < opens else "in the window" if moment < closes else "after the window"

    samples: list = []
    began = time.monotonic()
    watched = {"namespace": namespace, "deployment": DEPLOYMENT, "scaled_object": scaled.metadata.name}
    slack = opens - now + 60
    watch(api, **watched, until=lambda s: s[-1].replicas == top, phase=phase, timeout_s=slack + 60, samples=samples, began=began)
    watch(
        api,
        **watched,
        until=lambda s: s[-1].phase == "after the window" and s[-1].replicas == floor,
        phase=phase,
        timeout_s=closes - time.time() + 180,
        samples=samples,
        began=began,
    )
    path = record(
        "cron",
        {
            "description": f"cron window {_clock(opens)}-{_clock(closes)} UTC at {top} replicas (recommend's plan)",
            "namespace": namespace,
            "window": {"opens": _clock(opens), "closes": _clock(closes), "replicas": top, "lead_minutes": lead_min},
            "triggers": scaled.to_dict()["spec"]["triggers"],
            "behavior": TEST_BEHAVIOR,
        },
        samples,
        Path(env["SLIPWAY_REPORTS_DIR"]),
    )
    scaled_at = json.loads(path.read_text())["scenarios"]["cron"]["scaled"]
    before = [s for s in samples if s.phase == "before the window"]
    inside = [s for s in samples if s.phase == "in the window"]
    assert before and all(s.replicas == floor for s in before)  # the floor until the window opens
    assert inside and max(s.replicas for s in inside) == top
    first_up = next(s for s in samples if s.replicas > floor)
    assert opens - 1 <= first_up.at <= opens + 60  # KEDA polls each 5 s and the HPA syncs each 2 s
    # held through the window, down only after it closed (the behaviour's 20 s window, then 100% at once)
    reached = next(s.at for s in samples if s.replicas == top)
    assert all(s.replicas == top for s in inside if s.at >= reached)
    down = [c for c in scaled_at if c["to"] < c["from"]]
    assert down and all(c["phase"] == "after the window" for c in down) and down[-1]["to"] == floor


# ------------------------------------------------------------------ the GPU utilization trigger


def test_the_gpu_utilization_trigger_scales_on_dcgm_s_gauge(api, keda_cluster, env, series, tmp_path):
    """The gpu overlay with gpu-util: its query averages DCGM_FI_DEV_GPU_UTIL over the model container's cards (two
    here) against 70%. metricType Value: the HPA asks for ceil(Ready pods x average / 70), and kwok's GPU node has
    two cards, so two pods are Ready at most. Cards at 15%: 1 replica; at 92%: ceil(2 x 92 / 70) = 3, the third
    Pending, and no further below the component's maximum of 4; at 6%: back to 1."""
    from localcluster.keda_proof import record, watch

    exporter, url = series
    namespace = _namespace(api, keda_cluster, "keda-gpu")
    levels = {"idle": (12.0, 18.0), "busy": (88.0, 96.0), "quiet": (5.0, 7.0)}

    def set_cards(level: str) -> None:
        for card, percent in enumerate(levels[level]):
            exporter.set_gpu_util(namespace, MODEL, card, percent)
        phase["now"] = f"cards at {sum(levels[level]) / 2:g}%"

    phase: dict[str, str] = {}
    set_cards("idle")
    scaled = _deploy_scaled(api, env, namespace, tmp_path, url, base="gpu", component="gpu-util")
    trigger = scaled.spec.triggers[0]
    assert trigger.metricType == "Value" and float(trigger.metadata.threshold) == 70
    assert (scaled.spec.minReplicaCount, scaled.spec.maxReplicaCount) == (1, 4)

    samples: list = []
    began = time.monotonic()
    watched = {"namespace": namespace, "deployment": DEPLOYMENT, "scaled_object": scaled.metadata.name}

    def reads(samples) -> bool:  # the HPA has read the cards (0 before Prometheus scraped them: `or vector(0)`)
        return samples[-1].replicas == 1 and any(value for value in samples[-1].metrics.values())

    watch(api, **watched, until=reads, phase=lambda: phase["now"], timeout_s=120, samples=samples, began=began)
    idle_reading = next(v for v in samples[-1].metrics.values() if v)
    set_cards("busy")
    busy_since = time.monotonic()
    watch(
        api,
        **watched,
        until=lambda s: s[-1].replicas == 3,
        phase=lambda: phase["now"],
        timeout_s=240,
        samples=samples,
        began=began,
    )
    # held there once the minute's average holds only busy samples: the Pending pod counts for nothing, so nothing
    # asks for a 4th
    held_until = busy_since + 80
    watch(
        api,
        **watched,
        until=lambda s: time.monotonic() > held_until,
        phase=lambda: phase["now"],
        timeout_s=120,
        samples=samples,
        began=began,
    )
    set_cards("quiet")
    watch(
        api,
        **watched,
        until=lambda s: s[-1].replicas == 1,
        phase=lambda: phase["now"],
        timeout_s=240,
        samples=samples,
        began=began,
    )

    path = record(
        "gpu_utilization",
        {
            "description": "gpu-util trigger (DCGM_FI_DEV_GPU_UTIL, Value, 70%), cards 15% -> 92% -> 6%, 2 GPUs",
            "namespace": namespace,
            "query": trigger.metadata.query,
            "threshold_percent": 70,
            "cards_percent": levels,
            "series": "set by the test through a DCGM-labelled gauge (no GPU recording in this repository)",
            "behavior": TEST_BEHAVIOR,
        },
        samples,
        Path(env["SLIPWAY_REPORTS_DIR"]),
    )
    report = json.loads(path.read_text())["scenarios"]["gpu_utilization"]
    assert abs(idle_reading - 15) < 1  # the average of this container's two cards, as the HPA read it
    busy = [s for s in samples if s.phase == "cards at 92%"]
    assert max(s.replicas for s in samples) == 3 and busy[-1].replicas == 3 and busy[-1].ready == 2
    assert samples[-1].replicas == 1
    busy_readings = [v for s in busy for v in s.metrics.values() if v is not None]
    assert abs(max(busy_readings) - 92) < 1  # the cards' average once the minute's window holds only busy samples
    assert all(change["phase"] == "cards at 92%" for change in report["scaled"] if change["to"] > change["from"])
    assert all(change["phase"] == "cards at 6%" for change in report["scaled"] if change["to"] < change["from"])


# ------------------------------------------------------------------ KServe's predictor, scaled by KEDA


def test_the_request_rate_trigger_scales_kserve_s_predictor_up_and_down(api, keda_cluster, env, series, tmp_path):
    """`deploy --engine kserve --autoscaling keda`: the ScaledObject Slipway renders on the predictor Deployment KServe
    makes (KServe told, by `autoscalerClass: external`, to make no autoscaler of its own); 0 req/s: 2 replicas, 240
    req/s at 50 per replica: 5, back to 0: 2. The figures go to reports/kserve-cluster.json (`keda`)."""
    from kubernetes import client
    from kubernetes.dynamic import DynamicClient

    from deployments.kserve import api as kserve
    from localcluster.build import cached
    from localcluster.components import KSERVE
    from localcluster.keda_proof import HPA_PREFIX, changes
    from slipway import atomic
    from slipway.paths import REPORTS_DIR

    if not cached(KSERVE):
        pytest.skip(f"KServe {KSERVE.version} is not built: it is opt-in, `make cluster-build KSERVE=1` builds it")
    exporter, url = series
    namespace = _namespace(api, keda_cluster, "kserve-keda")
    exporter.set_rate(namespace, MODEL, PREDICTOR, 0.0)
    began = time.monotonic()
    scaled = _deploy_scaled(api, env, namespace, tmp_path, url, "--engine", "kserve")
    deploy_s = time.monotonic() - began
    deployment = kserve.predictor_name(MODEL)
    assert scaled.metadata.name == kserve.scaled_object_name(MODEL) and scaled.spec.scaleTargetRef.name == deployment
    owner = client.AppsV1Api(api).read_namespaced_deployment(deployment, namespace).metadata.owner_references[0]
    assert owner.kind == kserve.ISVC_KIND  # KServe's own Deployment, which KEDA's HPA scales

    high = 240.0
    watched = {"namespace": namespace, "deployment": deployment, "scaled_object": scaled.metadata.name}
    samples, _ = _rate_up_and_down(api, exporter, watched, high)

    # the only autoscaler on the predictor is KEDA's: KServe made no HPA of its own beside it
    autoscalers = client.AutoscalingV2Api(api).list_namespaced_horizontal_pod_autoscaler(namespace).items
    assert [hpa.metadata.name for hpa in autoscalers] == [HPA_PREFIX + scaled.metadata.name]
    scaled_changes = changes(samples)
    ups = [i for i, change in enumerate(scaled_changes) if change["to"] > change["from"]]
    downs = [i for i, change in enumerate(scaled_changes) if change["to"] < change["from"]]
    assert ups and downs and max(ups) < min(downs)  # up while loaded, then down: no flapping
    assert all(change["phase"] != "0 req/s" for change in scaled_changes)  # nothing moved before the load came
    assert max(s.replicas for s in samples) == 5  # ceil(240 / 50): never past what the rate asks for

    def first(phase_name: str, replicas: int) -> float:
        return next(s.seconds for s in samples if s.phase == phase_name and s.replicas == replicas)

    loaded = next(s.seconds for s in samples if s.phase == f"{high:g} req/s")
    unloaded = next(s.seconds for s in samples if s.phase == "0 req/s again")
    path = REPORTS_DIR / "kserve-cluster.json"
    report = json.loads(path.read_text())
    report["keda"] = {
        "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "description": "prometheus trigger, 50 req/s per replica, 0 -> 240 -> 0 req/s (a scraped series)",
        "scaled_object": scaled.metadata.name,
        "deploy_to_ready_s": round(deploy_s, 1),
        "up_to_5_s": round(first(f"{high:g} req/s", 5) - loaded, 1),
        "down_to_2_s": round(first("0 req/s again", 2) - unloaded, 1),
        "behavior": TEST_BEHAVIOR,
        "scaled": [{key: change[key] for key in ("seconds", "from", "to", "phase")} for change in scaled_changes],
    }
    atomic.write_json(path, report)

    # undeploy finds the ScaledObject by Slipway's labels; KEDA's HPA goes with it
    done = run_module("deployments", "undeploy", "--name", MODEL, "--namespace", namespace, env=env)
    assert "gone after" in done.stderr, done.stderr
    resource = DynamicClient(api).resources.get(api_version=kserve.KEDA_API_VERSION, kind=kserve.SCALED_OBJECT_KIND)
    assert resource.get(namespace=namespace).items == []
    assert client.AutoscalingV2Api(api).list_namespaced_horizontal_pod_autoscaler(namespace).items == []
