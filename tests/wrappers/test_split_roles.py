"""The split form: each role's settings (pure), and the CPU stages served apart answering as the one-pod server."""

from __future__ import annotations

import base64
import io
import json

import numpy as np
import onnxruntime as ort
import pytest
from PIL import Image

from engine.tensor_specs import describe
from slipway.artifact import SETTINGS_FILE, load_input_example
from slipway.cli import UserError
from slipway.local_server import LocalServer
from slipway.runtime_settings import parse_runtime_settings
from tests.wrappers.folders import model_folder
from tests.wrappers.v2 import error_text, post
from wrappers.model.interface import configure_stages
from wrappers.roles.serve import ROLE_FOLDER_ENV, RoleError, main, role_settings, write_role_folder

STAGES = {"preprocess": {}, "postprocess": {"k": 3, "labels_file": "labels.txt"}, "max_batch_rows": 8}
LABELS = [f"digit-{i}" for i in range(10)]


def _settings(extra):
    return {
        "name": "digits",
        "implementation": "wrappers.runtime.OnnxRuntime",
        "max_batch_size": 1,
        "parameters": {"uri": "./model.onnx", "version": "3", "extra": extra},
    }


@pytest.mark.parametrize(
    "role, implementation, stages",
    [
        ("transformer", "wrappers.roles.stages.ImageTransformer", {"preprocess"}),
        ("model", "wrappers.runtime.OnnxRuntime", set()),
        ("output-transformer", "wrappers.roles.stages.TopKTransformer", {"postprocess"}),
    ],
)
def test_each_role_keeps_only_its_stage_and_the_graph_by_absolute_path(tmp_path, role, implementation, stages):
    settings = role_settings(_settings(STAGES), role, "digits-node", tmp_path)
    assert settings["name"] == "digits-node" and settings["implementation"] == implementation
    assert settings["max_batch_size"] == 1 and settings["parameters"]["version"] == "3"
    assert settings["parameters"]["uri"] == str((tmp_path / "model.onnx").resolve())
    extra = settings["parameters"]["extra"]
    assert {"preprocess", "postprocess"} & set(extra) == stages and extra["max_batch_rows"] == 8
    parse_runtime_settings(extra)  # still valid runtime settings


GRAPH_STAGES = {
    "preprocess": {"graph": "preprocess.onnx"},
    "postprocess": {"graph": "postprocess.onnx"},
    "split_model": "split-model.onnx",
}


@pytest.mark.parametrize(
    "role, implementation, uri",
    [
        ("transformer", "wrappers.roles.stages.GraphTransformer", "model.onnx"),
        ("model", "wrappers.runtime.OnnxRuntime", "split-model.onnx"),
        ("output-transformer", "wrappers.roles.stages.GraphOutputTransformer", "model.onnx"),
    ],
)
def test_stages_cut_into_graphs_are_served_by_the_graph_transformers_and_the_model_serves_the_cut_graph(
    tmp_path, role, implementation, uri
):
    settings = role_settings(_settings(GRAPH_STAGES), role, "image", tmp_path)
    assert settings["implementation"] == implementation
    assert settings["parameters"]["uri"] == str((tmp_path / uri).resolve())
    extra = settings["parameters"]["extra"]
    assert "split_model" not in extra
    config = parse_runtime_settings(extra)
    # the one-pod runtime runs no graph stage: model.onnx holds them
    assert configure_stages(config, [], [], tmp_path) == configure_stages(parse_runtime_settings({}), [], [], tmp_path)


def test_a_role_whose_stage_the_artifact_lacks_or_an_unknown_role_is_refused_in_one_line(tmp_path, monkeypatch):
    with pytest.raises(RoleError, match=r"sets no parameters.extra.postprocess, which the output-transformer runs"):
        role_settings(_settings({"preprocess": {}}), "output-transformer", "post", tmp_path)
    with pytest.raises(RoleError, match="unknown role 'gpu'; choose one of transformer, model, output-transformer"):
        role_settings(_settings(STAGES), "gpu", "x", tmp_path)
    (tmp_path / SETTINGS_FILE).write_text(json.dumps(_settings({})))
    out = tmp_path / "out"
    monkeypatch.setenv(ROLE_FOLDER_ENV, str(out))
    with pytest.raises(UserError, match="sets no parameters.extra.preprocess, which the transformer runs"):
        main(["transformer", str(tmp_path), "--name", "pre"])
    assert not out.exists()  # nothing written, nothing served


def _png(image: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(np.round(image[..., 0] * 255).astype(np.uint8)).save(buffer, format="PNG")
    return buffer.getvalue()


def chain(answer: dict) -> dict:
    """What Seldon's executor (v1.17.1 ChainKFserving) sends the next node: the answer, `outputs` renamed `inputs`."""
    return {("inputs" if key == "outputs" else key): value for key, value in answer.items()}


@pytest.fixture(scope="module")
def split_servers(tmp_path_factory, digits_artifact):
    """The one-pod form beside the model role (the "GPU" server), and both CPU stages in a server of their own."""
    gpu_root, cpu_root = tmp_path_factory.mktemp("gpu-pod"), tmp_path_factory.mktemp("cpu-pod")
    artifact = model_folder(
        gpu_root, "digits-images", digits_artifact / "model.onnx", files={"labels.txt": "\n".join(LABELS)}, extra=STAGES
    )
    write_role_folder(artifact, "model", "digits", gpu_root)
    write_role_folder(artifact, "transformer", "digits-pre", cpu_root)
    write_role_folder(artifact, "output-transformer", "digits-post", cpu_root)
    with LocalServer(gpu_root) as gpu, LocalServer(cpu_root) as cpu:
        yield gpu, cpu, artifact


@pytest.mark.slow
def test_the_split_stages_answer_what_the_one_pod_server_answers(split_servers, digits_artifact):
    gpu, cpu, artifact = split_servers
    images = load_input_example(digits_artifact)[0]["image"][:4]
    pngs = [_png(image) for image in images]
    body = {
        "id": "r1",
        "inputs": [
            {"name": "image", "datatype": "BYTES", "shape": [4], "data": [base64.b64encode(png).decode() for png in pngs]}
        ],
    }
    status, one_pod = post(f"{gpu.http_url}/v2/models/digits-images/infer", body)
    assert status == 200, one_pod

    status, pixels = post(f"{cpu.http_url}/v2/models/digits-pre/infer", body)
    assert status == 200, pixels
    # the transformer's pixels are the array the one-pod runtime feeds its session
    session = ort.InferenceSession(str(artifact / "model.onnx"), providers=["CPUExecutionProvider"])
    stages = configure_stages(parse_runtime_settings(STAGES), *describe(session), artifact)
    assert stages.preprocessor is not None
    fed = stages.preprocessor(np.array(pngs, dtype=object))
    [tensor] = pixels["outputs"]
    assert (tensor["name"], tensor["datatype"], tensor["shape"]) == ("image", "FP32", list(fed.shape))
    np.testing.assert_array_equal(np.asarray(tensor["data"], np.float32).reshape(fed.shape), fed)

    status, scores = post(f"{gpu.http_url}/v2/models/digits/infer", chain(pixels))
    assert status == 200, scores
    status, split = post(f"{cpu.http_url}/v2/models/digits-post/infer", chain(scores))
    assert status == 200, split
    assert split["outputs"] == one_pod["outputs"] and split["id"] == "r1"

    body["inputs"][0]["data"][1] = base64.b64encode(b"GIF89a broken").decode()
    status, answer = post(f"{cpu.http_url}/v2/models/digits-pre/infer", body)
    assert status == 400 and "image 1 could not be decoded" in error_text(answer)
    status, answer = post(f"{cpu.http_url}/v2/models/digits-post/infer", chain(pixels))
    assert status == 400 and "send the graph's scores as input" in error_text(answer)
