"""Every report says what machine it was measured on, including how its idle CPUs wait."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from slipway.reports import read_report, wakeup_round_trip_us, write_report

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


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs to wake one from the other")
def test_the_wakeup_round_trip_pins_only_its_own_threads():
    before = os.sched_getaffinity(0)
    measured = wakeup_round_trip_us(round_trips=200)
    assert set(measured) == {"same_cpu", "across_cpus"} and all(us > 0 for us in measured.values())
    assert os.sched_getaffinity(0) == before  # the caller (a bench about to load servers) keeps every CPU
    one_cpu = (
        "import os; os.sched_setaffinity(0, {min(os.sched_getaffinity(0))}); "
        "from slipway.reports import wakeup_round_trip_us; print(wakeup_round_trip_us())"
    )
    assert subprocess.run([sys.executable, "-c", one_cpu], capture_output=True, text=True, check=True).stdout.strip() == "None"


@pytest.mark.parametrize(
    "content, why",
    [(b'{"variants": [', "Expecting value"), (b"[1, 2]", "a JSON list, not an object"), (b"\xff{}", "can't decode")],
)
def test_a_damaged_report_is_a_user_error_naming_it(content, why, tmp_path):
    from slipway.cli import UserError

    (tmp_path / "export.json").write_bytes(content)
    with pytest.raises(UserError) as caught:
        read_report("export", reports_dir=tmp_path)
    message = str(caught.value)
    assert message.startswith(f"{tmp_path / 'export.json'} is not a readable report (") and why in message
    assert message.endswith("run the step that writes it again, or delete it") and "\n" not in message
