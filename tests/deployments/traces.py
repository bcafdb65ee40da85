"""Synthetic usage histories with known answers, as Prometheus query_range responses."""

from __future__ import annotations

import json
import math
import zlib
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


def daily_sine(stamps: np.ndarray, low: float, high: float, peak_hour: float) -> np.ndarray:
    """A daily sine from `low` to `high` requests/s, highest at `peak_hour` UTC and lowest twelve hours away."""
    phase = 2 * math.pi * (hour_of_day(stamps) - peak_hour) / 24
    return low + (high - low) * (0.5 + 0.5 * np.cos(phase))


def hour_of_day(stamps: np.ndarray) -> np.ndarray:
    """UTC hours (fractional) of each timestamp."""
    return (stamps % DAY_S) / 3600


def weekday(stamps: np.ndarray) -> np.ndarray:
    """UTC weekday of each timestamp, Monday 0 (1970-01-01 was a Thursday)."""
    return ((stamps // DAY_S).astype(int) + 3) % 7


def daily_peak(
    stamps: np.ndarray, base: float, peak: float, start_hour: float, end_hour: float, weekdays: tuple[int, ...] = tuple(range(7))
) -> np.ndarray:
    """`base` requests/s, `peak` from start_hour to end_hour UTC on `weekdays` (Monday 0)."""
    hours = hour_of_day(stamps)
    busy = (hours >= start_hour) & (hours < end_hour) & np.isin(weekday(stamps), weekdays)
    return np.where(busy, peak, base)


def noisy(values: np.ndarray, spread: float, seed: int = 0) -> np.ndarray:
    """Multiplicative log-normal noise: each sample off by about `spread` (0.2 = 20%)."""
    return values * np.random.default_rng(seed).lognormal(0.0, spread, values.shape)


def bursts(stamps: np.ndarray, base: float, factor: float, seed: int = 0) -> np.ndarray:
    """Noisy `base` with one hour a day at `factor` x, at a random hour each day: load with no daily pattern."""
    rng = np.random.default_rng(seed)
    values = noisy(np.full(stamps.shape, float(base)), 0.2, seed)
    day = ((stamps - stamps[0]) // DAY_S).astype(int)
    for index in np.unique(day):
        start = stamps[0] + index * DAY_S + rng.integers(0, 23) * 3600
        values[(stamps >= start) & (stamps < start + 3600)] *= factor
    return values


def without_day(stamps: np.ndarray, values: np.ndarray, date: str) -> tuple[np.ndarray, np.ndarray]:
    """The history less every sample of one UTC date (YYYY-MM-DD): a day the scrapes missed."""
    import datetime as dt

    start = dt.datetime.fromisoformat(date).replace(tzinfo=dt.UTC).timestamp()
    keep = (stamps < start) | (stamps >= start + DAY_S)
    return stamps[keep], values[keep]


def dcgm(
    metric: str,
    cards: dict[tuple[str, int], tuple[np.ndarray, np.ndarray]],
    *,
    namespace: str = "slipway",
    container: str = "digits",
    host: str = "node-1",
    pod_label: str = "pod",
) -> list[dict]:
    """DCGM exporter series as query_range `result` items, one per (pod, gpu index), labelled as the exporter labels
    them in its Kubernetes mode (`pod_label` "exported_pod": as Prometheus relabels them without honor_labels)."""
    prefix = "exported_" if pod_label == "exported_pod" else ""
    result = []
    for (pod, index), (stamps, values) in cards.items():
        metric_labels = {
            "__name__": metric,
            "gpu": str(index),
            "UUID": f"GPU-{zlib.crc32(f'{pod}/{index}'.encode()):08x}",
            "Hostname": host,
            "modelName": "NVIDIA L4",
            "device": f"nvidia{index}",
            f"{prefix}pod": pod,
            f"{prefix}namespace": namespace,
            f"{prefix}container": container,
        }
        if prefix:
            metric_labels.update(pod="dcgm-exporter-x1", namespace="gpu-operator", container="nvidia-dcgm-exporter")
        result.append({"metric": metric_labels, "values": [[float(t), f"{v:.6g}"] for t, v in zip(stamps, values)]})
    return result


def dcgm_answer(*results: list[dict]) -> dict:
    """One query_range answer holding the given DCGM series (used and free memory go into one)."""
    return {"status": "success", "data": {"resultType": "matrix", "result": [item for items in results for item in items]}}
