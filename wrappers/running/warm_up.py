"""Warm-up: run a fresh session at the sizes `wrappers.running.planning` chose, before the model reports ready.

First runs are slow, so every run slot warms up on its own thread: measured on an H200, the first run of
each batch size on each new thread cost about a second (ONNX Runtime's CUDA provider keeps per-thread
state), and a server warmed on its loading thread alone stalled for seconds under its first concurrent
load. The fastest run also tells how long a row takes, which decides whether small requests run inline
on the event loop (`run_planning.runs_inline`).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Sequence

import numpy as np

from engine.runner import SessionRunner
from engine.tensor_specs import TensorSpec
from slipway.v2_wire import BYTES, V2_TO_NUMPY
from wrappers.running.bucket_sessions import BucketRunner
from wrappers.running.planning import warm_up_shape
from wrappers.running.width import WidthRunner

logger = logging.getLogger(__name__)


class WarmUpError(RuntimeError):
    """A warm-up run failed; the message names the batch size and the settings to change."""


def zeros(spec: TensorSpec, rows: int) -> np.ndarray:
    """A warm-up feed for one input: `rows` rows of zeros (empty strings for BYTES)."""
    shape = warm_up_shape(spec.shape, rows)
    if spec.datatype == BYTES:
        return np.full(shape, "", dtype=object)
    return np.zeros(shape, dtype=V2_TO_NUMPY[spec.datatype])


class WarmUp:
    """Warms a session at fixed sizes, on whichever thread calls `run`, and keeps the slowest per-row time."""

    def __init__(self, model: str, inputs: list[TensorSpec], output_names: list[str], sizes: Sequence[int], runs: int):
        self._model, self._inputs, self._output_names = model, inputs, output_names
        self._sizes, self._runs = list(sizes), runs
        self._lock = threading.Lock()  # run slots warm up side by side
        self._one_at_a_time = threading.Lock()
        self.seconds_per_row: float | None = None

    def run(self, runner: SessionRunner | WidthRunner | BucketRunner) -> None:
        """Warm every part of `runner` on the calling thread. Where runs replay CUDA graphs the run slots warm up in
        turn: a graph is captured at a slot's first runs, and another thread's CUDA calls during a capture would
        break it."""
        with self._one_at_a_time if runner.fixed_outputs else contextlib.nullcontext():
            for part in runner.parts():
                self._run(part)

    def _run(self, runner: SessionRunner | BucketRunner) -> None:
        for rows in self._sizes if self._runs else []:
            feeds = {spec.name: zeros(spec, rows) for spec in self._inputs}
            timings = []
            try:
                for _ in range(self._runs + 1):  # the first run is the slow one; time the rest
                    started = time.perf_counter()
                    runner.run(self._output_names, feeds)
                    timings.append(time.perf_counter() - started)
            except Exception as err:
                raise WarmUpError(
                    f"warm-up at batch size {rows} failed ({err}); set "
                    "parameters.extra.warmup_batch_sizes to sizes the graph accepts, or warmup_runs to 0"
                ) from err
            per_row = min(timings[1:]) / rows  # the largest per-row time decides: inline must stay cheap
            with self._lock:
                self.seconds_per_row = max(per_row, self.seconds_per_row or 0.0)
            logger.info(
                "warmed up %s at batch size %d: %.3f ms per run (first %.0f ms, thread %s)",
                self._model,
                rows,
                1000 * min(timings[1:]),
                1000 * timings[0],
                threading.current_thread().name,
            )
