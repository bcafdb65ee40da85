"""One session per padded row count: a GPU session that meets a single input shape never re-plans its kernels.

ONNX Runtime's CUDA convolutions (cuDNN 9's frontend) keep the plan of the last input shape they ran, not one per
shape: a run whose shape differs from the previous run's builds every convolution's execution plan again (with
cudnn_conv_algo_search EXHAUSTIVE, timing every candidate kernel), on the request path. Merged runs padded to
buckets of 1, 2, 4, ... 32 rows on one session flip shapes at almost every run under concurrent load, and warm-up
cannot help, since nothing is cached per shape (the figures: docs/benchmarks.md, "GPU"). Here every bucket gets a
session of its own, so each session sees one shape from its first run on, tuned once at warm-up; a CUDA graph per
bucket can then be captured too (`cuda.enable_cuda_graph`: each graph session's runs take turns, `SessionRunner`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from engine.providers import CUDA
from engine.runner import SessionRunner
from engine.session import create_session
from slipway.runtime_settings import RuntimeSettings

logger = logging.getLogger(__name__)


class BucketError(RuntimeError):
    """A run of a row count that no bucket session was built for (the runtime pads every run to a bucket first)."""


def per_bucket(config: RuntimeSettings, buckets: Sequence[int], providers: Sequence[str]) -> bool:
    """Whether runs get a session per bucket: as `session_per_bucket` says, else (unset) where runs are padded to
    several buckets and the session runs on CUDA first (on the CPU a change of shape costs nothing worth another copy
    of the model; TensorRT builds one engine over every bucket from its profile, and an engine per session would take
    minutes each)."""
    if len(buckets) < 2:
        return False
    if config.session_per_bucket is not None:
        return config.session_per_bucket
    return runs_on_cuda(providers)


def runs_on_cuda(providers: Sequence[str]) -> bool:
    """Whether a session with these providers (as it reports them, in order) runs on CUDA first."""
    return bool(providers) and providers[0] == CUDA


class BucketRunner:
    """Runs each padded run on the session of its row count. Every run slot (thread) gets a set of bucket sessions of
    its own where `copies` were built, so that a run never waits for another slot's run of the same size (a graph
    session's runs take turns) and each session meets one thread; threads beyond the copies share the first set.
    Reads like a `SessionRunner` (the first session's device and options) to the rest of the runtime; warm-up goes
    through `run` on each run slot's thread, so every session is warmed at its own shape by the thread that runs it."""

    def __init__(self, copies: list[dict[int, SessionRunner]]):
        if not copies or not all(copies) or any(copy.keys() != copies[0].keys() for copy in copies):
            raise ValueError("a BucketRunner needs one or more sets of sessions for the same buckets")
        self.copies = [dict(sorted(copy.items())) for copy in copies]
        first = next(iter(self.copies[0].values()))
        self.session, self.device, self.device_id = first.session, first.device, first.device_id
        self.uses_io_binding = first.uses_io_binding
        self.fixed_outputs = any(runner.fixed_outputs for copy in self.copies for runner in copy.values())
        self._claimed = 0
        self._claim_lock = threading.Lock()
        self._local = threading.local()

    @property
    def buckets(self) -> list[int]:
        return list(self.copies[0])

    def run(self, output_names: list[str], feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        rows = next(iter(feeds.values())).shape[0] if feeds else 0
        runner = self._sessions().get(rows)
        if runner is None:
            raise BucketError(
                f"a run of {rows} rows, but sessions were built for {self.buckets} rows only: "
                "runs must be padded to batch_buckets first (wrappers.running.batching.run_in_buckets)"
            )
        return runner.run(output_names, feeds)

    def _sessions(self) -> dict[int, SessionRunner]:
        """This thread's set: the next unclaimed copy at its first run, else the first (shared)."""
        mine = getattr(self._local, "sessions", None)
        if mine is None:
            with self._claim_lock:
                index = self._claimed if self._claimed < len(self.copies) else 0
                self._claimed += 1
            mine = self._local.sessions = self.copies[index]
        return mine

    def parts(self) -> tuple[BucketRunner, ...]:
        """Itself: warm-up runs every bucket through `run`, each on this thread's session of that size."""
        return (self,)


def build(model_path: Path, config: RuntimeSettings, buckets: Sequence[int], copies: int = 1) -> BucketRunner:
    """A session for each bucket, `copies` times (one set per run slot), built as `config` says."""
    sets = [
        {rows: SessionRunner(create_session(model_path, config), io_binding=config.io_binding) for rows in buckets}
        for _ in range(max(1, copies))
    ]
    logger.info(
        "%s: one session per bucket %s for each of %d run slot(s) (each meets one input shape)",
        model_path.name,
        list(buckets),
        len(sets),
    )
    return BucketRunner(sets)
