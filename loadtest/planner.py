"""Which stage of load comes next, from what was measured so far: pure, testable without Locust.

The step shape rises until throughput saturates (perf_analyzer / Model Analyzer's rule),
a step breaks the SLO's latency limits, or max users is reached; the other shapes run a
fixed list of stages. Every shape stops early when the server stops answering.
"""

from __future__ import annotations

from loadtest.config import ShapeSpec, Stage
from loadtest.steps import Saturation, StepFigures, is_saturated, saturation_point
from slipway import slo as slo_gate

ERROR_RATE_STOP = 0.5  # a step failing half its requests means the server is down, not saturated


class StagePlanner:
    """The next stage to run, or None with the reason the run stops."""

    def __init__(self, spec: ShapeSpec):
        self.spec = spec
        # The step shape's users, step by step (it has no fixed stages); every other shape's stages, fixed up front.
        self.levels: list[int] = spec.step_users() if spec.kind == "step" else []
        self.fixed: list[Stage] | None = None if spec.kind == "step" else spec.fixed_stages()
        self.stop_reason = ""

    def next_stage(self, done: list[StepFigures]) -> Stage | None:
        spec = self.spec
        if done and done[-1].requests == 0:
            self.stop_reason = f"{done[-1].name} completed no request: the server does not answer (or needs longer steps)"
            return None
        if done and done[-1].error_rate >= ERROR_RATE_STOP:
            self.stop_reason = f"{done[-1].name} failed {done[-1].error_rate:.0%} of its requests"
            return None
        if self.fixed is not None:
            if len(done) < len(self.fixed):
                return self.fixed[len(done)]
            self.stop_reason = "all stages ran"
            return None
        if is_saturated(done, window=spec.gain_window, min_gain=spec.min_gain):
            self.stop_reason = "saturated: " + saturation_point(done, window=spec.gain_window, min_gain=spec.min_gain).reason
            return None
        if spec.stop_slo is not None and done:
            broken = slo_gate.breaches(spec.stop_slo, done[-1].as_dict(), latency_only=True)
            if broken:
                self.stop_reason = f"{done[-1].name} broke the SLO ({broken[0].message()}); more load only adds latency"
                return None
        if len(done) >= len(self.levels):
            self.stop_reason = f"reached max users ({self.levels[-1]})"
            return None
        users = self.levels[len(done)]
        return Stage(name=f"step {len(done) + 1}", users=users, duration_s=spec.step_s)

    def saturation(self, done: list[StepFigures]) -> Saturation | None:
        if self.spec.kind != "step":
            return None
        return saturation_point(done, window=self.spec.gain_window, min_gain=self.spec.min_gain)


class ServerCpu:
    """CPU seconds used so far by a local server's process tree (MLServer workers included)."""

    def __init__(self, pid: int | None):
        import psutil

        self._process = psutil.Process(pid) if pid else None
        self._psutil = psutil

    def seconds(self) -> float | None:
        if self._process is None:
            return None
        total = 0.0
        try:
            for process in [self._process, *self._process.children(recursive=True)]:
                times = process.cpu_times()
                total += times.user + times.system
        except self._psutil.Error:
            return None
        return total
