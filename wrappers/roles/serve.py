"""Serve one artifact as one node of a split graph: `transformer`, `model` or `output-transformer`.

A pod of the split form (`render --split cpu-gpu`) runs `python -m wrappers.roles.serve ROLE FOLDER --name MODEL`:
the artifact's model-settings.json is rewritten for the role into a folder of its own (the artifact stays
as published and verified), then served by Slipway's launcher. The model role serves the graph without
the CPU stages, which the two transformers (`wrappers.roles.stages`) serve in their own pods.
Stages `export convert --split` cut from the model's own layers are ONNX graphs (`{graph: FILE}`): the
transformers run those (`GraphTransformer`, `GraphOutputTransformer`) and the model role serves
`parameters.extra.split_model`, the graph between them, in place of model.onnx, which holds all three.
"""

from __future__ import annotations

import json
import os
import tempfile
from argparse import ArgumentParser
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from slipway import atomic
from slipway.artifact import SETTINGS_FILE
from slipway.cli import UserError, exit_with

MODEL_ROLE = "model"
ROLES = {  # role -> (MLServer implementation, the stage settings it keeps)
    "transformer": ("wrappers.roles.stages.ImageTransformer", ("preprocess",)),
    MODEL_ROLE: ("wrappers.runtime.OnnxRuntime", ()),
    "output-transformer": ("wrappers.roles.stages.TopKTransformer", ("postprocess",)),
}
STAGE_SETTINGS = ("preprocess", "postprocess")
# A stage set as {graph: FILE} (export convert --split) is served by these instead
GRAPH_ROLES = {
    "transformer": "wrappers.roles.stages.GraphTransformer",
    "output-transformer": "wrappers.roles.stages.GraphOutputTransformer",
}
SPLIT_MODEL = "split_model"  # the graph the model role serves, where the stages were cut out of it
ROLE_FOLDER_ENV = "SLIPWAY_ROLE_FOLDER"  # where the role's model-settings.json goes (a writable path)


class RoleError(ValueError):
    """The artifact cannot be served in this role; the message says what to change."""


def role_settings(model_settings: dict[str, Any], role: str, name: str, artifact: Path) -> dict[str, Any]:
    """The artifact's model-settings.json for one role: named `name`, its implementation, the graph file by
    absolute path, and only the stage settings the role runs."""
    if role not in ROLES:
        raise RoleError(f"unknown role {role!r}; choose one of {', '.join(ROLES)}")
    implementation, kept = ROLES[role]
    parameters = dict(model_settings.get("parameters") or {})
    extra = dict(parameters.get("extra") or {})
    for stage in STAGE_SETTINGS:
        if stage in kept and extra.get(stage) is None:
            raise RoleError(
                f"{artifact}/{SETTINGS_FILE} sets no parameters.extra.{stage}, which the {role} runs: "
                "set it (`python -m export convert --split` writes both stages), or render without --split"
            )
        if stage not in kept:
            extra.pop(stage, None)
        elif isinstance(extra[stage], dict) and "graph" in extra[stage]:
            implementation = GRAPH_ROLES[role]
    uri = Path(parameters.get("uri") or "model.onnx")
    split_model = extra.pop(SPLIT_MODEL, None)
    if role == MODEL_ROLE and split_model:  # model.onnx holds the stages too: serve the graph between them
        uri = Path(split_model)
    parameters.update(uri=str(uri if uri.is_absolute() else (artifact / uri).resolve()), extra=extra)
    return {**model_settings, "name": name, "implementation": implementation, "parameters": parameters}


def write_role_folder(artifact: Path, role: str, name: str, out: Path) -> Path:
    """`out/<name>/model-settings.json` for the role, written atomically; the folder to serve."""
    try:
        model_settings = json.loads((artifact / SETTINGS_FILE).read_text())
    except (OSError, ValueError) as err:
        raise RoleError(f"cannot read {artifact / SETTINGS_FILE} ({err}): give an artifact folder") from None
    settings = role_settings(model_settings, role, name, artifact)
    atomic.write_json(out / name / SETTINGS_FILE, settings)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = ArgumentParser(prog="python -m wrappers.roles.serve", description=__doc__.splitlines()[0])
    parser.add_argument("role", choices=list(ROLES))
    parser.add_argument("folder", type=Path, help="the artifact folder")
    parser.add_argument(
        "--name",
        required=True,
        help="the model name to serve under: Seldon's executor calls every node by the name in the client's path",
    )
    args = parser.parse_args(argv)
    out = Path(os.environ.get(ROLE_FOLDER_ENV) or tempfile.mkdtemp(prefix="slipway-role-"))
    try:
        folder = write_role_folder(args.folder, args.role, args.name, out)
    except RoleError as err:
        raise UserError(str(err)) from None
    from wrappers.launch import main as launch

    return launch([str(folder)])


if __name__ == "__main__":
    exit_with(main)
