"""The model store as `deployments` reaches it: through `python -m export versions ... --json`, never by import.

The store's version record is the contract between the two halves of the road (export/store/records.py);
`deployments` reads records and asks for tag moves the way a person would, so either side can change inside
without the other noticing. A refusal is the store's own one line.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from deployments.render.records import DEFAULT_STORAGE_ROOT, ModelVersion

STORE_TIMEOUT_S = 120.0


class StoreRefused(Exception):
    """The store refused (no such version or tag, no store): its message, one line."""


def _versions(store: Path, *args: str) -> dict:
    command = [sys.executable, "-m", "export", "versions", *args, "--store", str(store), "--json"]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=STORE_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired as err:
        raise StoreRefused(f"the model store at {store} did not answer in {STORE_TIMEOUT_S:.0f} s") from err
    if done.returncode != 0:
        lines = [line for line in done.stderr.strip().splitlines() if line.strip()]
        message = lines[-1].removeprefix("error: ") if lines else f"exit status {done.returncode}"
        raise StoreRefused(message)
    return json.loads(done.stdout)


def version(ref: str, store: Path, *, storage_root: str = DEFAULT_STORAGE_ROOT) -> ModelVersion:
    """The version `ref` names (NAME:NUMBER, NAME:latest, NAME@TAG), as deploy pins it."""
    return ModelVersion.from_record(
        _versions(store, "show", ref), source=f"the store's record of {ref}", storage_root=storage_root
    )


def move_tag(tag: str, name: str, number: str, store: Path) -> dict:
    """Point `name@tag` at version `number` (a no-op where it already does); the store's record of the move."""
    return _versions(store, "promote", f"{name}@{tag}", f"{name}:{number}")
