"""Kubernetes resource quantities read as numbers: CPUs ("2", "500m") and memory ("4Gi", "512Mi", "1G", bytes).

Only the plain forms the manifests use; anything else reads as None, for the caller to refuse or leave alone.
"""

from __future__ import annotations

import re

_CPU = re.compile(r"^([0-9]+(?:\.[0-9]+)?)(m?)$")
_MEMORY = re.compile(r"^([0-9]+(?:\.[0-9]+)?)(Ki|Mi|Gi|Ti|k|M|G|T)?$")
_BYTES = {None: 1, "Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}


def cpus(quantity: object) -> float | None:
    """A CPU quantity ("2", "500m", 1.5) in CPUs; None where absent or not a plain CPU quantity."""
    match = _CPU.match(str(quantity)) if quantity is not None else None
    if not match:
        return None
    return float(match.group(1)) / (1000 if match.group(2) else 1)


def memory_mib(quantity: object) -> float | None:
    """A memory quantity in MiB; None where absent or not one."""
    match = _MEMORY.match(str(quantity)) if quantity is not None else None
    return float(match.group(1)) * _BYTES[match.group(2)] / (1 << 20) if match else None
