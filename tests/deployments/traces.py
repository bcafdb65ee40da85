"""Synthetic usage histories with known answers, as Prometheus query_range responses."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

STEP_S = 300.0
DAY_S = 86400.0
START = 1_700_000_000.0
MIB = 2**20


def times(days: float, step_s: float = STEP_S) -> np.ndarray:
    return START + np.arange(0, days * DAY_S, step_s)


def matrix(series: dict[str, tuple[np.ndarray, np.ndarray]], labels: dict | None = None) -> dict:
    """A query_range response: one series per pod (a pod named "" gets no pod label)."""
    result = []
    for pod, (stamps, values) in series.items():
        metric = {**(labels or {}), **({"pod": pod} if pod else {})}
        result.append({"metric": metric, "values": [[float(t), f"{v:.6g}"] for t, v in zip(stamps, values)]})
    return {"status": "success", "data": {"resultType": "matrix", "result": result}}


def write(folder: Path, name: str, data: dict) -> Path:
    path = Path(folder) / f"{name}.json"
    path.write_text(json.dumps(data))
    return path


def diurnal(stamps: np.ndarray, low: float, high: float) -> np.ndarray:
    phase = 2 * math.pi * (stamps - START) / DAY_S
    return low + (high - low) * (0.5 + 0.5 * np.sin(phase))
