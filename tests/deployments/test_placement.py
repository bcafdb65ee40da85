"""`--node-selector` and `--toleration` (deployments/render/placement.py): every pod of any overlay placed, added to
what the overlay places, refused in one line where Kubernetes would refuse it."""

from __future__ import annotations

import pytest

from deployments.render import seldon
from deployments.render.overlay import RenderError
from deployments.render.validate import validate_documents
from tests.deployments.rendering import rendering

render = rendering()
REAL_NODE = ["slipway.dev/node=real"]
REAL_NODE_TAINT = ["slipway.dev/node=real:NoSchedule"]


def _specs(rendered) -> list[dict]:
    return [component["spec"] for _, _, component in seldon.pod_specs(rendered.seldon_deployment)]


def test_every_pod_of_the_cpu_and_canary_overlays_goes_where_it_is_sent(main_version, canary_version):
    for rendered in (
        render("cpu", model=main_version, node_selector=REAL_NODE, tolerations=REAL_NODE_TAINT),
        render("canary", model=main_version, canary=canary_version, node_selector=REAL_NODE, tolerations=REAL_NODE_TAINT),
    ):
        specs = _specs(rendered)
        assert specs and all(spec["nodeSelector"] == {"slipway.dev/node": "real"} for spec in specs)
        assert all(
            spec["tolerations"] == [{"key": "slipway.dev/node", "operator": "Equal", "value": "real", "effect": "NoSchedule"}]
            for spec in specs
        )
        assert validate_documents(rendered.docs).ok
    # without the options the overlay places nothing
    assert not any("nodeSelector" in spec or "tolerations" in spec for spec in _specs(render("cpu", model=main_version)))


def test_the_gpu_overlays_placement_is_kept_beside_the_options(main_version):
    plain = _specs(render("gpu", model=main_version))[0]
    placed = _specs(render("gpu", model=main_version, node_selector=["pool=inference"], tolerations=["spot:NoSchedule"]))[0]
    assert placed["nodeSelector"] == {**plain["nodeSelector"], "pool": "inference"}
    assert placed["tolerations"] == [*plain["tolerations"], {"key": "spot", "operator": "Exists", "effect": "NoSchedule"}]


@pytest.mark.parametrize(
    "selector, tolerations, message",
    [
        (["slipway.dev/node"], [], "--node-selector 'slipway.dev/node' is not KEY=VALUE"),
        (["a=1", "a=2"], [], "--node-selector names 'a' twice"),
        ([], ["slipway.dev/node=real:NoSchedul"], "--toleration 'slipway.dev/node=real:NoSchedul': effect 'NoSchedul'"),
    ],
)
def test_placement_kubernetes_would_refuse_is_refused_in_one_line(main_version, selector, tolerations, message):
    with pytest.raises(RenderError) as caught:
        render("cpu", model=main_version, node_selector=selector, tolerations=tolerations)
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_render_takes_the_options_from_its_command_line(tmp_path, record_files):
    from tests.conftest import run_module

    out = tmp_path / "manifests"
    result = run_module(
        "deployments",
        "render",
        "--version-record",
        str(record_files("3")),
        "--out",
        str(out),
        "--node-selector",
        "slipway.dev/node=real",
        "--toleration",
        "slipway.dev/node=real:NoSchedule",
    )
    assert result.returncode == 0
    text = "\n".join(path.read_text() for path in out.rglob("*.yaml"))
    assert "slipway.dev/node: real" in text and "effect: NoSchedule" in text
    refused = run_module("deployments", "render", "--version-record", str(record_files("3")), "--node-selector", "x", check=False)
    assert refused.returncode == 2 and refused.stderr.strip().splitlines() == [
        "error: --node-selector 'x' is not KEY=VALUE (e.g. cloud.google.com/gke-accelerator=nvidia-l4)"
    ]
