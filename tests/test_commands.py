"""The warm command runner (tests/commands.py) against a real `python -m`: the tests that use it rely on each
command being a process of its own, with exactly its env, its working directory and its exit status."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from slipway.paths import PROJECT_ROOT
from tests.commands import FIRST_PARTY, run_command

PROBE = """
import json, os, sys
print(json.dumps({"marker": os.environ.get("SLIPWAY_TEST_MARKER"), "home": os.environ.get("HOME"),
                  "cwd": os.getcwd(), "path0": sys.path[0], "argv": sys.argv[1:], "name": __name__,
                  "first_party": sorted(m for m in sys.modules if m.split(".")[0] in FIRST_PARTY.split())}))
import slipway.paths
print(slipway.paths.REPORTS_DIR)
"""


def _module(tmp_path, name: str, body: str) -> str:
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(body))
    return name


def _both(tmp_path, module: str, *args: str, env: dict[str, str]) -> tuple[subprocess.CompletedProcess, ...]:
    """The same command run by a real interpreter and by the warm runner."""
    real = subprocess.run(
        [sys.executable, "-m", module, *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
    )
    return real, run_command(module, *args, env=env, cwd=tmp_path, timeout=60)


def test_each_call_has_exactly_its_env_cwd_and_fresh_project_imports(tmp_path):
    module = _module(tmp_path, "probe", PROBE.replace("FIRST_PARTY.split()", repr(FIRST_PARTY)))
    base = {"PATH": os.environ["PATH"], "PYTHONPATH": str(PROJECT_ROOT)}
    first = run_command(
        module,
        "a b",
        "--x",
        env={**base, "SLIPWAY_TEST_MARKER": "one", "SLIPWAY_REPORTS_DIR": str(tmp_path / "r1")},
        cwd=tmp_path,
    )
    second = run_command(module, env={**base, "SLIPWAY_REPORTS_DIR": str(tmp_path / "r2")}, cwd=tmp_path)
    assert first.returncode == second.returncode == 0, first.stderr + second.stderr
    seen = [__import__("json").loads(result.stdout.splitlines()[0]) for result in (first, second)]
    assert [one["marker"] for one in seen] == ["one", None]  # set in one call, unseen by the next
    assert [one["home"] for one in seen] == [None, None]  # nothing of the test process's env leaks in
    assert {one["cwd"] for one in seen} == {one["path0"] for one in seen} == {str(tmp_path)}
    assert seen[0]["argv"] == ["a b", "--x"] and seen[0]["name"] == "__main__"
    assert seen[0]["first_party"] == seen[1]["first_party"] == []  # imported afresh in each child, after its env
    assert [result.stdout.splitlines()[1] for result in (first, second)] == [str(tmp_path / "r1"), str(tmp_path / "r2")]


@pytest.mark.parametrize(
    "body",
    [
        "print('done')",
        "import sys; print('partial'); sys.exit(3)",
        "raise SystemExit(None)",
        "raise SystemExit('bad --rate: send a number of requests per second')",
        "import sys; sys.exit(300)",
        "import os, sys; print('out'); print('err', file=sys.stderr); os.write(1, b'fd1\\n'); os.write(2, b'fd2\\n')",
        "import atexit; atexit.register(lambda: print('at exit'))",
    ],
)
def test_status_stdout_and_stderr_match_a_real_interpreter(tmp_path, body):
    real, warm = _both(tmp_path, _module(tmp_path, "program", body), env={"PATH": os.environ["PATH"]})
    assert (warm.returncode, warm.stdout, warm.stderr) == (real.returncode, real.stdout, real.stderr)
    assert warm.args == real.args


def test_an_uncaught_exception_exits_1_with_its_traceback(tmp_path):
    real, warm = _both(
        tmp_path, _module(tmp_path, "crash", "print('before')\nraise ValueError('boom')"), env={"PATH": os.environ["PATH"]}
    )
    assert warm.returncode == real.returncode == 1 and warm.stdout == real.stdout == "before\n"
    assert (
        warm.stderr.startswith("Traceback") and warm.stderr.splitlines()[-1] == real.stderr.splitlines()[-1] == "ValueError: boom"
    )


def test_a_command_past_its_timeout_is_killed(tmp_path):
    module = _module(tmp_path, "sleeper", "import os, time\nprint(os.getpid(), flush=True)\ntime.sleep(60)")
    with pytest.raises(subprocess.TimeoutExpired) as caught:
        run_command(module, env={"PATH": os.environ["PATH"]}, cwd=tmp_path, timeout=1)
    pid = int(caught.value.output)
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
