"""The load shape Locust runs: constant, step (until saturation), spike or soak, as the job says.

`PlannedShape` is the one `LoadTestShape` the locustfiles expose: it follows
`loadtest.planner.StagePlanner`, cuts each stage's figures out of Locust's totals and
writes them to the job's steps file after every stage, so a killed run keeps its steps. When
Locust quits, it adds the whole run's histogram, which the runner takes the run's percentiles
from (the CSV's are whole milliseconds).
Only Locust's own process imports this module (importing locust monkey-patches gevent).
"""

from __future__ import annotations

import functools
import time

import locust
import locust.runners
import locust.stats
from locust import LoadTestShape

from loadtest.config import Stage, current_job
from loadtest.planner import ServerCpu, StagePlanner
from loadtest.steps import Snapshot, StepFigures, bucket_ms, figures_between
from slipway import atomic

# With --processes the master only sees what workers report, every 3 s by default: report
# often enough that a step's boundaries blur by at most half a second.
locust.runners.WORKER_REPORT_INTERVAL = 0.5

# Locust's documented hook for its histogram's keys: whole ms below 100 ms would read a
# 0.4 ms server as 0 ms. Keep two significant digits below 1 ms, Locust's rounding above.
# Every Locust process loads a locustfile, and with it this module (--processes workers
# fork after loading it), so the processes that count requests all bucket this way.
# Locust annotates the hook `-> int` (and the histogram's keys `int`), narrower than the custom bucketing its docs
# describe: ours keys requests below 1 ms by fractions of a ms (0.44), which Locust's dict of counts takes as it is.
locust.stats.bucket_response_time = functools.partial(  # type: ignore[assignment]
    bucket_ms, coarse=locust.stats.bucket_response_time
)


class PlannedShape(LoadTestShape):
    """Runs the job's shape stage by stage and records each stage's figures."""

    def __init__(self) -> None:
        super().__init__()
        self.job = current_job()
        self.planner = StagePlanner(self.job.shape)
        self.cpu = ServerCpu(self.job.watch_pid)
        self.done: list[StepFigures] = []
        self.stage: Stage | None = None
        self.stage_ends_at = 0.0
        self.opened: Snapshot | None = None
        self.hard_stop_s = self.job.shape.planned_max_s() + 30
        self.finished = False
        locust.events.quit.add_listener(self._record_whole_run)

    def tick(self) -> tuple[int, float] | None:
        now = self.get_run_time()
        if self.stage is None or now >= self.stage_ends_at:
            if self.stage is not None:
                self._close_stage(self.stage)
            self.stage = self.planner.next_stage(self.done) if now < self.hard_stop_s else None
            if self.stage is None:
                self.finished = True
                self._write(final=True)
                return None
            self.stage_ends_at = now + self.stage.duration_s
            self.opened = None
            return _tick_value(self.stage)
        if self.opened is None:
            # Measure from the first tick after the users changed: the ramp is not the step.
            self.opened = self._snapshot()
        return _tick_value(self.stage)

    def _snapshot(self) -> Snapshot:
        total = self._runner().stats.total
        return Snapshot(
            at_s=time.perf_counter(),
            requests=total.num_requests,
            failures=total.num_failures,
            response_times=_histogram(total),
            cpu_s=self.cpu.seconds(),
        )

    def _runner(self) -> locust.runners.Runner:
        if self.runner is None:
            raise RuntimeError("the load shape has no Locust runner: Locust attaches one before it calls tick()")
        return self.runner

    def _close_stage(self, stage: Stage) -> None:
        if self.opened is None:
            return  # too short to measure: no tick fell inside it
        figures = figures_between(
            self.opened,
            self._snapshot(),
            index=len(self.done),
            name=stage.name,
            users=stage.users,
            origin_s=self.start_time,
        )
        self.done.append(figures)
        self._write(final=False)

    def _record_whole_run(self, **_) -> None:
        """On Locust's quit (all users stopped, workers' last reports in): the whole run's histogram, ramps included."""
        if isinstance(self.runner, locust.runners.WorkerRunner) or self.runner is None:
            return  # a worker's share reaches the master, which records the sum
        if not (self.done or self.finished):
            return  # the shape never wrote its steps: the runner says so
        self._write(final=self.finished, response_times=_histogram(self.runner.stats.total))

    def _write(self, *, final: bool, response_times: dict[float, int] | None = None) -> None:
        saturation = self.planner.saturation(self.done)
        data = {
            "final": final,
            "stopped": self.planner.stop_reason if final else "",
            "steps": [step.as_dict() for step in self.done],
            "saturation": saturation.as_dict() if saturation else None,
        }
        if response_times is not None:
            data["response_times"] = sorted(response_times.items())  # [ms, requests] pairs: JSON keys would be text
        atomic.write_json(self.job.steps_file, data)


def _tick_value(stage: Stage) -> tuple[int, float]:
    """What `tick` returns while `stage` runs: its users, and the rate they start at (all of them within 0.1 s)."""
    return stage.users, float(max(stage.users, 1) * 10)


def _histogram(total: locust.stats.StatsEntry) -> dict[float, int]:
    """A copy of Locust's histogram of response times (ms, as `bucket_ms` keys them) to request counts."""
    return {ms: count for ms, count in total.response_times.items()}
