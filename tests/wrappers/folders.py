"""Model folders for the wrappers runtime, as MLServer loads them, written by tests."""

from __future__ import annotations

import json
import shutil

from slipway.artifact import SETTINGS_FILE, write_manifest


def model_folder(root, name, onnx_path, *, extra=None, version=None, batching=None, files=None):
    folder = root / name
    folder.mkdir(parents=True)
    shutil.copyfile(onnx_path, folder / "model.onnx")
    parameters = {"uri": "./model.onnx", "extra": extra or {}}
    if version:
        parameters["version"] = version
    settings = {"name": name, "implementation": "wrappers.runtime.OnnxRuntime", "parameters": parameters, **(batching or {})}
    (folder / SETTINGS_FILE).write_text(json.dumps(settings))
    for file_name, text in (files or {}).items():
        (folder / file_name).write_text(text)
    write_manifest(folder)
    return folder
