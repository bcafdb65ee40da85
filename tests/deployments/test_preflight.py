"""The preflight's pure rules: which Secrets the models need, and how an operator's version is read."""

from __future__ import annotations

import pytest

from deployments.render.overlay import RenderOptions, render
from deployments.rollout.preflight import MINIMUM_OPERATOR, parse_version, storage_secrets


@pytest.mark.parametrize(
    "text, version",
    [
        ("1.17.1", (1, 17, 1)),
        ("v1.16.0", (1, 16, 0)),
        ("1.18", (1, 18, 0)),
        ("1.17.1-rc1", (1, 17, 1)),
        ("latest", None),
        ("", None),
        ("1.x", None),
    ],
)
def test_versions_are_read_from_tags_and_labels(text, version):
    assert parse_version(text) == version


def test_1_17_1_is_the_minimum_and_1_17_0_is_below_it():
    assert parse_version("1.17.1") >= MINIMUM_OPERATOR > parse_version("1.17.0")


def test_each_secret_is_needed_for_the_schemes_of_the_models_that_name_it(main_version, canary_version):
    rendered = render(
        "canary",
        RenderOptions(model=main_version, canary=canary_version.model_copy(update={"uri": "gs://models/4"}), engine="builtin"),
    )
    assert storage_secrets(rendered.docs) == {"slipway-model-storage": {"s3", "gs"}}
    claim = render("cpu", RenderOptions(model=main_version.model_copy(update={"uri": "pvc://models/digits/3"}), engine="builtin"))
    assert storage_secrets(claim.docs) == {}  # Seldon mounts a claim; no credentials to read
