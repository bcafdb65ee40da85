"""How a model pod stops: a preStop sleep, then SIGTERM and the server's drain, all within the pod's
`terminationGracePeriodSeconds` (docs/security.md, "Stopping: a bounded drain").

When a pod is deleted its endpoints are marked not ready at once, but kube-proxy, the gateway and other clients learn
it seconds later and send it requests meanwhile. The model container's preStop hook sleeps first, the server still
accepting, so that they have dropped the pod before the kubelet sends SIGTERM; the server then stops accepting and
answers what it took for at most SLIPWAY_DRAIN_SECONDS (`slipway.drain`). The grace period counts from the hook's
start and the kubelet kills what is left at its end, so it must hold the sleep, the drain and a margin to exit:
`stop_errors` refuses a rendering where it does not, the base's values and an overlay's alike.

Seldon Core 1.17's operator reads the pod spec with Kubernetes 1.24's types, which have no `sleep` hook action
(Kubernetes 1.30+): it would drop it and the API server would refuse the empty hook. The base therefore writes an
exec hook running `sleep` (coreutils' sleep is in both images); the KServe rendering, which KServe 0.15 reads with
1.32's types, turns it into the native `sleep` action (`native_sleep`), which needs nothing in the image.
"""

from __future__ import annotations

import math
from typing import Any

from slipway.drain import DRAIN_ENV, DrainSettingError, drain_seconds

EXIT_MARGIN_S = 5  # after the drain: the worker pool and the metrics server stopped, the process gone
DEFAULT_GRACE_S = 30  # Kubernetes' default terminationGracePeriodSeconds
SLEEP_COMMANDS = ("sleep", "/bin/sleep", "/usr/bin/sleep")


def prestop_sleep_s(container: dict[str, Any]) -> float | None:
    """How long the container's preStop hook sleeps: 0 without one, None for a hook that is not a sleep."""
    hook = container.get("lifecycle", {}).get("preStop")
    if not hook:
        return 0.0
    if "sleep" in hook:
        return float(hook["sleep"].get("seconds", 0))
    command = hook.get("exec", {}).get("command", [])
    if len(command) == 2 and command[0] in SLEEP_COMMANDS:
        try:
            return float(command[1])
        except ValueError:
            return None
    return None


def native_sleep(container: dict[str, Any]) -> None:
    """An exec hook running `sleep N` becomes Kubernetes' own `sleep` action (for readers with 1.30+'s types)."""
    hook = container.get("lifecycle", {}).get("preStop", {})
    seconds = prestop_sleep_s(container)
    if "exec" in hook and seconds is not None and seconds == int(seconds):
        container["lifecycle"]["preStop"] = {"sleep": {"seconds": int(seconds)}}


def _drain_s(container: dict[str, Any]) -> float:
    values = {item["name"]: item.get("value", "") for item in container.get("env", []) if item.get("name") == DRAIN_ENV}
    return drain_seconds(values)


def stop_errors(where: str, pod_spec: dict[str, Any], model_container: str) -> list[str]:
    """The model container's (and any other container with a drain setting's) preStop sleep, drain and exit margin
    against the pod's grace period: one line for each that does not fit, saying what to change."""
    grace = pod_spec.get("terminationGracePeriodSeconds", DEFAULT_GRACE_S)
    errors = []
    for container in pod_spec.get("containers", []):
        env = {item.get("name") for item in container.get("env", [])}
        if container.get("name") != model_container and DRAIN_ENV not in env:
            continue
        name = container.get("name")
        sleep = prestop_sleep_s(container)
        if sleep is None:
            errors.append(
                f"{where}: container {name!r} has a preStop hook that is not a sleep, so its length is unknown: use "
                "exec [sleep, SECONDS] (or Kubernetes' sleep action), which the grace period is checked against"
            )
            continue
        try:
            drain = _drain_s(container)
        except DrainSettingError as err:
            errors.append(f"{where}: container {name!r}: {err}")
            continue
        needed = sleep + drain + EXIT_MARGIN_S
        if grace < needed:
            errors.append(
                f"{where}: terminationGracePeriodSeconds {grace} is shorter than container {name!r}'s stop: preStop "
                f"sleep {sleep:g} s + {DRAIN_ENV} {drain:g} + {EXIT_MARGIN_S} s to exit = {needed:g} s, so the "
                f"kubelet would kill the server mid-drain: set terminationGracePeriodSeconds to {math.ceil(needed)} "
                f"or more, or shorten the drain or the sleep"
            )
    return errors
