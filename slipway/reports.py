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
    }


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
