"""Each peer server's own virtualenv under build/peers/<peer>/venv, made on first use and reused after.

The peers (KServe, PyTriton) bring dependencies that clash with MLServer's (FastAPI, grpcio, protobuf
pins), so neither goes into Slipway's .venv: each gets a virtualenv of its own, installed from PyPI with
the versions pinned here and the onnxruntime this checkout serves with (so every server runs the same
ONNX Runtime). A stamp file holding the requirements says the install finished; a changed pin reinstalls.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from importlib.metadata import version
from pathlib import Path

from slipway.paths import BUILD_DIR

PEERS_DIR = BUILD_DIR / "peers"
KSERVE, PYTRITON = "kserve", "pytriton"
# The one place the peers' versions are pinned.
PINS = {KSERVE: ("kserve==0.21.0",), PYTRITON: ("nvidia-pytriton==0.7.0",)}
INSTALL_TIMEOUT_S = 1800.0
STAMP = ".slipway-requirements"


class PeerUnavailable(RuntimeError):
    """A peer could not be installed or started; the message is one line, for the report."""


def requirements(peer: str) -> list[str]:
    """What `peer`'s virtualenv holds: its pin, and this checkout's onnxruntime (numpy is the peer's: PyTriton
    0.7 needs numpy<2)."""
    return [*PINS[peer], f"onnxruntime=={version('onnxruntime')}"]


def venv_python(peer: str, root: Path = PEERS_DIR) -> Path:
    return root / peer / "venv" / "bin" / "python"


def ensure_env(peer: str, *, root: Path = PEERS_DIR, on_line: Callable[[str], None] = print) -> Path:
    """The Python of `peer`'s virtualenv, created and installed first where it is missing or out of date;
    pip's output goes to `on_line` as it comes (and to install.log). Raises `PeerUnavailable`."""
    python, wanted = venv_python(peer, root), "\n".join(requirements(peer)) + "\n"
    stamp = python.parent.parent / STAMP
    if python.is_file() and stamp.is_file() and stamp.read_text() == wanted:
        return python
    log_path = root / peer / "install.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    on_line(f"{peer}: installing {' '.join(requirements(peer))} into {python.parent.parent} (first use: minutes)")
    steps = ([] if python.is_file() else [[sys.executable, "-m", "venv", str(python.parent.parent)]]) + [
        [str(python), "-m", "pip", "install", "--progress-bar", "off", "--disable-pip-version-check", *requirements(peer)]
    ]
    with open(log_path, "w") as log:
        for command in steps:
            last = _run_streamed(command, log, lambda line: on_line(f"{peer}: {line}"))
            if last is not None:
                raise PeerUnavailable(f"installing {peer} failed: {last} (log: {log_path})")
    stamp.write_text(wanted)
    return python


def _run_streamed(command: list[str], log, on_line: Callable[[str], None]) -> str | None:
    """Run `command`, copying its output to `log` and `on_line`; None on success, else its last error line."""
    try:
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    except OSError as err:
        return str(err)
    errors: list[str] = []
    assert process.stdout is not None
    try:
        for line in process.stdout:  # until pip ends (its network calls time out on their own)
            log.write(line)
            line = line.rstrip()
            if line:
                on_line(line)
                if line.startswith("ERROR") or "Error" in line.split(":")[0]:
                    errors.append(line)
        status = process.wait(timeout=INSTALL_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        return f"no answer after {INSTALL_TIMEOUT_S:.0f} s"
    if status == 0:
        return None
    return errors[0] if errors else f"exit status {status}"
