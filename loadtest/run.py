"""Run Locust headless in its own process, bounded in users and time, and read back what it measured.

Locust gets a job file (endpoint, shape, payload) and writes its CSV and HTML plus a
steps file (one entry per stage and the whole run's histogram, written by `loadtest.shapes`).
The runner only starts, watches and, past the shape's longest possible run, kills it by PID.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

from loadtest.config import JOB_ENV, LoadJob
from loadtest.steps import StepFigures, percentiles
from slipway import atomic
from slipway.paths import PROJECT_ROOT

LOCUSTFILES = {
    "rest": Path(__file__).with_name("locustfile_rest.py"),
    "grpc": Path(__file__).with_name("locustfile_grpc.py"),
}
START_GRACE_S = 30  # start-up, stopping the users and writing the CSV and HTML
MAX_PROCESSES = 64


class LoadTestError(RuntimeError):
    """Locust could not run, or wrote no statistics."""


@dataclass(frozen=True)
class LoadResult:
    """The whole run, ramps included: Locust's Aggregated row, percentiles from the run's own histogram."""

    users: int
    duration_s: float
    requests: int
    failures: int
    rps: float
    p50_ms: float
    p95_ms: float
    p99_ms: float
    avg_ms: float

    @property
    def error_rate(self) -> float:
        return self.failures / self.requests if self.requests else 0.0

    def as_dict(self) -> dict:
        return {**self.__dict__, "error_rate": self.error_rate}


@dataclass
class LoadRun:
    """A finished run: the whole-run aggregate, each stage's figures and where the files are."""

    aggregate: LoadResult
    steps: list[StepFigures]
    stopped: str
    saturation: dict | None
    files: dict[str, str] = field(default_factory=dict)


def run_locust(job: LoadJob, out_dir: Path, *, processes: int = 0, show_progress: bool = True) -> LoadRun:
    """Run the job's shape with Locust; `processes` > 0 spreads the users over that many worker processes."""
    if not 0 <= processes <= MAX_PROCESSES:
        raise LoadTestError(f"--processes must be between 0 and {MAX_PROCESSES}, got {processes}")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    job_file = out_dir / "job.json"
    atomic.write_text(job_file, job.model_dump_json(indent=2))
    Path(job.steps_file).unlink(missing_ok=True)
    prefix = out_dir / "locust"
    command = [
        sys.executable,
        "-m",
        "locust",
        "-f",
        str(LOCUSTFILES[job.endpoint.protocol]),
        "--headless",
        "--host",
        job.endpoint.base_url,
        "--csv",
        str(prefix),
        "--html",
        str(out_dir / "locust.html"),
        "--only-summary",
        "--loglevel",
        "WARNING",
        "--exit-code-on-error",
        "0",
        "--stop-timeout",
        "5",
    ]
    if processes:
        command += ["--processes", str(processes)]
    env = {**os.environ, JOB_ENV: str(job_file)}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PROJECT_ROOT), env.get("PYTHONPATH")]))
    limit_s = job.shape.planned_max_s() + START_GRACE_S
    log_path = out_dir / "locust.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            _wait(process, job, limit_s, show_progress)
        finally:
            _kill_group(process)  # also once Locust is done: its --processes workers can outlive it
    if process.returncode != 0:
        tail = log_path.read_text(errors="replace")[-2000:]
        raise LoadTestError(f"locust exited with code {process.returncode} (log: {log_path}):\n{tail}")
    steps = read_steps(Path(job.steps_file))
    users = max((step.users for step in steps["steps"]), default=job.shape.users)
    aggregate = read_stats(Path(f"{prefix}_stats.csv"), users=users, response_times=steps["response_times"])
    return LoadRun(
        aggregate=aggregate,
        steps=steps["steps"],
        stopped=steps["stopped"],
        saturation=steps["saturation"],
        files={
            "locust_csv": f"{prefix}_stats.csv",
            "locust_failures": f"{prefix}_failures.csv",
            "locust_html": str(out_dir / "locust.html"),
            "locust_log": str(log_path),
            "job": str(job_file),
        },
    )


def no_answer(run: LoadRun) -> str | None:
    """Why a run measured nothing of the server (no request completed, or every one failed); None if it answered.

    Such a run says the target is wrong or down, not how fast it is: its figures are the failures'.
    """
    result = run.aggregate
    if result.requests == 0:
        return "the server completed no request in the whole run (is it up, and answering within --request-timeout?)"
    if result.failures < result.requests:
        return None
    common = most_common_failure(Path(run.files.get("locust_failures", "")))
    return f"the server answered none of the {result.requests} requests" + (f" (most failed with {common})" if common else "")


def most_common_failure(failures_csv: Path) -> str | None:
    """The error Locust counted most often in its `_failures.csv`, e.g. `POST infer: LocustBadStatusCode(code=501)`."""
    try:
        with open(failures_csv, newline="") as handle:
            rows = list(csv.DictReader(handle))
        top = max(rows, key=lambda row: int(row.get("Occurrences") or 0), default=None)
    except (OSError, ValueError, csv.Error):
        return None
    return f"{top['Method']} {top['Name']}: {top['Error']}" if top and top.get("Error") else None


def _wait(process: subprocess.Popen, job: LoadJob, limit_s: float, show_progress: bool) -> None:
    """Wait for Locust, showing the current step; kill it past the shape's longest possible run."""
    planned = job.shape.planned_max_s()
    started = time.monotonic()
    label = f"locust: {job.shape.kind} load, {job.endpoint.protocol}"
    with Progress(
        TextColumn("{task.description}"), BarColumn(), TimeRemainingColumn(), transient=True, disable=not show_progress
    ) as progress:
        task = progress.add_task(label, total=planned)
        while process.poll() is None:
            elapsed = time.monotonic() - started
            if elapsed > limit_s:
                _kill_group(process)
                raise LoadTestError(f"locust ran past {limit_s:.0f} s and was killed")
            progress.update(task, completed=min(planned, elapsed), description=f"{label} {_latest_step(job)}")
            time.sleep(0.25)


def _latest_step(job: LoadJob) -> str:
    try:
        steps = json.loads(Path(job.steps_file).read_text())["steps"]
    except (OSError, ValueError, KeyError):
        return ""
    if not steps:
        return ""
    last = steps[-1]
    return f"({last['name']}: {last['users']} users, {last['rps']:.0f} req/s, p95 {last['p95_ms'] or 0:g} ms)"


def _kill_group(process: subprocess.Popen) -> None:
    """Locust with --processes has children: stop the whole group we started, by its leader's PID."""
    import signal

    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait()


def read_steps(path: Path) -> dict:
    """The stages Locust's shape measured and the whole run's histogram (see `loadtest.shapes.PlannedShape`)."""
    if not path.is_file():
        raise LoadTestError(f"the load shape wrote no steps ({path} is missing); see locust.log")
    data = json.loads(path.read_text())
    if "response_times" not in data:
        raise LoadTestError(
            f"the load shape recorded no whole-run histogram in {path}: Locust stopped before its quit event; see locust.log"
        )
    data["steps"] = [StepFigures.from_dict(step) for step in data["steps"]]
    data["response_times"] = {float(ms): int(count) for ms, count in data["response_times"]}
    return data


def read_stats(stats_csv: Path, *, users: int, response_times: dict[float, int]) -> LoadResult:
    """The Aggregated row of Locust's `_stats.csv`, with the percentiles of `response_times` (ms -> requests).

    The CSV writes percentiles as whole milliseconds, which reads a 0.4 ms server as 0 ms; the run's
    histogram keeps two significant digits below 1 ms (`loadtest.steps.bucket_ms`).
    """
    if not stats_csv.is_file():
        raise LoadTestError(f"locust wrote no statistics ({stats_csv} is missing)")
    with open(stats_csv, newline="") as handle:
        rows = [row for row in csv.DictReader(handle) if row["Name"] == "Aggregated"]
    if not rows:
        raise LoadTestError(f"{stats_csv} has no Aggregated row")
    row = rows[0]
    requests = int(row["Request Count"])
    rps = float(row["Requests/s"])

    figures = percentiles(response_times)

    def number(key: str) -> float:
        value = figures[key]
        return value if requests and value is not None else float("nan")

    return LoadResult(
        users=users,
        duration_s=round(requests / rps, 3) if rps else 0.0,
        requests=requests,
        failures=int(row["Failure Count"]),
        rps=rps,
        p50_ms=number("p50_ms"),
        p95_ms=number("p95_ms"),
        p99_ms=number("p99_ms"),
        avg_ms=float(row["Average Response Time"]),
    )
