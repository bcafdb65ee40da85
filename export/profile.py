"""Where the time goes inside one variant: ONNX Runtime's profiler, summed per operator type.

The trace is kept (Chrome trace-event JSON: open it in https://ui.perfetto.dev or
chrome://tracing) so one slow node can be looked at in context; the table answers the
first question, which operators to attack.
"""

from __future__ import annotations

import json
import tempfile
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from slipway import atomic
from slipway.artifact import MODEL_FILE, load_input_example, verify_artifact

WARMUP_RUNS = 5


@dataclass(frozen=True)
class OperatorTime:
    op_type: str
    calls: int
    total_us: float
    share: float  # of all kernel time

    @property
    def mean_us(self) -> float:
        return self.total_us / self.calls


def operator_times(trace: list[dict], *, skip_runs: int = 0) -> list[OperatorTime]:
    """Kernel time per operator type from an ORT trace, largest first, leaving out the first `skip_runs` runs."""
    runs = sorted(event["ts"] for event in trace if event.get("cat") == "Session" and event.get("name") == "model_run")
    since = runs[skip_runs] if skip_runs < len(runs) else 0
    totals: dict[str, float] = defaultdict(float)
    calls: dict[str, int] = defaultdict(int)
    for event in trace:
        if event.get("cat") == "Node" and event.get("name", "").endswith("_kernel_time") and event.get("ts", 0) >= since:
            op_type = event.get("args", {}).get("op_name", "?")
            totals[op_type] += float(event.get("dur", 0))
            calls[op_type] += 1
    grand = sum(totals.values()) or 1.0
    return sorted((OperatorTime(op, calls[op], totals[op], totals[op] / grand) for op in totals), key=lambda t: -t.total_us)


def _feeds(artifact: Path, batch_size: int) -> dict[str, np.ndarray]:
    inputs, _, _ = load_input_example(artifact)
    return {name: np.resize(array, (batch_size, *array.shape[1:])) for name, array in inputs.items()}


def profile_artifact(artifact: Path, trace_path: Path, *, batch_size: int, runs: int) -> list[OperatorTime]:
    """Profile `runs` calls at `batch_size` on the artifact's own example rows; keep the trace at `trace_path`."""
    import onnxruntime as ort

    from engine.providers import choose_providers
    from engine.session import session_options
    from slipway.runtime_settings import RuntimeSettings

    verify_artifact(artifact)
    feeds = _feeds(artifact, batch_size)
    settings = RuntimeSettings(providers=["CPUExecutionProvider"])
    options = session_options(settings)
    with tempfile.TemporaryDirectory(prefix="slipway-profile-") as tmp:
        options.enable_profiling = True
        options.profile_file_prefix = str(Path(tmp) / "ort")
        session = ort.InferenceSession(
            str(artifact / MODEL_FILE), sess_options=options, providers=choose_providers(settings.providers)
        )
        for _ in range(WARMUP_RUNS + runs):
            session.run(None, feeds)
        written = Path(session.end_profiling())
        data = written.read_bytes()
    trace = json.loads(data)
    atomic.write_bytes(trace_path, data)
    return operator_times(trace, skip_runs=WARMUP_RUNS)
