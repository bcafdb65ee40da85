"""Every report says what machine it was measured on, including how its idle CPUs wait."""

from __future__ import annotations

import json
from pathlib import Path

from slipway.reports import read_report, write_report

CPUIDLE_DRIVER = Path("/sys/devices/system/cpu/cpuidle/current_driver")


def test_a_report_is_stamped_with_the_machine_and_reads_back(tmp_path):
    path = write_report("probe", {"figure": 1.5}, reports_dir=tmp_path)
    report = read_report("probe", reports_dir=tmp_path)
    assert report == json.loads(path.read_text()) and report["figure"] == 1.5 and report["report"] == "probe"
    machine = report["machine"]
    assert machine["cpu_count"] >= 1 and machine["python"].count(".") == 2
    if CPUIDLE_DRIVER.is_file():  # Linux with cpuidle: the driver as the kernel names it
        assert machine["cpu_idle"]["driver"] == CPUIDLE_DRIVER.read_text().strip()
    else:
        assert machine["cpu_idle"] is None or "driver" not in machine["cpu_idle"]
    assert read_report("absent", reports_dir=tmp_path) is None
