"""A model pod's stop fits its grace period (issue 47): the preStop sleep, the server's drain and a margin to exit
within `terminationGracePeriodSeconds`, in every overlay's Seldon and KServe renderings and in an SRE's overlay that
changes one of them; validation refuses one that does not fit, naming what to set."""

from __future__ import annotations

import pytest
import yaml

from deployments.kserve import api
from deployments.kserve.render import render_kserve
from deployments.kserve.validate import merged_pod, validate_kserve
from deployments.render import seldon
from deployments.render.overlay import OVERLAYS_DIR
from deployments.render.stopping import EXIT_MARGIN_S, prestop_sleep_s, stop_errors
from deployments.render.validate import validate_documents
from slipway.drain import DRAIN_ENV
from tests.deployments.rendering import rendering

render = rendering()
render_on_kserve = rendering(render_kserve)


def _drain(container: dict) -> float:
    return float(next(item["value"] for item in container["env"] if item["name"] == DRAIN_ENV))


def _seldon_pods(rendered) -> list[tuple[dict, dict]]:
    """(pod spec, model container) of every predictor's pods."""
    pods = []
    for predictor, _, component in seldon.pod_specs(rendered.seldon_deployment):
        spec = component["spec"]
        pods.append((spec, next(c for c in spec["containers"] if c["name"] == predictor["graph"]["name"])))
    return pods


def _kserve_pod(rendered) -> tuple[dict, dict]:
    isvc = next(doc for doc in rendered.docs if doc["kind"] == api.ISVC_KIND)
    runtime = next(doc for doc in rendered.docs if doc["kind"] == api.RUNTIME_KIND)
    pod = merged_pod(isvc, runtime)
    return pod, next(c for c in pod["containers"] if c["name"] == api.CONTAINER_NAME)


@pytest.mark.parametrize("overlay", ["cpu", "gpu", "canary"])
def test_every_rendered_pod_holds_its_prestop_sleep_drain_and_exit_margin(overlay, main_version, canary_version):
    rendered = render(overlay, model=main_version, canary=canary_version if overlay == "canary" else None)
    for pod, container in _seldon_pods(rendered):
        sleep = prestop_sleep_s(container)
        assert container["lifecycle"]["preStop"] == {"exec": {"command": ["sleep", "5"]}}  # Seldon 1.17 keeps exec
        assert sleep == 5 and _drain(container) == 20
        assert pod["terminationGracePeriodSeconds"] >= sleep + _drain(container) + EXIT_MARGIN_S
    assert not [error for error in validate_documents(rendered.docs).errors if "terminationGracePeriod" in error]


@pytest.mark.parametrize("overlay", ["cpu", "gpu"])
def test_the_kserve_rendering_sleeps_with_kubernetes_own_action_within_the_same_grace(overlay, main_version):
    pod, container = _kserve_pod(render_on_kserve(overlay, model=main_version))
    assert container["lifecycle"]["preStop"] == {"sleep": {"seconds": 5}}  # no sleep binary needed in the image
    assert pod["terminationGracePeriodSeconds"] >= prestop_sleep_s(container) + _drain(container) + EXIT_MARGIN_S
    assert stop_errors("pod", pod, api.CONTAINER_NAME) == []


def _overlay(tmp_path, operations: list[dict]):
    """An SRE's overlay over cpu, patching the SeldonDeployment with `operations` (JSON patch)."""
    folder = tmp_path / "mine"
    folder.mkdir(parents=True)
    (folder / "kustomization.yaml").write_text(
        f"resources: [{OVERLAYS_DIR / 'cpu'}]\npatches:\n  - path: stop.yaml\n    target: {{kind: SeldonDeployment}}\n"
    )
    (folder / "stop.yaml").write_text(yaml.safe_dump(operations))
    return folder


POD = "/spec/predictors/0/componentSpecs/0/spec"
DRAIN = f"{POD}/containers/0/env/6/value"  # the base's SLIPWAY_DRAIN_SECONDS (checked below)


def test_an_overlay_whose_grace_is_shorter_than_the_stop_is_refused_naming_what_to_set(tmp_path, main_version):
    folder = _overlay(tmp_path, [{"op": "replace", "path": f"{POD}/terminationGracePeriodSeconds", "value": 20}])
    expected = (
        "terminationGracePeriodSeconds 20 is shorter than container 'digits''s stop: preStop sleep 5 s + "
        "SLIPWAY_DRAIN_SECONDS 20 + 5 s to exit = 30 s, so the kubelet would kill the server mid-drain: set "
        "terminationGracePeriodSeconds to 30 or more"
    )
    errors = validate_documents(render(folder, model=main_version).docs).errors
    assert any(expected in error for error in errors), errors
    kserve_errors = validate_kserve(render_on_kserve(folder, model=main_version).docs, schemas={}).errors
    assert any("terminationGracePeriodSeconds 20 is shorter than" in error for error in kserve_errors), kserve_errors


def test_an_overlay_with_a_longer_drain_and_a_grace_that_holds_it_renders(tmp_path, main_version):
    folder = _overlay(
        tmp_path,
        [
            {"op": "test", "path": DRAIN.replace("/value", "/name"), "value": DRAIN_ENV},
            {"op": "replace", "path": DRAIN, "value": "50"},
            {"op": "replace", "path": f"{POD}/terminationGracePeriodSeconds", "value": 60},
        ],
    )
    rendered = render(folder, model=main_version)
    ((pod, container),) = _seldon_pods(rendered)
    assert (pod["terminationGracePeriodSeconds"], _drain(container), prestop_sleep_s(container)) == (60, 50, 5)
    assert not [error for error in validate_documents(rendered.docs).errors if "terminationGracePeriod" in error]
    too_long = _overlay(tmp_path / "longer", [{"op": "replace", "path": DRAIN, "value": "50"}])  # grace left at 30
    errors = validate_documents(render(too_long, model=main_version).docs).errors
    assert any("= 60 s, so the kubelet would kill the server mid-drain" in error for error in errors), errors


@pytest.mark.parametrize(
    ("hook", "seconds"),
    [
        (None, 0.0),
        ({"exec": {"command": ["sleep", "7"]}}, 7.0),
        ({"exec": {"command": ["/bin/sleep", "2.5"]}}, 2.5),
        ({"sleep": {"seconds": 9}}, 9.0),
        ({"exec": {"command": ["sh", "-c", "sleep 5"]}}, None),
        ({"httpGet": {"path": "/drain", "port": 9000}}, None),
    ],
)
def test_a_prestop_hook_counts_only_as_the_sleep_it_is(hook, seconds):
    container = {"name": "digits", "lifecycle": {"preStop": hook}} if hook else {"name": "digits"}
    assert prestop_sleep_s(container) == seconds


def test_a_hook_of_unknown_length_or_a_drain_that_is_not_seconds_is_refused_in_one_line():
    pod = {
        "terminationGracePeriodSeconds": 300,
        "containers": [
            {"name": "digits", "lifecycle": {"preStop": {"httpGet": {"path": "/drain", "port": 9000}}}},
            {"name": "other", "env": [{"name": DRAIN_ENV, "value": "soon"}]},
        ],
    }
    first, second = stop_errors("pod", pod, "digits")
    assert "container 'digits' has a preStop hook that is not a sleep" in first
    assert "container 'other': SLIPWAY_DRAIN_SECONDS='soon' is not a number of seconds over 0" in second
