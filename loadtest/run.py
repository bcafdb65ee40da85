"""Run Locust headless in its own process, bounded in users and time, and read its CSV back."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

from loadtest.payloads import example_batch, v2_json_body

LOCUSTFILE_REST = Path(__file__).with_name("locustfile_rest.py")
MAX_DURATION_S = 600


class LoadTestError(RuntimeError):
    """Locust could not run, or wrote no statistics."""


@dataclass(frozen=True)
class LoadResult:
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


def run_locust(
    host: str, *, model: str, model_dir: Path, users: int, duration_s: int, batch_size: int = 1, out_dir: Path
) -> LoadResult:
    """Drive `users` concurrent V2 REST users against `host` for `duration_s` seconds."""
    if not 1 <= duration_s <= MAX_DURATION_S:
        raise LoadTestError(f"duration must be between 1 and {MAX_DURATION_S} s, got {duration_s}")
    out_dir.mkdir(parents=True, exist_ok=True)
    payload = Path(tempfile.mkstemp(prefix="slipway-payload-", suffix=".json")[1])
    payload.write_text(json.dumps(v2_json_body(example_batch(model_dir, batch_size))))
    prefix = out_dir / "locust"
    command = [
        sys.executable, "-m", "locust", "-f", str(LOCUSTFILE_REST), "--headless", "--host", host,
        "--users", str(users), "--spawn-rate", str(users), "--run-time", f"{duration_s}s",
        "--stop-timeout", "5", "--csv", str(prefix), "--html", str(out_dir / "locust.html"),
        "--only-summary", "--loglevel", "WARNING", "--exit-code-on-error", "0",
    ]
    env = {"SLIPWAY_MODEL": model, "SLIPWAY_PAYLOAD": str(payload)}

    with open(out_dir / "locust.log", "wb") as log:
        process = subprocess.Popen(command, env={**os.environ, **env}, stdout=log, stderr=subprocess.STDOUT)
        try:
            _wait_with_progress(process, duration_s, f"locust: {users} users for {duration_s} s")
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
            payload.unlink(missing_ok=True)
    if process.returncode != 0:
        tail = (out_dir / "locust.log").read_text(errors="replace")[-2000:]
        raise LoadTestError(f"locust exited with code {process.returncode}:\n{tail}")
    return read_stats(Path(f"{prefix}_stats.csv"), users=users, duration_s=duration_s)


def _wait_with_progress(process: subprocess.Popen, duration_s: int, label: str) -> None:
    grace = 30  # start-up, the stop timeout and writing the CSV
    deadline = time.monotonic() + duration_s + grace
    with Progress(TextColumn(label), BarColumn(), TimeRemainingColumn(), transient=True) as progress:
        task = progress.add_task("load", total=duration_s)
        started = time.monotonic()
        while process.poll() is None:
            if time.monotonic() > deadline:
                process.kill()
                raise LoadTestError(f"locust ran past {duration_s + grace} s and was killed")
            progress.update(task, completed=min(duration_s, time.monotonic() - started))
            time.sleep(0.2)


def read_stats(stats_csv: Path, *, users: int, duration_s: float) -> LoadResult:
    """The Aggregated row of Locust's `_stats.csv`."""
    if not stats_csv.is_file():
        raise LoadTestError(f"locust wrote no statistics ({stats_csv} is missing)")
    with open(stats_csv, newline="") as handle:
        rows = [row for row in csv.DictReader(handle) if row["Name"] == "Aggregated"]
    if not rows:
        raise LoadTestError(f"{stats_csv} has no Aggregated row")
    row = rows[0]
    requests = int(row["Request Count"])
    return LoadResult(
        users=users,
        duration_s=duration_s,
        requests=requests,
        failures=int(row["Failure Count"]),
        rps=float(row["Requests/s"]),
        p50_ms=float(row["50%"]) if requests else float("nan"),
        p95_ms=float(row["95%"]) if requests else float("nan"),
        p99_ms=float(row["99%"]) if requests else float("nan"),
        avg_ms=float(row["Average Response Time"]),
    )
