"""Run `python -m module args...` as a separate process that starts warm: the tests' command runner.

Each command test used to start a fresh interpreter that spent ~0.6 s importing the same third-party packages
(numpy, onnx, onnxruntime, pydantic, rich, matplotlib, the Kubernetes client...). Here a multiprocessing fork
server, a freshly exec'd single-threaded Python, imports them once; each command is a child forked from it. The
child keeps what a test relies on from a real `python -m`: its own process (exit status, os.environ set to exactly
the env given, the working directory, fds 1 and 2 captured apart), and the project's own packages imported afresh
in it, so settings they read at import (slipway/paths.py's SLIPWAY_REPORTS_DIR) follow each call's env. Nothing of
the project is preloaded, and this module imports only the standard library, since the child imports it too.

Tests that need a real interpreter (signals, process groups, servers, `make`, TensorFlow or PyTorch, threads that
must outlive the command) keep subprocess.
"""

from __future__ import annotations

import atexit
import functools
import json
import locale
import multiprocessing
import os
import runpy
import subprocess
import sys
import tempfile
import threading
import traceback
from pathlib import Path

# Third-party packages only, heavy ones the commands import; none starts threads a forked child would miss (numpy's
# OpenBLAS pool handles fork), none reads env at import that a test varies (not the Kubernetes client: KUBECONFIG).
# Not locust/gevent (monkey-patching), not TensorFlow/PyTorch (threads, fork-unsafe).
# The last line: what `python -m deployments` (the local cluster's certificates) and `python -m export` (the model
# store's file systems, `import`'s graph slimming, which brings sympy) pull in, ~0.05-0.4 s a command each.
PRELOAD = (
    "numpy",
    "yaml",
    "pydantic",
    "pydantic_settings",
    "rich.console",
    "rich.table",
    "onnx",
    "onnx.helper",
    "onnxruntime",
    "matplotlib.figure",
    "matplotlib.backends.backend_agg",
    "requests",
    "jsonschema",
    "filelock",
    "psutil",
    "prometheus_client",
    "cryptography.x509",
    "cryptography.hazmat.primitives.serialization",
    "fsspec.core",
    "onnxslim",
)
COLD_ENV = "SLIPWAY_TESTS_COLD"  # set (to 1): every command in a fresh interpreter, as before
FIRST_PARTY = ("slipway", "engine", "export", "deployments", "loadtest", "wrappers", "benchmarks")


@functools.cache
def _context() -> multiprocessing.context.ForkServerContext:
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload([*PRELOAD, __name__])
    return context


@functools.cache
def _base_path() -> tuple[str, ...]:
    """sys.path[1:] of a plain `python -m` here, without PYTHONPATH (added per call from the call's env)."""
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    probe = subprocess.run(
        [sys.executable, "-c", "import json, sys; print(json.dumps(sys.path[1:]))"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return tuple(json.loads(probe.stdout))


def _exit_status(error: BaseException | None) -> int:
    """The exit status Python gives a program that ended with `error` (None: it returned), having reported it."""
    if error is None:
        return 0
    if isinstance(error, SystemExit):
        if error.code is None:
            return 0
        if isinstance(error.code, int):
            return error.code & 0xFF
        print(error.code, file=sys.stderr)
        return 1
    traceback.print_exception(error)
    return 1


def _child(
    module: str, args: list[str], env: dict[str, str], cwd: str, sys_path: list[str], stdout_path: str, stderr_path: str
) -> None:
    """In the forked child: become `python -m module args` with `env` in `cwd`, run it, exit as Python would."""
    os.environ.clear()
    os.environ.update(env)
    os.chdir(cwd)
    sys.path[:] = sys_path
    for fd, path in ((1, stdout_path), (2, stderr_path)):
        opened = os.open(path, os.O_WRONLY | os.O_TRUNC)
        os.dup2(opened, fd)
        os.close(opened)
    encoding = env.get("PYTHONIOENCODING", locale.getpreferredencoding(False))
    sys.stdout = open(1, "w", encoding=encoding, closefd=False)  # noqa: SIM115 - lives as long as the process
    sys.stderr = open(2, "w", buffering=1, encoding=encoding, errors="backslashreplace", closefd=False)  # noqa: SIM115
    sys.argv = [module, *args]
    error: BaseException | None = None
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    except BaseException as raised:  # noqa: BLE001 - reported as the interpreter would
        error = raised
    status = _exit_status(error)
    for thread in threading.enumerate():  # the interpreter waits for non-daemon threads before it exits
        if thread is not threading.current_thread() and not thread.daemon:
            thread.join()
    try:
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(status)


def run_command(
    module: str, *args: str, env: dict[str, str], cwd: str | Path, timeout: float | None = None, text: bool = True
) -> subprocess.CompletedProcess:
    """`subprocess.run([sys.executable, "-m", module, *args], env=env, cwd=cwd, capture_output=True, text=text,
    timeout=timeout)`, in a child of the warm fork server: the same result (args, returncode, stdout, stderr), and
    subprocess.TimeoutExpired after killing the child when it runs past `timeout`."""
    command = [sys.executable, "-m", module, *args]
    if os.environ.get(COLD_ENV):  # to compare, or to rule the runner out
        return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=text, timeout=timeout)
    cwd = str(Path(cwd).absolute())
    extra = [entry for entry in env.get("PYTHONPATH", "").split(os.pathsep) if entry]
    sys_path = [cwd, *(str(Path(cwd, entry)) for entry in extra), *_base_path()]
    with tempfile.TemporaryDirectory(prefix="slipway-command-") as folder:
        out, err = Path(folder, "stdout"), Path(folder, "stderr")
        out.touch()
        err.touch()
        child = _context().Process(target=_child, args=(module, list(args), dict(env), cwd, sys_path, str(out), str(err)))
        child.start()
        child.join(timeout)
        timed_out = child.exitcode is None
        if timed_out:
            child.kill()
            child.join()
        read = (
            (lambda path: path.read_text(encoding=locale.getpreferredencoding(False), errors="replace"))
            if text
            else Path.read_bytes
        )
        stdout, stderr = read(out), read(err)
    returncode = child.exitcode
    child.close()
    if timed_out or returncode is None:
        raise subprocess.TimeoutExpired(command, timeout or 0, output=stdout, stderr=stderr)
    return subprocess.CompletedProcess(command, returncode, stdout, stderr)
