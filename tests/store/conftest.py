"""Small real artifacts for the store's tests: a one-node ONNX graph written by `export.package.write_artifact`."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

from slipway.paths import PROJECT_ROOT
from tests.commands import run_command


def tiny_onnx(offset: float) -> bytes:
    """y = x + offset over FP32 [N, 4]: distinct offsets give distinct content."""
    from onnx import TensorProto, helper

    from tests.graphs import onnx_model

    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "offset"], ["y"])],
        "tiny",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])],
        initializer=[helper.make_tensor("offset", TensorProto.FLOAT, [1], [offset])],
    )
    return onnx_model(graph).SerializeToString()


def make_artifact(folder: Path, offset: float = 1.0, name: str = "tiny") -> Path:
    """A complete artifact folder (model, settings, input example, manifest) for `y = x + offset`."""
    from export.package import write_artifact

    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    write_artifact(
        folder, onnx_bytes=tiny_onnx(offset), name=name, example_inputs={"x": x}, example_outputs={"y": x + np.float32(offset)}
    )
    return folder


@pytest.fixture
def artifact_factory(tmp_path):
    """make(offset) -> a fresh artifact folder under tmp_path."""

    def make(offset: float = 1.0, name: str = "tiny") -> Path:
        return make_artifact(tmp_path / "artifacts" / f"{name}-{offset}", offset, name)

    return make


@pytest.fixture
def store_dir(tmp_path) -> Path:
    return tmp_path / "model-store"


def versions(*args: str, env: dict[str, str] | None = None, check: bool = True) -> subprocess.CompletedProcess:
    """Run `python -m export versions ...` as a user would."""
    result = run_command("export", "versions", *args, cwd=PROJECT_ROOT, env={**os.environ, **(env or {})}, timeout=120)
    if check and result.returncode != 0:
        raise AssertionError(f"versions {' '.join(args)} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}")
    return result


def versions_json(*args: str, env: dict[str, str] | None = None):
    return json.loads(versions(*args, "--json", env=env).stdout)
