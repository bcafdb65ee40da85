"""How long a stopped server answers the requests in flight: SLIPWAY_DRAIN_SECONDS.

Read by the launcher (`wrappers.launch`), which drains on SIGTERM, by the supervisor of several front ends
(`wrappers.frontends.supervisor`), which waits out its front ends' drain before it kills one, and by rendering
(`deployments.render.stopping`), which checks that the pod's grace period holds the preStop hook and the drain. In
the shared core, so that the server and the manifests read the one rule.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

DRAIN_ENV = "SLIPWAY_DRAIN_SECONDS"
DEFAULT_DRAIN_S = 20.0  # the manifests: a 5 s preStop sleep, this, 5 s to exit: their grace period of 30 s


class DrainSettingError(ValueError):
    """SLIPWAY_DRAIN_SECONDS is not a number of seconds over 0; the message says what to set."""


def drain_seconds(env: Mapping[str, str] = os.environ) -> float:
    """SLIPWAY_DRAIN_SECONDS, or the default: under the pod's terminationGracePeriodSeconds (30 in the manifests),
    after which the kubelet kills the server, losing every request still in flight."""
    text = env.get(DRAIN_ENV, "").strip()
    if not text:
        return DEFAULT_DRAIN_S
    try:
        seconds = float(text)
    except ValueError:
        seconds = -1.0
    if not 0 < seconds < float("inf"):
        raise DrainSettingError(
            f"{DRAIN_ENV}={text!r} is not a number of seconds over 0: set one under the pod's "
            f"terminationGracePeriodSeconds, or unset it for {DEFAULT_DRAIN_S:g}"
        )
    return seconds
