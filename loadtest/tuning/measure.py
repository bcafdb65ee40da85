"""Measure one serving config for real: serve it, step the load up until saturation or the SLO breaks.

The figure of merit is throughput per CPU core at the config's capacity: the step with the
most requests/s whose latency and errors hold the SLO, divided by the CPU cores the
server's process tree burned during that step. On a GPU provider it is rows/s per GPU
instead (one GPU per trial's server): the card, not the cores, is what a GPU replica pays for.
A config with no such step is infeasible.
"""

from __future__ import annotations

import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Protocol

from loadtest.config import LoadJob, ShapeSpec, parse_host
from loadtest.config import Protocol as WireProtocol
from loadtest.tuning.space import SearchSpace, ServingConfig, apply_config
from slipway.slo import Slo

ROWS_PER_REQUEST = 1  # LiveMeasurer's payloads: one row each
GPUS_PER_TRIAL = 1  # a trial's server runs on one GPU (device 0)


def objective_text(gpu: bool) -> str:
    """What a search maximizes, in words: per core on the CPU, per GPU on GPUs."""
    if gpu:
        return "rows/s per GPU at the highest load whose latency and errors hold the SLO"
    return "requests/s per server CPU core at the highest load whose latency and errors hold the SLO"


@dataclass(frozen=True)
class Measurement:
    """What one config achieved; `objective` is requests/s per server CPU core at capacity (0 if infeasible)."""

    config: ServingConfig
    feasible: bool
    reason: str
    capacity_rps: float = 0.0
    p95_ms: float | None = None
    p99_ms: float | None = None
    cpu_cores: float | None = None
    users: int | None = None
    memory_bytes: int | None = None
    violation: float = 0.0  # how far the lightest step was past the SLO (0 when feasible)
    steps: list[dict] = field(default_factory=list)

    @property
    def objective(self) -> float:
        if not self.feasible:
            return 0.0
        if self.config.on_gpu:
            return self.capacity_rps * ROWS_PER_REQUEST / GPUS_PER_TRIAL
        return self.capacity_rps / self.cpu_cores if self.cpu_cores else 0.0

    def as_dict(self) -> dict:
        data = asdict(self)
        data["config"] = self.config.model_dump()
        data["key"] = self.config.key
        data["objective"] = round(self.objective, 3)
        return data

    @classmethod
    def from_dict(cls, data: dict) -> Measurement:
        fields = {name for name in cls.__dataclass_fields__}
        values = {key: value for key, value in data.items() if key in fields}
        values["config"] = ServingConfig(**data["config"])
        return cls(**values)


class Measurer(Protocol):
    def measure(self, config: ServingConfig) -> Measurement: ...


def judge_steps(config: ServingConfig, steps: list[dict], slo: Slo, memory_bytes: int | None = None) -> Measurement:
    """A config's measurement from its load steps: capacity at the SLO, or why it has none."""
    from slipway import slo as gate

    measured = [step for step in steps if step.get("requests")]
    if not measured:
        return Measurement(config, False, "no step completed a request", steps=steps, memory_bytes=memory_bytes)
    best = gate.capacity_step(slo, measured)
    if best is None:
        broken = gate.breaches(slo, measured[0])
        first = broken[0] if broken else None
        violation = (first.measured / first.allowed - 1) if first and first.measured and first.allowed else 1.0
        reason = f"even {measured[0]['users']} user(s) break the SLO: " + ("; ".join(b.message() for b in broken) or "errors")
        return Measurement(config, False, reason, violation=round(violation, 4), steps=steps, memory_bytes=memory_bytes)
    return Measurement(
        config,
        True,
        f"capacity at {best['users']} users",
        capacity_rps=best["rps"],
        p95_ms=best["p95_ms"],
        p99_ms=best["p99_ms"],
        cpu_cores=best["server_cpu_cores"],
        users=best["users"],
        memory_bytes=memory_bytes,
        steps=steps,
    )


class LiveMeasurer:
    """Serves each config with a real MLServer on loopback and drives a real step load at it."""

    def __init__(
        self,
        space: SearchSpace,
        slo: Slo,
        *,
        step_s: float = 3,
        max_users: int = 16,
        protocol: WireProtocol = "rest",
        workdir: Path | None = None,
        show_progress: bool = True,
    ):
        self.space, self.slo, self.protocol = space, slo, protocol
        self.shape = ShapeSpec(kind="step", users=1, step_s=step_s, max_users=max_users, stop_slo=slo)
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix="slipway-tune-"))
        self.show_progress = show_progress
        self.cache: dict[str, Measurement] = {}

    def measure(self, config: ServingConfig) -> Measurement:
        if config.key not in self.cache:
            self.cache[config.key] = self._measure(config)
        return self.cache[config.key]

    def _measure(self, config: ServingConfig) -> Measurement:
        from loadtest.payloads import build_payload
        from loadtest.run import LoadTestError, run_locust
        from slipway import atomic
        from slipway.local_server import LocalServer, ServerError

        trial_dir = self.workdir / config.key
        folder = apply_config(config, self.space.variants[config.variant], trial_dir / "artifact")
        try:
            with LocalServer(folder, parallel_workers=config.parallel_workers) as server:
                base = server.http_url if self.protocol == "rest" else server.grpc_target
                endpoint = parse_host(base, protocol=self.protocol, model=server.model)
                body, described = build_payload(endpoint, batch_size=ROWS_PER_REQUEST, data=None, model_dir=folder)
                payload = trial_dir / "request.bin"
                atomic.write_bytes(payload, body)
                job = LoadJob(
                    endpoint=endpoint,
                    shape=self.shape,
                    payload_file=payload,
                    request_headers=described["headers"],
                    steps_file=trial_dir / "steps.json",
                    watch_pid=server.pid,
                )
                run = run_locust(job, trial_dir / "locust", show_progress=self.show_progress)
                memory = _tree_rss(server.pid)
        except (ServerError, LoadTestError) as err:
            return Measurement(config, False, f"could not be measured: {str(err).splitlines()[0]}", violation=1.0)
        return judge_steps(config, [step.as_dict() for step in run.steps], self.slo, memory)


class TableMeasurer:
    """Answers from measurements already taken (the grid's), so a search sees the very same numbers."""

    def __init__(self, measurements: list[Measurement]):
        self.table = {m.config.key: m for m in measurements}
        self.asked: list[str] = []

    def measure(self, config: ServingConfig) -> Measurement:
        self.asked.append(config.key)
        try:
            return self.table[config.key]
        except KeyError:
            raise KeyError(f"{config.key} was not measured in the grid") from None


def _tree_rss(pid: int | None) -> int | None:
    """Resident memory of the server and its workers, bytes."""
    import psutil

    if not pid:
        return None
    try:
        root = psutil.Process(pid)
        return sum(process.memory_info().rss for process in [root, *root.children(recursive=True)])
    except psutil.Error:
        return None
