"""JSON reports under `reports/`: every step leaves one, and the summary reads them back."""

from __future__ import annotations

import json
import platform
import time
from pathlib import Path
from typing import Any

from slipway import atomic
from slipway.paths import REPORTS_DIR


def machine() -> dict[str, Any]:
    """What the figures in a report were measured on: numbers only mean something beside this."""
    import os

    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "cpu_idle": cpu_idle(),
    }


def cpu_idle() -> dict[str, str] | None:
    """How this machine's idle CPUs wait (Linux cpuidle), or None where it does not say. A CPU that halts at
    once must be woken before it runs anything, which shows in latencies at low load; a VM's `haltpoll`
    driver polls up to `guest_halt_poll_ns` first (the kernel's default is 200000; 0 turns polling off)."""
    found = {}
    for key, path in (("driver", "/sys/devices/system/cpu/cpuidle/current_driver"),
                      ("governor", "/sys/devices/system/cpu/cpuidle/current_governor_ro"),
                      ("guest_halt_poll_ns", "/sys/module/haltpoll/parameters/guest_halt_poll_ns")):
        try:
            found[key] = Path(path).read_text().strip()
        except OSError:
            continue
    return found or None


def write_report(name: str, payload: dict[str, Any], reports_dir: Path | None = None) -> Path:
    """Write `reports/<name>.json` atomically, stamped with the time and the machine."""
    path = Path(reports_dir or REPORTS_DIR) / f"{name}.json"
    stamped = {"report": name, "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "machine": machine()}
    stamped.update(payload)
    atomic.write_json(path, stamped)
    return path


def read_report(name: str, reports_dir: Path | None = None) -> dict[str, Any] | None:
    """Read `reports/<name>.json`, or None when that step has not run yet."""
    path = Path(reports_dir or REPORTS_DIR) / f"{name}.json"
    if not path.exists():
        return None
    return json.loads(path.read_text())
