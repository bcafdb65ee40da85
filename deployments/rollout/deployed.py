"""Which model Slipway deployed in a namespace, for the commands that act on one already there (undeploy, alerts,
recommend, shadow --remove, canary --abort) when they are not told its name.

Found by the labels deploy puts on what it applies (`app.kubernetes.io/managed-by=slipway` and `slipway.io/model`), on
the SeldonDeployments and, for KServe, the InferenceServices of the namespace: one model there is the one meant;
none, or several, is one line saying what to do instead.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from deployments.render.overlay import COMMON_LABELS, MANAGED_BY
from deployments.render.seldon import MODEL_LABEL
from deployments.rollout.apply import ENGINE_KINDS, ClusterUnavailable, connect
from deployments.rollout.kube_api import dynamic_client


class ModelNotFound(RuntimeError):
    """No model, or more than one, where a command needs one; the message says what to give instead."""


def deployed_models(api, namespace: str, engines: Iterable[str] = tuple(ENGINE_KINDS)) -> list[str]:
    """The names of the models Slipway deployed in `namespace` with `engines`, sorted (a kind the cluster does not
    serve holds none)."""
    from kubernetes.client.exceptions import ApiException
    from kubernetes.dynamic.exceptions import NotFoundError, ResourceNotFoundError

    selector = f"{MANAGED_BY}={COMMON_LABELS[MANAGED_BY]},{MODEL_LABEL}"
    dynamic = dynamic_client(api)
    models: set[str] = set()
    for engine in engines:
        api_version, kind = ENGINE_KINDS[engine]
        try:
            items = dynamic.resources.get(api_version=api_version, kind=kind).get(namespace=namespace, label_selector=selector)
        except (ResourceNotFoundError, NotFoundError):  # not served (or no longer: discovery's cache outlives a CRD)
            continue
        except ApiException as err:
            raise ModelNotFound(f"cannot list the {kind}s of namespace {namespace}: {err.status} {err.reason}") from err
        models.update(item.metadata.labels[MODEL_LABEL] for item in items.items)
    return sorted(models)


def _give(flag: str, target: str | None) -> str:
    """How to name the model: `flag`, and `make target NAME=` where a make target runs the command."""
    return f"give {flag}" + (f" (make {target} NAME=...)" if target else "")


def choose(models: list[str], *, namespace: str, flag: str, target: str | None) -> str:
    """The one model of `models`; none or several refused in one line naming `flag` and `make target`'s NAME=."""
    if len(models) == 1:
        return models[0]
    if not models:
        raise ModelNotFound(f"nothing Slipway deployed in namespace {namespace}; deploy first with `make deploy`")
    raise ModelNotFound(f"namespace {namespace} holds models {', '.join(models)}: {_give(flag, target)}, e.g. {flag} {models[0]}")


def deployed_model(
    namespace: str,
    *,
    flag: str,
    target: str | None,
    engines: Iterable[str] = tuple(ENGINE_KINDS),
    api=None,
    on_note: Callable[[str], None] = lambda note: None,
) -> str:
    """The one model Slipway deployed in `namespace`, asked of `api` (else of the current context's cluster, which
    `on_note` may name); ModelNotFound where there is none, several, or no cluster to ask."""
    if api is None:
        try:
            api = connect(on_note=on_note)
        except ClusterUnavailable as err:
            raise ModelNotFound(
                f"{err}, so the model Slipway deployed in namespace {namespace} cannot be looked up: "
                f"{_give(flag, target)}, or point KUBECONFIG at its cluster"
            ) from err
    return choose(deployed_models(api, namespace, engines), namespace=namespace, flag=flag, target=target)
