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
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

# Left by `staged_dir` in each folder it makes (unless the caller recognises its outputs itself), so a
# later run knows the folder is its own output and not a folder of the user's files it would delete.
OUTPUT_MARKER = ".slipway-output"


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


def file_in_the_way(path: Path) -> Path | None:
    """The first of `path`'s parent folders that exists as a file, where writing `path` would fail; None if none."""
    return next((parent for parent in Path(path).parents if parent.exists() and not parent.is_dir()), None)


def check_replaceable(final: Path, owns: Callable[[Path], bool] | None = None) -> None:
    """Refuse (`UserError`) an output path whose replacement would delete what is not ours.

    A missing path or an empty folder is fine; so is a previous output: a folder `owns` accepts
    (the caller knows its outputs, e.g. an artifact folder by its manifest) or, without `owns`, one
    holding `OUTPUT_MARKER`. A file, or a folder holding the user's files, is refused.
    Commands call this before their work, so a long run does not end in the refusal.
    """
    from slipway.cli import UserError  # lazily: the serving runtime imports this module, not the CLI

    final = Path(final)
    if not final.exists() and not final.is_symlink():
        return
    if not final.is_dir():
        raise UserError(f"{final} is a file, not an output folder: choose another output folder (--out) or remove it")
    if not any(final.iterdir()):
        return
    if owns(final) if owns is not None else (final / OUTPUT_MARKER).is_file():
        return
    raise UserError(
        f"{final} is a folder that this command did not write, and replacing it would delete its files: "
        "choose another output folder (--out) or remove it"
    )


@contextlib.contextmanager
def staged_dir(final: Path, *, replace: bool = True, owns: Callable[[Path], bool] | None = None) -> Iterator[Path]:
    """Yield an empty staging folder beside `final`; on success it becomes `final` by rename.

    On any error the staging folder is removed and `final` is left exactly as it was.
    An existing `final` is only replaced when `check_replaceable(final, owns)` allows it; without
    `owns`, the new folder carries `OUTPUT_MARKER` so the next run may replace it.
    With `replace=False` an existing `final` is an error (immutable outputs).
    """
    final = Path(final)
    if final.exists() and not replace:
        raise FileExistsError(f"{final} already exists and is immutable")
    check_replaceable(final, owns)
    final.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=final.parent, prefix=f".{final.name}.", suffix=".staging"))
    os.chmod(staging, 0o777 & ~_umask())  # mkdtemp creates 0700; readers may run as another user
    try:
        yield staging
        if owns is None:
            (staging / OUTPUT_MARKER).write_text("written by slipway: a later run may replace this folder\n")
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
