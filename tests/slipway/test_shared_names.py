"""The defaults several packages share are written once, in the core, and every command's `--help` still says them."""

from __future__ import annotations

import ast

import pytest
import yaml

from slipway.cluster_names import DEFAULT_NAMESPACE, NAMESPACE_ENV, STORAGE_BUCKET
from slipway.paths import DEMO_MODEL_NAME, MODEL_STORE_DIR, PROJECT_ROOT
from tests.conftest import run_module

PACKAGES = ("slipway", "engine", "wrappers", "export", "loadtest", "deployments", "benchmarks", "localcluster")
# Each shared value, the one module that spells it, and whether any other spelling counts or only a default's
# ("slipway" is also the project's name, in labels and a field manager; "digits" also one of the demo's models).
SHARED = {
    DEFAULT_NAMESPACE: ("slipway/cluster_names.py", "defaults"),
    NAMESPACE_ENV: ("slipway/cluster_names.py", "anywhere"),
    STORAGE_BUCKET: ("slipway/cluster_names.py", "anywhere"),
    DEMO_MODEL_NAME: ("slipway/paths.py", "defaults"),
    str(MODEL_STORE_DIR.name): ("slipway/paths.py", "anywhere"),
}


def _defaults(tree: ast.AST):
    """The string constants given as defaults: `default=` keywords and parameters' default values."""
    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg == "default":
            yield node.value
        elif isinstance(node, ast.arguments):
            yield from (*node.defaults, *(value for value in node.kw_defaults if value is not None))


def test_each_shared_default_is_spelled_in_one_module():
    found = []
    for package in PACKAGES:
        for path in sorted((PROJECT_ROOT / package).rglob("*.py")):
            if "third_party" in path.parts:
                continue
            where = path.relative_to(PROJECT_ROOT).as_posix()
            tree = ast.parse(path.read_text(), filename=where)
            defaults = {id(node) for node in _defaults(tree)}
            for node in ast.walk(tree):
                if not (isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in SHARED):
                    continue
                home, scope = SHARED[node.value]
                if where != home and (scope == "anywhere" or id(node) in defaults):
                    found.append(f"{where}:{node.lineno}: {node.value!r} (import it from {home})")
    assert not found, "\n".join(found)


@pytest.mark.parametrize(
    ("module", "args"),
    [
        ("deployments", ("undeploy", "--help")),
        ("deployments", ("canary-judge", "--help")),
        ("deployments", ("recommend", "--help")),
        ("export", ("versions", "list", "--help")),
    ],
)
def test_help_still_says_the_defaults(module, args):
    text = " ".join(run_module(module, *args).stdout.split())
    expected = str(MODEL_STORE_DIR) if module == "export" else DEFAULT_NAMESPACE
    assert f"default: {expected})" in text or f"default {expected}" in text, text


def test_the_bucket_is_the_one_deploy_uploads_to_the_cluster_makes_and_the_base_shows():
    """deploy's default storage root and the local cluster's bucket are derived from STORAGE_BUCKET; the base
    manifest's placeholder modelUri (render replaces it) is plain YAML, so it is held to the same name here."""
    from deployments.render.records import DEFAULT_STORAGE_ROOT

    assert DEFAULT_STORAGE_ROOT == f"s3://{STORAGE_BUCKET}"
    base = yaml.safe_load((PROJECT_ROOT / "deployments" / "base" / "seldondeployment.yaml").read_text())
    placeholder = base["spec"]["predictors"][0]["graph"]["modelUri"]
    assert placeholder.startswith(f"{DEFAULT_STORAGE_ROOT}/"), placeholder
