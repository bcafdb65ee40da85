"""The live SeldonDeployment a canary or shadow changes: read it, check Slipway made it, patch it guarded.

Every change is one JSON patch (RFC 6902) whose first operations are tests: the annotation still holds the state
its writer last saw (or, before there is one, the object's resourceVersion is the one read), and each predictor
is at the index the operations name. The API server applies all of it or none, so two weights set in one patch
always sum to 100 and a controller that lost its lease cannot write over the one that took it.
"""

from __future__ import annotations

from dataclasses import dataclass

from deployments.render import seldon
from deployments.render.overlay import COMMON_LABELS, MANAGED_BY

JSON_PATCH = "application/json-patch+json"


class LiveError(Exception):
    """The SeldonDeployment is missing, not Slipway's, or changed under us; the message says what to do."""


class Conflict(LiveError):
    """A test operation failed: someone else changed the object since it was read."""


def pointer(*parts: str | int) -> str:
    """A JSON pointer from its parts (`/` and `~` escaped, as annotation keys need)."""
    return "".join("/" + str(part).replace("~", "~0").replace("/", "~1") for part in parts)


def annotation_path(key: str) -> str:
    return pointer("metadata", "annotations", key)


def predictor_index(sdep: dict, name: str) -> int | None:
    return next((i for i, p in enumerate(sdep["spec"].get("predictors", [])) if p.get("name") == name), None)


def index_of(sdep: dict, name: str) -> int:
    """The index of a predictor that must be there."""
    index = predictor_index(sdep, name)
    if index is None:
        raise LiveError(
            f"SeldonDeployment {sdep['metadata'].get('namespace')}/{sdep['metadata']['name']} has no "
            f"predictor {name!r} any more: someone changed it; run the command again"
        )
    return index


def at_index(sdep: dict, *names: str) -> list[dict]:
    """Test operations pinning each named predictor to the index it has in `sdep`."""
    return [{"op": "test", "path": pointer("spec", "predictors", index_of(sdep, name), "name"), "value": name} for name in names]


def weights(sdep: dict, split: dict[str, int]) -> list[dict]:
    """Set every named predictor's traffic (`add` also creates the field)."""
    return [
        {"op": "add", "path": pointer("spec", "predictors", index_of(sdep, name), "traffic"), "value": weight}
        for name, weight in split.items()
    ]


@dataclass(frozen=True)
class LiveDeployment:
    """One SeldonDeployment in the cluster."""

    api: object
    namespace: str
    name: str

    def _resource(self):
        from deployments.rollout.kube_api import dynamic_client

        return dynamic_client(self.api).resources.get(api_version=seldon.API_VERSION, kind=seldon.KIND)

    def read(self) -> dict:
        """The object; refused unless it exists and Slipway rendered it."""
        from kubernetes.dynamic.exceptions import NotFoundError

        try:
            sdep = self._resource().get(name=self.name, namespace=self.namespace).to_dict()
        except NotFoundError as err:
            raise LiveError(
                f"no SeldonDeployment {self.name} in namespace {self.namespace}: deploy the stable version "
                f"first (make deploy VERSION=... NAMESPACE={self.namespace})"
            ) from err
        labels = sdep["metadata"].get("labels") or {}
        if labels.get(MANAGED_BY) != COMMON_LABELS[MANAGED_BY]:
            raise LiveError(
                f"SeldonDeployment {self.namespace}/{self.name} was not deployed by Slipway (no label "
                f"{MANAGED_BY}=slipway): Slipway changes only what it rendered; deploy it with make deploy"
            )
        return sdep

    def patch(self, operations: list[dict]) -> dict:
        """Apply one JSON patch, all or nothing; a failed test is a `Conflict`."""
        from kubernetes.client.exceptions import ApiException

        from deployments.rollout.apply import api_message

        try:
            return (
                self._resource()
                .patch(body=operations, name=self.name, namespace=self.namespace, content_type=JSON_PATCH)
                .to_dict()
            )
        except ApiException as err:
            message = api_message(err)
            if err.status == 422 and "test" in message.lower() and "fail" in message.lower():
                raise Conflict(
                    f"SeldonDeployment {self.namespace}/{self.name} changed while this command ran ({message})"
                ) from err
            raise LiveError(
                f"SeldonDeployment {self.namespace}/{self.name}: the API server refused the change: "
                f"{err.status} {err.reason}: {message}"
            ) from err
