"""The canary and shadow predictors, made from the live stable one: the same image, settings, security and probes,
another model version.

Made from what runs rather than re-rendered from an overlay, so that whatever `make deploy` was given (an image,
shared memory, the repository API, GPU placement) is the canary's too and the two differ only in the version.
What the canary overlay changes for its predictor (deployments/overlays/canary/canary.yaml) it changes here too,
read from that file: a small HPA range, no PodDisruptionBudget of its own (a second budget over the same pods
makes every eviction fail).
"""

from __future__ import annotations

import copy
from functools import cache

import yaml

from deployments.render.overlay import CANARY_PREDICTOR, OVERLAYS_DIR, pin_predictor
from deployments.render.records import ModelVersion
from deployments.render.seldon import PREDICTOR_LABEL

STABLE_PREDICTOR = "default"
SHADOW_PREDICTOR = "shadow"
VERSION_ANNOTATION = "slipway.io/model-version"
DIGEST_ANNOTATION = "slipway.io/model-digest"
_HPA_PATH = "/spec/predictors/1/componentSpecs/0/hpaSpec"


class PredictorError(ValueError):
    """The live SeldonDeployment is not one a canary can be made from; the message says why."""


@cache
def _canary_hpa() -> dict:
    """The canary overlay's HPA for its predictor (a JSON 6902 patch op in canary.yaml)."""
    ops = yaml.safe_load((OVERLAYS_DIR / "canary" / "canary.yaml").read_text())
    return next(op["value"] for op in ops if op["path"] == _HPA_PATH and op["op"] == "replace")


def served_version(predictor: dict) -> tuple[str, str]:
    """(version, digest) a live predictor serves, from the annotations render put on it."""
    annotations = predictor.get("annotations") or {}
    version, digest = annotations.get(VERSION_ANNOTATION), annotations.get(DIGEST_ANNOTATION)
    if not version or not digest:
        raise PredictorError(
            f"predictor {predictor.get('name')!r} carries no {VERSION_ANNOTATION} and "
            f"{DIGEST_ANNOTATION} annotations: it was not rendered by Slipway; redeploy it with make deploy"
        )
    return version, digest


def made_from(stable: dict, version: ModelVersion, *, name: str, namespace: str) -> dict:
    """A predictor called `name` serving `version`, otherwise the live `stable` predictor's copy; no traffic yet."""
    predictor = copy.deepcopy(stable)
    predictor["name"] = name
    predictor.pop("traffic", None)
    predictor.pop("shadow", None)
    predictor.setdefault("labels", {})[PREDICTOR_LABEL] = name
    for component in predictor.get("componentSpecs", []):
        component.pop("pdbSpec", None)
        component.pop("kedaSpec", None)  # its query names the stable predictor; the canary's share is small
        component["hpaSpec"] = copy.deepcopy(_canary_hpa())
        # the overlay's HPA names the container by placeholder; pin_predictor renames it from the stable's
        for metric in component["hpaSpec"].get("metricsv2", []):
            if "containerResource" in metric:
                metric["containerResource"]["container"] = stable["graph"]["name"]
    pin_predictor(predictor, version, namespace=namespace)
    return predictor


def canary(stable: dict, version: ModelVersion, *, namespace: str) -> dict:
    return made_from(stable, version, name=CANARY_PREDICTOR, namespace=namespace)


def shadow(stable: dict, version: ModelVersion, *, namespace: str) -> dict:
    """A shadow: the gateway mirrors every request to it and drops its answers (Seldon's `shadow: true`)."""
    predictor = made_from(stable, version, name=SHADOW_PREDICTOR, namespace=namespace)
    predictor["shadow"] = True
    return predictor
