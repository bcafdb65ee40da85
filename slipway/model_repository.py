"""What a folder given to the server holds: one artifact folder, or a repository of them (issue 31).

MLServer loads every `model-settings.json` under the folder it is given, at any depth, each model with
its own settings. It also serves a folder with none (from `MLSERVER_MODEL_*` variables, here a server
with no model), skips a settings file it cannot read (logging why), and lets a second model of the same
name and version replace the first as it loads. The launcher and `slipway serve` refuse all three up
front, in one line naming the folder or the files. Part of the artifact contract, so it lives in the core:
the launcher (`wrappers.launch`) and the client side that starts servers (`slipway.local_server`) both use it.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Iterable
from pathlib import Path

from slipway.artifact import SETTINGS_FILE


class RepositoryError(ValueError):
    """The folder is not a model folder, nor a folder of them; or two of its models clash."""


def settings_files(folder: Path) -> list[Path]:
    """Every `model-settings.json` under `folder`, as MLServer's repository finds them (at any depth; not in
    hidden folders), sorted; a RepositoryError where there is none or `folder` is not a folder."""
    folder = Path(folder)
    if not folder.is_dir():
        raise RepositoryError(
            f"{folder} is not a folder: give an artifact folder (with a {SETTINGS_FILE}) or a folder of artifact folders"
        )
    found = sorted(
        Path(path) for path in glob.glob(os.path.join(glob.escape(os.path.abspath(folder)), "**", SETTINGS_FILE), recursive=True)
    )
    if not found:
        raise RepositoryError(
            f"{folder} is neither an artifact folder nor a folder of them: it holds no "
            f"{SETTINGS_FILE}, nor do its sub-folders (run `make demo` first)"
        )
    return found


def check_unique(models: Iterable[tuple[str, str | None, Path | str]]) -> None:
    """Refuse two models of the same name and version (name, version, settings file each): MLServer would load
    one, then replace it by the other."""
    seen: dict[tuple[str, str | None], Path | str] = {}
    for name, version, path in models:
        first = seen.setdefault((name, version), path)
        if first != path:
            which = f"model {name!r}" + (f" version {version!r}" if version else " (no version)")
            raise RepositoryError(
                f"{which} is declared twice, by {first} and {path}: give each model its own name "
                "(or parameters.version) in its model-settings.json, or serve one of them"
            )
