"""The Kubernetes dynamic client, one way for every part that reads or applies any kind (deploy, canary, the
local cluster's objects): on its own so that the local cluster and the deploy path both use it, neither through the other."""

from __future__ import annotations

from typing import TypeVar

T = TypeVar("T")


def present(value: T | None) -> T:
    """A field of an object read from the API server that the server always fills (its metadata, a Deployment's
    status, a pod's spec): the Python client types every field Optional, and this says which ones are not. Where one
    is missing after all, AttributeError, as reading an attribute of None would raise."""
    if value is None:
        raise AttributeError("the API server left out a field it always fills")
    return value


def dynamic_client(api, *, fresh: bool = False):
    """The dynamic client; `fresh` rediscovers the kinds the cluster serves. The Python client keeps what it
    discovered in a file under /tmp, shared by every process that talks to the same server, and trusts it
    for kinds it finds there: a CRD removed since would still look served."""
    from kubernetes.dynamic import DynamicClient

    dynamic = DynamicClient(api)
    if fresh:
        dynamic.resources.invalidate_cache()
    return dynamic
