"""Atomic writes: a reader sees the old file or the new one, never half of one.

Every report, manifest and artifact folder goes through here, so a crash or a
Ctrl-C mid-write leaves nothing half-written behind.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_bytes(path: Path, data: bytes) -> None:
    """Write `data` to `path` through a temporary file in the same folder and a rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        # mkstemp creates 0600; give the file the permissions a plain open() would.
        os.fchmod(fd, 0o666 & ~_umask())
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    _fsync_dir(path.parent)


def write_text(path: Path, text: str) -> None:
    """Atomically write UTF-8 text."""
    write_bytes(path, text.encode("utf-8"))


def write_json(path: Path, payload: Any) -> None:
    """Atomically write `payload` as indented, key-sorted JSON (stable diffs)."""
    write_text(path, json.dumps(payload, indent=2, sort_keys=True, default=str) + "\n")


@contextlib.contextmanager
def staged_dir(final: Path, *, replace: bool = True) -> Iterator[Path]:
    """Yield an empty staging folder beside `final`; on success it becomes `final` by rename.

    On any error the staging folder is removed and `final` is left exactly as it was.
    With `replace=False` an existing `final` is an error (immutable outputs).
    """
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    if final.exists() and not replace:
        raise FileExistsError(f"{final} already exists and is immutable")
    staging = Path(tempfile.mkdtemp(dir=final.parent, prefix=f".{final.name}.", suffix=".staging"))
    os.chmod(staging, 0o777 & ~_umask())  # mkdtemp creates 0700; readers may run as another user
    try:
        yield staging
        for child in staging.rglob("*"):
            if child.is_file():
                with open(child, "rb") as handle:
                    os.fsync(handle.fileno())
        if final.exists():
            # Swap: move the old folder aside first, so `final` is never missing for long
            # and never a mix of old and new files.
            retired = Path(tempfile.mkdtemp(dir=final.parent, prefix=f".{final.name}.", suffix=".old"))
            os.replace(final, retired / final.name)
            os.replace(staging, final)
            shutil.rmtree(retired, ignore_errors=True)
        else:
            os.replace(staging, final)
        _fsync_dir(final.parent)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
