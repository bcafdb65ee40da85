"""Roll a rendered model version out to a cluster: check, upload and verify its bytes, apply, wait, prove it serves.

`python -m deployments deploy` renders and validates, builds a `Rollout` from its arguments and calls `roll_out`;
it prints what the `RolloutProgress` hears on the way and the `RolloutResult` at the end. The order is the one that
leaves nothing half done: the API server and its webhooks check every object (a dry-run apply) before any byte is
uploaded, and the bytes are where the pods pull them from, verified, before anything is applied. A rendering holds
one SeldonDeployment or one InferenceService; only the engine's own checks and wait differ (KServe's in
deployments/kserve/rollout.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

from deployments.kserve import api as kserve
from deployments.kserve import rollout as kserve_rollout
from deployments.render import seldon
from deployments.render.overlay import Rendered
from deployments.rollout.apply import DeployError, apply, ask_served, ask_service, wait_rolled_out
from deployments.rollout.placement import StorageAccess, place_models
from deployments.rollout.preflight import preflight

DEFAULT_WAIT_S = 300.0
DRY_RUNS = ("none", "server")


class RolloutError(DeployError):
    """A rollout refused before it reaches the cluster; the message says what to pass instead."""


@dataclass(frozen=True)
class Rollout:
    """What one rollout needs: the validated rendering and how far to go with it.

    `dry_run` "server": the API server checks everything and the store is only looked at; nothing is uploaded or
    stored. `wait_s` 0 (or less): apply and do not wait for the pods. `storage_endpoint` and `pvc_mount`: how this
    machine reaches the store the pods pull from (`deployments.rollout.placement`)."""

    rendered: Rendered
    dry_run: Literal["none", "server"] = "none"
    wait_s: float = DEFAULT_WAIT_S
    check_images: bool = False
    storage_endpoint: str | None = None
    pvc_mount: Path | None = None

    def __post_init__(self) -> None:
        if self.dry_run not in DRY_RUNS:
            raise RolloutError(
                f"dry run {self.dry_run!r} is not a rollout: choose one of {', '.join(DRY_RUNS)} "
                "(a client dry run renders and validates only, and sends nothing)"
            )
        kinds = [doc.get("kind") for doc in self.rendered.docs]
        counts = (kinds.count(seldon.KIND), kinds.count(kserve.ISVC_KIND))
        if sorted(counts) != [0, 1]:
            raise RolloutError(
                f"the rendering holds {counts[0]} SeldonDeployments and {counts[1]} InferenceServices; a rollout applies "
                "and waits for one of either (--engine seldon or kserve): apply other renderings' all.yaml yourself"
            )

    @property
    def namespace(self) -> str:
        return self.rendered.namespace

    @property
    def kserve(self) -> bool:
        return kserve_rollout.is_kserve(self.rendered.docs)

    @property
    def storage(self) -> StorageAccess:
        return StorageAccess(namespace=self.namespace, storage_endpoint=self.storage_endpoint, pvc_mount=self.pvc_mount)


@dataclass(frozen=True)
class RolloutResult:
    """What a rollout did: `applied` names each object (Kind/name) applied, or in a server dry run checked.
    `waited`: the SeldonDeployment was Available with the new version's pods Ready; then `url` is the address Seldon
    reports inside the cluster and `served` a line per predictor saying what its Service answered."""

    applied: tuple[str, ...]
    dry_run: bool
    waited: bool = False
    url: str | None = None
    served: tuple[str, ...] = ()


class RolloutProgress(Protocol):
    """What a rollout says while it runs, where the order matters (a failure later leaves these said)."""

    def warning(self, text: str) -> None:
        """Something may not serve as meant (preflight): said before anything is uploaded or applied."""

    def applied(self, names: list[str], namespace: str) -> None:
        """The objects were applied (not a dry run), before the wait."""

    def waiting(self, name: str, timeout_s: float) -> AbstractContextManager[Callable[[str], None]]:
        """Around the wait for the rollout: yields what to call with each state the wait sees."""

    def rolled_out(self, rendered: Rendered, url: str | None) -> None:
        """Available, the new version's pods Ready (`url`: Seldon's address inside the cluster), before its
        Services are asked."""


class Silent:
    """A `RolloutProgress` that says nothing (tests, callers that only read the result)."""

    def warning(self, text: str) -> None:
        pass

    def applied(self, names: list[str], namespace: str) -> None:
        pass

    @contextmanager
    def waiting(self, name: str, timeout_s: float) -> Iterator[Callable[[str], None]]:
        yield lambda state: None

    def rolled_out(self, rendered: Rendered, url: str | None) -> None:
        pass


def roll_out(api: Any, rollout: Rollout, progress: RolloutProgress | None = None) -> RolloutResult:
    """Preflight, dry-run apply, upload and verify each version, apply, then (with `wait_s`) wait until the pods
    serve the new digests and ask each predictor's Service for its model. Raise DeployError (or the placement's
    UserError) at the first step that fails: what came before it stays, nothing after it is done."""
    progress = progress or Silent()
    rendered, namespace = rollout.rendered, rollout.namespace
    for warning in preflight(api, rendered.docs, namespace, check_images=rollout.check_images):
        progress.warning(warning)
    if rollout.kserve:
        for warning in kserve_rollout.check_cluster(api, rendered.docs, namespace):
            progress.warning(warning)
    # the API server and its webhooks check everything before any byte is uploaded, the upload before anything is applied
    applied = apply(api, rendered.docs, namespace=namespace, dry_run=True)
    place_models(api, _placements(rendered), rollout.storage, check_only=rollout.dry_run == "server")
    if rollout.dry_run == "server":
        return RolloutResult(applied=tuple(applied), dry_run=True)
    apply(api, rendered.docs, namespace=namespace)
    progress.applied(applied, namespace)
    if rollout.wait_s <= 0:
        return RolloutResult(applied=tuple(applied), dry_run=False)
    url, served = (_wait_kserve if rollout.kserve else _wait_seldon)(api, rollout, progress)
    return RolloutResult(
        applied=tuple(applied),
        dry_run=False,
        waited=True,
        url=url,
        served=tuple(served),
    )


def _wait_seldon(api, rollout: Rollout, progress: RolloutProgress) -> tuple[str | None, list[str]]:
    """Wait until the SeldonDeployment is Available with every predictor's version on its pods, then ask each
    predictor's Service: Seldon's address inside the cluster, and what the Services answered."""
    rendered, namespace = rollout.rendered, rollout.namespace
    digests = {predictor: version.digest for predictor, version in rendered.models.items()}
    with progress.waiting(rendered.name, rollout.wait_s) as on_state:
        status = wait_rolled_out(
            api, namespace=namespace, name=rendered.name, digests=digests, timeout_s=rollout.wait_s, on_state=on_state
        )
    url = (status.get("address") or {}).get("url")
    progress.rolled_out(rendered, url)
    return url, ask_served(
        api, namespace=namespace, name=rendered.name, predictors={p: m.name for p, m in rendered.models.items()}
    )


def _wait_kserve(api, rollout: Rollout, progress: RolloutProgress) -> tuple[str | None, list[str]]:
    """Wait until the InferenceService is Ready with the version's pods, then ask its predictor's Service: KServe's
    address inside the cluster, and what the Service answered."""
    rendered, namespace = rollout.rendered, rollout.namespace
    version = rendered.models["default"]
    with progress.waiting(rendered.name, rollout.wait_s) as on_state:
        status = kserve_rollout.wait_ready(
            api, namespace=namespace, name=rendered.name, digest=version.digest, timeout_s=rollout.wait_s, on_state=on_state
        )
    address = (status.get("address") or {}).get("url")  # the predictor Service's, in raw mode
    url = f"{address}/v2/models/{version.name}/infer" if address else None
    progress.rolled_out(rendered, url)
    served = ask_service(
        api,
        namespace=namespace,
        label=kserve.PREDICTOR_COMPONENT,
        service=kserve.predictor_name(rendered.name),
        selector=kserve_rollout.pod_selector(rendered.name),
        model=version.name,
        container=kserve.CONTAINER_NAME,
    )
    return url, [served]


def _placements(rendered: Rendered) -> list[tuple[Any, str | None]]:
    """(version, the Secret its pods pull with) for each predictor, once per URI."""
    if kserve_rollout.is_kserve(rendered.docs):
        return [(rendered.models["default"], kserve_rollout.storage_secret(rendered.docs))]
    graphs = {p["name"]: p["graph"] for p in rendered.seldon_deployment["spec"]["predictors"]}
    placements = {
        version.uri: (version, graphs[predictor].get("envSecretRefName")) for predictor, version in rendered.models.items()
    }
    return list(placements.values())
