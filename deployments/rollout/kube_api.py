"""The Kubernetes dynamic client, one way for every part that reads or applies any kind (deploy, canary, the
local cluster's objects): on its own so that the local cluster and the deploy path both use it, neither through the other."""

from __future__ import annotations


def dynamic_client(api, *, fresh: bool = False):
    """The dynamic client; `fresh` rediscovers the kinds the cluster serves. The Python client keeps what it
    discovered in a file under /tmp, shared by every process that talks to the same server, and trusts it
    for kinds it finds there: a CRD removed since would still look served."""
    from kubernetes.dynamic import DynamicClient

    dynamic = DynamicClient(api)
    if fresh:
        dynamic.resources.invalidate_cache()
    return dynamic
