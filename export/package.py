"""Write a model artifact folder: model.onnx, model-settings.json, an input example, a manifest.

The folder is built in a staging folder and renamed into place, so a reader (MLServer,
the version store) never sees a half-written artifact.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from slipway import atomic
from slipway.artifact import (
    INPUT_EXAMPLE_FILE,
    MODEL_FILE,
    RUNTIME_IMPLEMENTATION,
    SETTINGS_FILE,
    Manifest,
    is_artifact_folder,
    write_manifest,
)


def model_settings(
    name: str, *, version: str | None = None, extra: dict[str, Any] | None = None, inputs: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    """MLServer's model-settings.json for the wrappers runtime; `inputs` (name, datatype, shape) when they differ
    from what a float export has (a uint8 image input), so the folder says what clients send."""
    parameters: dict[str, Any] = {"uri": f"./{MODEL_FILE}", "extra": extra or {}}
    if version is not None:
        parameters["version"] = version
    settings = {"name": name, "implementation": RUNTIME_IMPLEMENTATION, "parameters": parameters}
    return settings | ({"inputs": inputs} if inputs else {})


def check_out_dir(out_dir: Path) -> None:
    """Refuse, before any work, an `--out` that is a file or a folder other than a previous artifact."""
    atomic.check_replaceable(Path(out_dir), owns=is_artifact_folder)


def write_artifact(
    out_dir: Path,
    *,
    onnx_bytes: bytes,
    name: str,
    example_inputs: dict[str, np.ndarray],
    example_outputs: dict[str, np.ndarray],
    example_labels: np.ndarray | None = None,
    extra_settings: dict[str, Any] | None = None,
    extra_files: dict[str, bytes] | None = None,
    inputs: list[dict[str, Any]] | None = None,
) -> Manifest:
    """Write the artifact folder atomically and return its manifest.

    The input example (a few held-out rows with the outputs the exported model gives them)
    lets the server warm up and lets smoke tests check answers without TensorFlow.
    An existing `out_dir` is replaced only when it is an artifact folder (see `check_out_dir`).
    """
    with atomic.staged_dir(Path(out_dir), owns=is_artifact_folder) as staging:
        (staging / MODEL_FILE).write_bytes(onnx_bytes)
        (staging / SETTINGS_FILE).write_text(
            json.dumps(model_settings(name, extra=extra_settings, inputs=inputs), indent=2) + "\n"
        )
        arrays = {f"input:{k}": v for k, v in example_inputs.items()}
        arrays.update({f"output:{k}": v for k, v in example_outputs.items()})
        if example_labels is not None:
            arrays["labels"] = example_labels
        with open(staging / INPUT_EXAMPLE_FILE, "wb") as handle:
            np.savez(handle, allow_pickle=True, **arrays)  # as numpy defaults: a text model's inputs are object arrays
        for relative, data in (extra_files or {}).items():
            target = staging / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
        manifest = write_manifest(staging)
    return manifest
