"""Rendering MLServer's model repository API setting: closed unless asked, open only with a token Secret."""

from __future__ import annotations

import pytest
import yaml

from deployments.render import seldon
from deployments.render.overlay import DEPLOYMENTS_DIR, RenderError
from deployments.render.validate import validate_documents
from slipway.repository_access import API_ENV, TOKEN_ENV
from slipway.server_process import HOOK, HOOK_ENV
from tests.conftest import run_module
from tests.deployments.rendering import rendering

render = rendering()
GUARD = {"name": HOOK_ENV, "value": HOOK}


def _model_containers(rendered) -> list[dict]:
    sdep = rendered.seldon_deployment
    return [
        container
        for predictor, _, component in seldon.pod_specs(sdep)
        for container in component["spec"]["containers"]
        if container["name"] == predictor["graph"]["name"]
    ]


def _ours(container: dict) -> list[dict]:
    return [item for item in container["env"] if item["name"] in (HOOK_ENV, API_ENV, TOKEN_ENV)]


def test_the_base_is_rendered_closed_and_guarded():
    base = yaml.safe_load((DEPLOYMENTS_DIR / "base" / "seldondeployment.yaml").read_text())
    base_env = base["spec"]["predictors"][0]["componentSpecs"][0]["spec"]["containers"][0]["env"]
    assert _ours({"env": base_env}) == [GUARD, {"name": API_ENV, "value": "closed"}]


@pytest.mark.parametrize("overlay", ["cpu", "gpu", "canary"])
def test_every_model_container_is_rendered_closed_by_default(main_version, canary_version, overlay):
    rendered = render(overlay, model=main_version, canary=canary_version if overlay == "canary" else None)
    containers = _model_containers(rendered)
    assert len(containers) == (2 if overlay == "canary" else 1)
    for container in containers:
        assert _ours(container) == [GUARD, {"name": API_ENV, "value": "closed"}]
        assert container["env"][0]["name"] == "MLSERVER_PARALLEL_WORKERS"  # the overlays patch env/0 by index


@pytest.mark.parametrize("overlay", ["cpu", "canary"])
def test_open_reads_the_token_from_the_secret_in_every_model_container(main_version, canary_version, overlay):
    rendered = render(
        overlay,
        model=main_version,
        canary=canary_version if overlay == "canary" else None,
        repository_api="open",
        repository_token_secret="model-repository-token",
    )
    for container in _model_containers(rendered):
        assert _ours(container) == [
            GUARD,
            {"name": API_ENV, "value": "open"},
            {"name": TOKEN_ENV, "valueFrom": {"secretKeyRef": {"name": "model-repository-token", "key": "token"}}},
        ]
    text = yaml.safe_dump_all(rendered.docs)
    assert "&id" not in text  # no YAML anchors shared between the predictors
    report = validate_documents(rendered.docs)
    assert report.ok, report.errors


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"repository_api": "open"}, "--repository-api open needs --repository-token-secret NAME (REPOSITORY_TOKEN_SECRET=NAME)"),
        ({"repository_api": "closed", "repository_token_secret": "t"}, "with the repository API closed admits no caller"),
        ({"repository_token_secret": "t"}, "add --repository-api open (REPOSITORY_API=open)"),
        ({"repository_api": "Open"}, "unknown repository API setting 'Open'; choose one of closed, open"),
        ({"repository_api": "open", "repository_token_secret": "Bad_Name"}, "'Bad_Name' is not a Secret name"),
    ],
)
def test_what_cannot_work_is_refused_in_one_line(main_version, options, message):
    with pytest.raises(RenderError, match="^[^\n]*$") as caught:
        render("cpu", model=main_version, **options)
    assert message in str(caught.value)


def test_a_literal_token_an_overlay_writes_is_refused_by_validation(main_version):
    rendered = render("cpu", model=main_version, repository_api="open", repository_token_secret="t")
    _model_containers(rendered)[0]["env"][-1] = {"name": TOKEN_ENV, "value": "0123456789abcdef"}
    report = validate_documents(rendered.docs)
    assert not report.ok and any(f"env {TOKEN_ENV} holds a literal value" in error for error in report.errors)


def test_the_render_command_takes_the_options(record_files, reports_env, tmp_path):
    out = tmp_path / "open"
    run_module(
        "deployments",
        "render",
        "--version-record",
        str(record_files("3")),
        "--out",
        str(out),
        "--repository-api",
        "open",
        "--repository-token-secret",
        "repo-token",
        "--kustomize",
        "builtin",
        env=reports_env,
    )
    sdep = yaml.safe_load(next(out.glob("*seldondeployment*")).read_text())
    env = sdep["spec"]["predictors"][0]["componentSpecs"][0]["spec"]["containers"][0]["env"]
    assert {"name": TOKEN_ENV, "valueFrom": {"secretKeyRef": {"name": "repo-token", "key": "token"}}} in env
    refused = run_module(
        "deployments",
        "render",
        "--version-record",
        str(record_files("3")),
        "--out",
        str(tmp_path / "refused"),
        "--repository-api",
        "open",
        env=reports_env,
        check=False,
    )
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert "--repository-api open needs --repository-token-secret NAME" in refused.stderr
    assert not (tmp_path / "refused").exists()


@pytest.mark.parametrize("image", ["cpu", "gpu"])
def test_the_images_guard_the_api_where_no_manifest_sets_it(image):
    """`docker run` serves with the images' own env: the runtime would not load in an unguarded MLServer."""
    dockerfile = (DEPLOYMENTS_DIR / "images" / f"{image}.Dockerfile").read_text()
    assert f"ENV {HOOK_ENV}={HOOK}\n" in dockerfile
