"""The builtin renderer against real kustomize (`kubectl kustomize`, installed with the deploy extra)."""

from __future__ import annotations

import textwrap

import pytest
import yaml

from deployments.render import autoscaling, kustomize
from deployments.render.overlay import OVERLAYS, OVERLAYS_DIR

KUBECTL = kustomize.kubectl_binary()
needs_kubectl = pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed (make setup installs it)")


@needs_kubectl
@pytest.mark.parametrize("mode", autoscaling.MODES)
@pytest.mark.parametrize("overlay", OVERLAYS)
def test_builtin_renderer_matches_kubectl_kustomize_on_every_overlay(overlay, mode):
    component = autoscaling.component_dir(mode)
    extra = [component] if component else []
    real, engine = kustomize.build(OVERLAYS_DIR / overlay, extra_components=extra, engine="kubectl")
    ours, _ = kustomize.build(OVERLAYS_DIR / overlay, extra_components=extra, engine="builtin")
    assert engine == "kubectl"
    assert ours == real  # same resources, same content, same order


def _write(root, files: dict[str, str]):
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))


FEATURES = {
    "base/kustomization.yaml": """
        resources: [things.yaml]
        labels:
          - pairs: {team: ml}
        images:
          - name: example/server
            newName: registry.local:5000/server
            digest: sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef
    """,
    "base/things.yaml": """
        apiVersion: example.com/v1
        kind: Widget
        metadata: {name: w}
        spec:
          items: [1, 2, 3]
          keep: {a: 1, b: 2}
          nested:
            - spec:
                initContainers: [{name: init, image: example/server:1}]
                containers: [{name: c, image: example/server:1}]
        ---
        apiVersion: apps/v1
        kind: Deployment
        metadata: {name: d}
        spec:
          selector: {matchLabels: {app: d}}
          template:
            metadata: {labels: {app: d}}
            spec:
              containers: [{name: c, image: example/server}]
        ---
        apiVersion: v1
        kind: ConfigMap
        metadata: {name: cm}
        data: {k: v}
        ---
        apiVersion: admissionregistration.k8s.io/v1
        kind: ValidatingWebhookConfiguration
        metadata: {name: hook}
        ---
        apiVersion: v1
        kind: Service
        metadata: {name: svc}
        spec: {ports: [{port: 80}]}
    """,
    "comp/kustomization.yaml": """
        apiVersion: kustomize.config.k8s.io/v1alpha1
        kind: Component
        resources: [extra.yaml]
        patches:
          - target: {kind: Widget}
            patch: |-
              - op: add
                path: /spec/fromComponent
                value: true
    """,
    "comp/extra.yaml": """
        apiVersion: v1
        kind: ServiceAccount
        metadata: {name: sa}
    """,
    "overlay/kustomization.yaml": """
        resources: [../base]
        components: [../comp]
        namespace: prod
        patches:
          - path: widget.yaml
          - target: {group: example.com, version: v1, kind: Widget, name: w}
            patch: |-
              - op: copy
                from: /spec/keep
                path: /spec/copied
              - op: test
                path: /spec/keep/a
                value: 1
              - op: remove
                path: /spec/keep/b
              - op: replace
                path: /spec/nested/0/spec/containers/0/name
                value: renamed
    """,
    "overlay/widget.yaml": """
        apiVersion: example.com/v1
        kind: Widget
        metadata: {name: w}
        spec:
          items: [9]
          keep: {c: 3}
          dropme: null
    """,
}


@needs_kubectl
def test_builtin_renderer_matches_kubectl_on_every_supported_feature(tmp_path):
    _write(tmp_path, FEATURES)
    real = kustomize.build_with_kubectl(tmp_path / "overlay")
    ours = kustomize.build_builtin(tmp_path / "overlay")
    assert ours == real
    widget = next(doc for doc in ours if doc["kind"] == "Widget")
    assert widget["spec"]["items"] == [9]  # custom resources: strategic merge replaces lists
    assert widget["spec"]["keep"] == {"a": 1, "c": 3} and widget["spec"]["copied"] == {"a": 1, "b": 2, "c": 3}
    assert widget["spec"]["fromComponent"] is True
    assert widget["spec"]["nested"][0]["spec"]["initContainers"][0]["image"].startswith("registry.local:5000/server@sha256:")
    assert [doc["kind"] for doc in ours] == [
        "ServiceAccount",
        "ConfigMap",
        "Service",
        "Deployment",
        "Widget",
        "ValidatingWebhookConfiguration",
    ]
    assert {doc["metadata"].get("namespace") for doc in ours} == {"prod", None}  # webhooks are cluster-scoped
    assert "namespace" not in ours[-1]["metadata"]


@pytest.mark.parametrize(
    "kustomization, message",
    [
        ("resources: [missing.yaml]", "resource 'missing.yaml' does not exist"),
        ("configMapGenerator: [{name: x}]", "fields ['configMapGenerator'] are not supported"),
        ("resources: [r.yaml]\npatches: [{target: {kind: Nothing}, patch: '[]'}]", "matches no resource"),
        ("resources: [r.yaml]\npatches: [{patch: '[{op: add, path: /x, value: 1}]'}]", "needs a `target`"),
        (
            "resources: [r.yaml]\npatches: [{target: {kind: Widget}, patch: '[{op: test, path: /spec/a, value: 2}]'}]",
            "patch on Widget/w failed",
        ),
        ("resources: [d.yaml]\npatches: [{path: p.yaml}]", "use a JSON 6902 patch or kubectl"),
        ("resources: [r.yaml]\nlabels: [{pairs: {a: b}, includeSelectors: true}]", "labels options ['includeSelectors']"),
    ],
)
def test_builtin_renderer_refuses_what_it_does_not_do(tmp_path, kustomization, message):
    _write(
        tmp_path,
        {
            "kustomization.yaml": kustomization,
            "r.yaml": "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w}\nspec: {a: 1}\n",
            "d.yaml": "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d}\n",
            "p.yaml": "kind: Deployment\nmetadata: {name: d}\nspec: {x: [1]}\n",
        },
    )
    with pytest.raises(kustomize.KustomizeError, match=message.replace("[", r"\[").replace("]", r"\]").replace("`", "`")):
        kustomize.build_builtin(tmp_path)


def test_a_component_listed_as_a_resource_is_refused(tmp_path):
    _write(tmp_path, {"kustomization.yaml": "resources: [comp]", "comp/kustomization.yaml": "kind: Component\n"})
    with pytest.raises(kustomize.KustomizeError, match="a Component is listed as a resource"):
        kustomize.build_builtin(tmp_path)


def test_split_image_keeps_registry_ports():
    assert kustomize.split_image("registry.local:5000/a/b:1.0") == ("registry.local:5000/a/b", "1.0", None)
    assert kustomize.split_image("a/b@sha256:00") == ("a/b", None, "sha256:00")
    assert kustomize.split_image("a/b") == ("a/b", None, None)


def test_build_without_a_kustomization_says_so(tmp_path):
    with pytest.raises(kustomize.KustomizeError, match="has no kustomization.yaml"):
        kustomize.build(tmp_path)
    assert yaml  # the module parses what kubectl prints with PyYAML


@pytest.mark.parametrize(
    "files, message",
    [
        (
            {"kustomization.yaml": "resources: [\n"},
            "kustomization.yaml is not valid YAML: expected the node content, but found '<stream end>' at line 2, column 1",
        ),
        (
            {"kustomization.yaml": b"\xff\xfe"},
            "kustomization.yaml is not UTF-8 text (byte 0xff at line 1, column 1: invalid start byte)",
        ),
        ({"kustomization.yaml": "- resources\n"}, "a kustomization is one YAML mapping"),
        (
            {"kustomization.yaml": "resources: [r.yaml]\n", "r.yaml": "kind: Widget\n  name: w\n"},
            "r.yaml is not valid YAML: mapping values are not allowed here at line 2, column 7",
        ),
        (
            {
                "kustomization.yaml": "resources: [r.yaml]\npatches: [{path: p.yaml}]\n",
                "r.yaml": "kind: Widget\n",
                "p.yaml": b"kind: \xc3(\n",
            },
            "p.yaml is not UTF-8 text (byte 0xc3 at line 1, column 7: invalid continuation byte)",
        ),
        (
            {"kustomization.yaml": "resources: [r.yaml]\npatches: [{path: gone.yaml}]\n", "r.yaml": "kind: Widget\n"},
            "patch file 'gone.yaml' does not exist",
        ),
        (
            {
                "kustomization.yaml": "resources: [r.yaml]\npatches: [{patch: 'a: [', target: {kind: Widget}}]\n",
                "r.yaml": "kind: Widget\n",
            },
            "the inline patch is not valid YAML",
        ),
    ],
)
def test_a_user_overlay_that_is_not_yaml_is_one_line_saying_where(tmp_path, files, message):
    for name, content in files.items():
        (tmp_path / name).write_bytes(content if isinstance(content, bytes) else content.encode())
    with pytest.raises(kustomize.KustomizeError) as caught:
        kustomize.build(tmp_path, engine="builtin")
    assert message in str(caught.value) and "\n" not in str(caught.value)
