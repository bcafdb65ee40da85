"""The store and deployments meet through a file: `versions show --json` -> `deployments render --version-record`."""

import os

import yaml

from slipway.artifact import EXPECTED_DIGESTS_ENV
from tests.conftest import run_module
from tests.store.conftest import versions_json


def test_a_tagged_version_renders_pinned_to_its_digest(artifact_factory, tmp_path):
    store = ["--store", str(tmp_path / "store")]
    first = versions_json("publish", str(artifact_factory(1.0)), "--model", "tiny", "--tag", "champion", *store)
    versions_json("publish", str(artifact_factory(2.0)), "--model", "tiny", *store)
    record_file = tmp_path / "model-version.json"
    env = {**os.environ, "SLIPWAY_REPORTS_DIR": str(tmp_path / "reports")}  # never the project's own reports/
    shown = run_module("export", "versions", "show", "tiny@champion", "--json", *store, env=env)
    record_file.write_text(shown.stdout)
    out = tmp_path / "manifests"
    run_module(
        "deployments",
        "render",
        "--version-record",
        str(record_file),
        "--model-uri",
        "s3://models/tiny/1",
        "--out",
        str(out),
        "--kustomize",
        "builtin",
        env=env,
    )
    docs = list(yaml.safe_load_all((out / "all.yaml").read_text()))
    sdep = next(doc for doc in docs if doc["kind"] == "SeldonDeployment")
    predictor = sdep["spec"]["predictors"][0]
    container = predictor["componentSpecs"][0]["spec"]["containers"][0]
    assert sdep["metadata"]["annotations"]["slipway.io/model-version"] == first["version"] == "1"
    assert sdep["metadata"]["annotations"]["slipway.io/model-digest"] == f"sha256:{first['digest']}"
    assert predictor["graph"]["modelUri"] == "s3://models/tiny/1"
    pins = [item["value"] for item in container["env"] if item["name"] == EXPECTED_DIGESTS_ENV]
    assert pins == [f"tiny=sha256:{first['digest']}"]
