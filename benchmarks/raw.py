"""The limit: ONNX Runtime's `session.run` in this process, with nothing around it."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypedDict

import numpy as np

from engine.providers import CPU
from engine.session import create_session
from slipway.runtime_settings import RuntimeSettings

MAX_RUNS = 100_000


def rows_per_second(session, feeds: dict[str, np.ndarray], seconds: float) -> tuple[float, float]:
    """Rows per second of back-to-back runs for `seconds` (after one untimed run), and CPU ms per row."""
    rows = next(iter(feeds.values())).shape[0]
    session.run(None, feeds)
    runs, started, cpu_before = 0, time.perf_counter(), time.process_time()
    while time.perf_counter() - started < seconds and runs < MAX_RUNS:
        session.run(None, feeds)
        runs += 1
    return rows * runs / (time.perf_counter() - started), 1000 * (time.process_time() - cpu_before) / (rows * runs)


# ONNX Runtime's three ways for intra-op threads to wait: asleep, spinning while a run is in flight, always spinning.
class Spinning(TypedDict, total=False):
    """The `RuntimeSettings` fields that set one way of waiting."""

    spin_within_runs: bool
    allow_spinning: bool


SPINNING: dict[str, Spinning] = {
    "never": {"spin_within_runs": False},
    "within runs": {"spin_within_runs": True},
    "always": {"allow_spinning": True},
}


def measure_raw(
    onnx_path: Path,
    input_name: str,
    row: np.ndarray,
    *,
    batch_sizes: list[int],
    seconds: float,
    on_step=None,
    providers: tuple[str, ...] = (CPU,),
) -> list[dict]:
    """Rows/s at each batch size, with intra-op threads in each of the `SPINNING` ways: the limit is the best of all.
    On the CPU unless `providers` say otherwise: on a GPU host, ONNX Runtime's own choice would be the GPU."""
    results = []
    for spinning in SPINNING:
        session = create_session(onnx_path, RuntimeSettings(providers=list(providers), **SPINNING[spinning]))
        for batch in batch_sizes:
            feeds = {input_name: np.repeat(row, batch, axis=0)}
            speed, cpu_ms = rows_per_second(session, feeds, seconds)
            results.append(
                {"batch": batch, "spinning": spinning, "rows_per_s": round(speed, 2), "cpu_ms_per_row": round(cpu_ms, 4)}
            )
            if on_step:
                on_step()
    return results


def raw_turn(
    onnx_path: Path, input_name: str, row: np.ndarray, *, setting: dict, seconds: float, providers: tuple[str, ...] = (CPU,)
) -> Callable[[], tuple[float, float]]:
    """A timer of one raw setting (a `measure_raw` result's `batch` and `spinning`): each call, its rows/s
    over `seconds` and its CPU ms per row, for ratios to a load measured beside it in time."""
    session = create_session(onnx_path, RuntimeSettings(providers=list(providers), **SPINNING[setting["spinning"]]))
    feeds = {input_name: np.repeat(row, setting["batch"], axis=0)}

    def turn() -> tuple[float, float]:
        speed, cpu_ms = rows_per_second(session, feeds, seconds)
        return round(speed, 2), round(cpu_ms, 4)

    return turn


def measure_side_by_side(
    onnx_path: Path,
    input_name: str,
    row: np.ndarray,
    *,
    batch: int,
    callers: int,
    seconds: float,
    providers: tuple[str, ...] = (CPU,),
) -> float:
    """Rows/s of `callers` threads running one single-threaded session side by side (not the issue's limit)."""
    session = create_session(onnx_path, RuntimeSettings(providers=list(providers), intra_op_threads=1))
    feeds = {input_name: np.repeat(row, batch, axis=0)}
    results: list[float] = []
    threads = [
        threading.Thread(target=lambda: results.append(rows_per_second(session, feeds, seconds)[0])) for _ in range(callers)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return round(sum(results), 2)
