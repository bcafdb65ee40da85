"""JSON reports under `reports/`: every step leaves one, and the summary reads them back."""

from __future__ import annotations

import json
import platform
import time
from pathlib import Path
from typing import Any

from slipway import atomic
from slipway.paths import REPORTS_DIR


def machine() -> dict[str, Any]:
    """What the figures in a report were measured on: numbers only mean something beside this."""
    import os

    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "cpu_idle": cpu_idle(),
    }


def cpu_idle() -> dict[str, str] | None:
    """How this machine's idle CPUs wait (Linux cpuidle), or None where it does not say. A CPU that halts at
    once must be woken before it runs anything, which shows in latencies at low load; a VM's `haltpoll`
    driver polls up to `guest_halt_poll_ns` first (the kernel's default is 200000; 0 turns polling off)."""
    found = {}
    for key, path in (
        ("driver", "/sys/devices/system/cpu/cpuidle/current_driver"),
        ("governor", "/sys/devices/system/cpu/cpuidle/current_governor_ro"),
        ("guest_halt_poll_ns", "/sys/module/haltpoll/parameters/guest_halt_poll_ns"),
    ):
        try:
            found[key] = Path(path).read_text().strip()
        except OSError:
            continue
    return found or None


def wakeup_round_trip_us(round_trips: int = 2000) -> dict[str, float] | None:
    """Microseconds for one thread to wake another and be woken back (a byte each way through pipes), with
    both on one CPU and on two. Across CPUs each wake-up of an idle CPU is paid in full: a served request
    makes several such hand-offs, so latency at low load moves with this number from host to host.
    None on a machine with one CPU or without CPU affinity."""
    import os
    import threading

    if not hasattr(os, "sched_getaffinity") or len(cpus := sorted(os.sched_getaffinity(0))) < 2:
        return None

    def measure(first: int, second: int) -> float:
        to_echo, from_echo = os.pipe(), os.pipe()
        elapsed: list[float] = []

        def echo() -> None:
            os.sched_setaffinity(0, {second})  # this thread only: Linux applies it to the caller
            for _ in range(round_trips):
                os.read(to_echo[0], 1)
                os.write(from_echo[1], b"x")

        def ping() -> None:
            os.sched_setaffinity(0, {first})
            started = time.perf_counter()
            for _ in range(round_trips):
                os.write(to_echo[1], b"x")
                os.read(from_echo[0], 1)
            elapsed.append(time.perf_counter() - started)

        threads = [threading.Thread(target=echo), threading.Thread(target=ping)]
        try:
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
        finally:
            for fd in (*to_echo, *from_echo):
                os.close(fd)
        return round(elapsed[0] / round_trips * 1e6, 1)

    return {"same_cpu": measure(cpus[0], cpus[0]), "across_cpus": measure(cpus[0], cpus[1])}


def write_report(name: str, payload: dict[str, Any], reports_dir: Path | None = None) -> Path:
    """Write `reports/<name>.json` atomically, stamped with the time and the machine."""
    path = Path(reports_dir or REPORTS_DIR) / f"{name}.json"
    stamped = {"report": name, "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "machine": machine()}
    stamped.update(payload)
    atomic.write_json(path, stamped)
    return path


def read_report(name: str, reports_dir: Path | None = None) -> dict[str, Any] | None:
    """Read `reports/<name>.json`, or None when that step has not run yet.

    A damaged report (cut short by a full disk, edited by hand) is a `UserError` naming the file, not a traceback.
    """
    from slipway.cli import UserError

    path = Path(reports_dir or REPORTS_DIR) / f"{name}.json"
    if not path.exists():
        return None
    try:
        report = json.loads(path.read_text())
        if not isinstance(report, dict):
            raise ValueError(f"a JSON {type(report).__name__}, not an object")
    except (OSError, ValueError) as err:  # ValueError: not JSON, not UTF-8, not an object
        raise UserError(f"{path} is not a readable report ({err}): run the step that writes it again, or delete it") from err
    return report
