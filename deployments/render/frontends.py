"""Several front ends per model pod (`--frontends N`): the setting, and the CPUs the pod asks for to run them.

The artifact in the store is immutable, so the manifests set the runtime's `frontends` through the model
container's environment ($SLIPWAY_FRONTENDS, which the runtime reads over parameters.extra.frontends). Each
front end is an event loop that saturates one CPU decoding requests, and the session host needs one more to
feed the session: the pod asks for N + 1 CPUs and may burst to twice that (gRPC's threads, pre/post-processing),
the gpu overlay's 2 and 4 CPUs at N = 1. An overlay that already gives more keeps it. Each front end is also an
MLServer process of its own (~160 MB resident when idle, measured with MobileNetV2 and digits, plus up to 64 MB of
freed heap glibc keeps under `SERVING_MALLOC_ENV`), and the supervisor and session host are two more small ones:
the pod's memory request and limit grow by 256Mi per front end, so that N of them are not OOM-killed at load.
"""

from __future__ import annotations

from deployments.render import seldon
from deployments.render.quantities import cpus, memory_mib

FRONTENDS_ENV = "SLIPWAY_FRONTENDS"  # read by wrappers/frontends/__init__.py (with_pod_frontends)
MAX_FRONTENDS = 64  # as the runtime's setting allows
FRONTEND_MEMORY_MIB = 256  # per front end: see the module's docstring


class FrontendsError(ValueError):
    """A front-end count or a pod the count cannot apply to; the message says what to pass."""


def check_count(count: int) -> int:
    if not 1 <= count <= MAX_FRONTENDS:
        raise FrontendsError(f"--frontends {count}: give a whole number of front ends from 1 to {MAX_FRONTENDS}")
    return count


def cpu_for(count: int) -> tuple[int, int]:
    """(request, limit) in CPUs for `count` front ends and the session host: one per event loop, twice to burst."""
    return count + 1, 2 * (count + 1)


def apply(sdep: dict, count: int) -> None:
    """Set $SLIPWAY_FRONTENDS to `count` in every predictor's model container, raise its CPU request and limit
    to `cpu_for(count)` where they are lower, and add `FRONTEND_MEMORY_MIB` per front end to its memory (N > 1)."""
    check_count(count)
    request, limit = cpu_for(count)
    for predictor, _, component in seldon.pod_specs(sdep):
        for container in component.get("spec", {}).get("containers", []):
            if container.get("name") != predictor["graph"]["name"]:
                continue
            env = [item for item in container.get("env", []) if item.get("name") != FRONTENDS_ENV]
            container["env"] = [*env, {"name": FRONTENDS_ENV, "value": str(count)}]
            resources = container.setdefault("resources", {})
            for kind, wanted in (("requests", request), ("limits", limit)):
                given = resources.setdefault(kind, {})
                if (cpus(given.get("cpu")) or 0) < wanted:
                    given["cpu"] = str(wanted)
                memory = memory_mib(given.get("memory"))
                if count > 1 and memory is not None:
                    given["memory"] = f"{round(memory) + count * FRONTEND_MEMORY_MIB}Mi"
