"""How large a REST body this server admits: the container's memory limit, less what the process holds, over what
decoding a body costs.

A JSON body of numbers is held as bytes, parsed into Python objects, copied into an array, and answered: its peak
cost is a multiple of its size (`JSON_AMPLIFICATION`, measured in docs/security.md), so a fixed limit that suits a
large node lets one anonymous request take a small pod past its memory limit, an OOM kill that loses every request
in flight. The limit is sized at each model's load, when what the process holds is known; `SLIPWAY_MAX_BODY_BYTES`
sets it outright. Bodies over a quarter of it are decoded one at a time (`wrappers.transport.body_layer`), so two
large ones cannot stack their peaks.
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass
from pathlib import Path

from slipway.runtime_settings import SettingsError

MIB = 1 << 20
DEFAULT_BODY_BYTES = 256 * MIB  # without a memory limit to size by: a batch of 64 224x224x3 images as JSON, with room
MIN_BODY_BYTES = 1 * MIB  # a limit smaller than this would refuse every real request: a pod that small is misconfigured
JSON_AMPLIFICATION = 16  # a JSON body of numbers at its peak, bytes held per byte sent (docs/security.md)
BODY_LIMIT_ENV = "SLIPWAY_MAX_BODY_BYTES"
UNLIMITED = 1 << 62  # cgroup v1 writes "no limit" as the largest page-aligned 64-bit number
CGROUP_ROOT = Path("/sys/fs/cgroup")


@dataclass
class BodyLimit:
    """The limit the process admits REST bodies up to now, and the turn large ones take: the process state's
    (`wrappers.process_state`), sized again at each model's load (`wrappers.transport.body_layer.install`)."""

    bytes: int = DEFAULT_BODY_BYTES
    large: asyncio.Semaphore | None = None  # made on the event loop, at the first large body


class BodyBudgetError(SettingsError):
    """SLIPWAY_MAX_BODY_BYTES is not a number of bytes; the message says what to set."""


def admitted_bytes(memory_limit: int | None, resident: int, configured: str | None) -> int:
    """The largest body to admit: `configured` (SLIPWAY_MAX_BODY_BYTES) where set, else what the memory left under
    `memory_limit` (None: no limit) holds at JSON_AMPLIFICATION, in whole MiB, within MIN_BODY_BYTES..DEFAULT_BODY_BYTES."""
    if configured is not None and configured.strip():
        value = configured.strip()
        if not value.isdigit() or int(value) < 1:
            raise BodyBudgetError(
                f"{BODY_LIMIT_ENV}={configured!r} is not a number of bytes: set a whole number (e.g. {64 * MIB} for "
                "64 MiB), or unset it to size the limit by the container's memory limit"
            )
        return int(value)
    if memory_limit is None:
        return DEFAULT_BODY_BYTES
    budget = max(0, memory_limit - resident) // JSON_AMPLIFICATION // MIB * MIB
    return max(MIN_BODY_BYTES, min(DEFAULT_BODY_BYTES, budget))


def memory_limit(cgroup_file: Path = Path("/proc/self/cgroup"), root: Path = CGROUP_ROOT) -> int | None:
    """This process's memory limit in bytes from its own cgroup (v2 `memory.max`, v1 `memory.limit_in_bytes`); None
    where there is none or it cannot be read. Read at the process's own cgroup path, not the hierarchy's root: outside
    a cgroup namespace the root's file is the host's."""
    try:
        lines = cgroup_file.read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        relative = path.lstrip("/")
        if "memory" in controllers.split(","):
            found = _read_limit(root / "memory" / relative / "memory.limit_in_bytes")
        elif controllers == "":
            found = _read_limit(root / relative / "memory.max") or _read_limit(root / "unified" / relative / "memory.max")
        else:
            continue
        if found is not None:
            return found
    return None


def _read_limit(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    if not text.isdigit() or int(text) >= UNLIMITED:  # "max" (v2), or v1's "no limit"
        return None
    return int(text)


def resident_bytes(statm: Path = Path("/proc/self/statm")) -> int:
    """What this process holds in memory now (its resident set)."""
    try:
        return int(statm.read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def sized_here() -> int:
    """The limit for this process as it is now: its memory limit, what it holds, and SLIPWAY_MAX_BODY_BYTES."""
    return admitted_bytes(memory_limit(), resident_bytes(), os.environ.get(BODY_LIMIT_ENV))
