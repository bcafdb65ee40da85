"""The CPUs this process may use, read from its cgroup, and the intra-op threads that follow from them."""

from __future__ import annotations

import logging
import math
import os
from pathlib import Path

logger = logging.getLogger(__name__)

CGROUP_ROOT = Path("/sys/fs/cgroup")


def cpu_limit(cgroup_root: Path = CGROUP_ROOT) -> float:
    """The CPUs this process may use: the cgroup quota when a container sets one, else the affinity mask.

    `os.cpu_count()` reports the host's cores; a pod limited to 2 CPUs on a 64-core node
    that sizes its thread pools from it thrashes.
    """
    available = float(len(os.sched_getaffinity(0))) if hasattr(os, "sched_getaffinity") else float(os.cpu_count() or 1)
    quota = cgroup_cpu_quota(cgroup_root)
    return min(available, quota) if quota else available


def cgroup_cpu_quota(root: Path = CGROUP_ROOT) -> float | None:
    """CPUs granted by the cgroup (v2 `cpu.max`, or v1 `cfs_quota_us / cfs_period_us`); None when unlimited."""
    v2 = root / "cpu.max"
    try:
        if v2.is_file():
            quota, period = v2.read_text().split()[:2]
            return None if quota == "max" else int(quota) / int(period)
        v1_quota = root / "cpu" / "cpu.cfs_quota_us"
        v1_period = root / "cpu" / "cpu.cfs_period_us"
        if v1_quota.is_file() and v1_period.is_file():
            quota_us = int(v1_quota.read_text())
            return None if quota_us <= 0 else quota_us / int(v1_period.read_text())
    except (OSError, ValueError):
        logger.warning("could not read the cgroup CPU quota under %s; sizing thread pools from the affinity mask", root)
    return None


def threads_for_cpu_limit(cpu_limit: float) -> int:
    """Intra-op threads for a CPU limit: its whole CPUs, at least one (a fraction of a CPU is not a thread)."""
    return max(1, math.floor(cpu_limit))
