"""`export convert --split`: the corpus image model's own preprocessing and softmax cut into graphs of their own,
recorded in the artifact, and served by the split's three roles with the whole model's answers (REST and gRPC);
a model of two inputs and two outputs cut per name, the rest passing the stages by name."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from benchmarks import corpus_models as keras_corpus

pytestmark = pytest.mark.slow

SPLIT_FILES = {"preprocess.onnx", "split-model.onnx", "postprocess.onnx"}


@pytest.fixture(scope="module")
def split_artifact(tmp_path_factory):
    """The corpus image model (Rescaling -> Normalization -> Resizing -> CenterCrop -> conv -> softmax Dense),
    saved as .keras and converted with --split; its Keras model and rows, and the convert report."""
    import slipway.reports
    from export.cli import main

    root = tmp_path_factory.mktemp("split-export")
    model, rows = keras_corpus.image_with_preprocessing()
    model.save(root / "image.keras")
    np.savez(root / "image.npz", **rows)
    before, slipway.reports.REPORTS_DIR = slipway.reports.REPORTS_DIR, root / "reports"
    try:
        out = root / "artifact"
        command = ["convert", str(root / "image.keras"), "--data", str(root / "image.npz"), "--name", "image"]
        assert main([*command, "--out", str(out), "--split"]) == 0
        report = json.loads((root / "reports" / "convert.json").read_text())
    finally:
        slipway.reports.REPORTS_DIR = before
    return {"root": root, "artifact": out, "model": model, "rows": rows, "report": report}


def test_the_artifact_records_the_cut_stages_beside_the_whole_model(split_artifact):
    import onnxruntime as ort

    from deployments.render.split import check_artifact
    from slipway.artifact import SETTINGS_FILE, verify_artifact
    from slipway.runtime_settings import parse_runtime_settings

    artifact, report = split_artifact["artifact"], split_artifact["report"]
    extra = json.loads((artifact / SETTINGS_FILE).read_text())["parameters"]["extra"]
    assert extra == {
        "preprocess": {"graph": "preprocess.onnx"},
        "postprocess": {"graph": "postprocess.onnx"},
        "split_model": "split-model.onnx",
    }
    parse_runtime_settings(extra)
    check_artifact(artifact)  # what render --split cpu-gpu asks of it
    verify_artifact(artifact)  # the stage graphs are in the manifest
    names = {}
    for file in SPLIT_FILES | {"model.onnx"}:
        session = ort.InferenceSession(str(artifact / file), providers=["CPUExecutionProvider"])
        names[file] = ([i.name for i in session.get_inputs()], [o.name for o in session.get_outputs()])
    assert names == {
        "model.onnx": (["image"], ["digit"]),
        "preprocess.onnx": (["image"], ["image_preprocessed"]),
        "split-model.onnx": (["image_preprocessed"], ["digit_logits"]),
        "postprocess.onnx": (["digit_logits"], ["digit"]),
    }
    split = report["split"]
    assert split["preprocess_layers"] == ["rescale", "normalize", "resize", "crop"] and split["postprocess_layers"] == ["digit"]
    assert set(split["files"]) == SPLIT_FILES and split["chained_parity"]["identical_predictions"]
    assert split["chained_parity"]["max_abs_diff"] < 1e-5 and max(split["stage_max_abs_diff"].values()) < 1e-4


@pytest.fixture(scope="module")
def split_servers(split_artifact, tmp_path_factory):
    """The model role (the "GPU" pod) beside the whole artifact served in one pod, and both CPU roles, as
    `python -m wrappers.roles.serve` writes them for the pods render --split cpu-gpu makes."""
    from slipway.local_server import LocalServer
    from wrappers.roles.serve import write_role_folder

    artifact = split_artifact["artifact"]
    gpu_root, cpu_root = tmp_path_factory.mktemp("gpu-pod"), tmp_path_factory.mktemp("cpu-pod")
    write_role_folder(artifact, "model", "image", gpu_root)
    write_role_folder(artifact, "transformer", "image-pre", cpu_root)
    write_role_folder(artifact, "output-transformer", "image-post", cpu_root)
    shutil.copytree(artifact, cpu_root / "image")  # the one-pod form of the same artifact, for comparison
    with LocalServer(gpu_root, ready_timeout_s=120) as gpu, LocalServer(cpu_root, ready_timeout_s=120) as cpu:
        yield gpu, cpu


def chain(answer: dict) -> dict:
    """What Seldon's executor sends the next node: the answer, `outputs` renamed `inputs`."""
    return {("inputs" if key == "outputs" else key): value for key, value in answer.items()}


def _whole_answers(split_artifact, images: np.ndarray) -> np.ndarray:
    return np.asarray(split_artifact["model"](images, training=False))


def test_the_split_roles_chained_over_rest_answer_as_the_whole_model(split_artifact, split_servers):
    from tests.wrappers.v2 import error_text, post

    gpu, cpu = split_servers
    images = split_artifact["rows"]["image"][:6]
    body = {
        "id": "r1",
        "inputs": [{"name": "image", "datatype": "FP32", "shape": list(images.shape), "data": images.ravel().tolist()}],
    }
    status, one_pod = post(f"{cpu.http_url}/v2/models/image/infer", body)
    assert status == 200, one_pod
    status, pixels = post(f"{cpu.http_url}/v2/models/image-pre/infer", body)
    assert status == 200, pixels
    assert [(t["name"], t["datatype"], t["shape"]) for t in pixels["outputs"]] == [("image_preprocessed", "FP32", [6, 8, 8, 3])]
    status, logits = post(f"{gpu.http_url}/v2/models/image/infer", chain(pixels))
    assert status == 200, logits
    assert [t["name"] for t in logits["outputs"]] == ["digit_logits"]
    status, split = post(f"{cpu.http_url}/v2/models/image-post/infer", chain(logits))
    assert status == 200, split
    [answer] = split["outputs"]
    assert (answer["name"], answer["datatype"], answer["shape"], split["id"]) == ("digit", "FP32", [6, 5], "r1")
    got = np.asarray(answer["data"], np.float32).reshape(6, 5)
    whole = np.asarray(one_pod["outputs"][0]["data"], np.float32).reshape(6, 5)
    np.testing.assert_allclose(got, whole, atol=1e-5)
    np.testing.assert_allclose(got, _whole_answers(split_artifact, images), atol=1e-5)
    assert (got.argmax(axis=1) == whole.argmax(axis=1)).all()

    status, refused = post(f"{cpu.http_url}/v2/models/image-post/infer", chain(pixels))
    assert status == 400 and "send input(s) ['digit_logits']" in error_text(refused)


def test_the_split_roles_chained_over_grpc_answer_as_the_whole_model(split_artifact, split_servers):
    import tritonclient.grpc as grpcclient

    gpu, cpu = split_servers
    images = split_artifact["rows"]["image"]

    def infer(target: str, model: str, name: str, array: np.ndarray, output: str) -> np.ndarray:
        client = grpcclient.InferenceServerClient(target)
        try:
            tensor = grpcclient.InferInput(name, list(array.shape), "FP32")
            tensor.set_data_from_numpy(array)
            return client.infer(model, [tensor]).as_numpy(output)
        finally:
            client.close()

    pixels = infer(cpu.grpc_target, "image-pre", "image", images, "image_preprocessed")
    logits = infer(gpu.grpc_target, "image", "image_preprocessed", pixels, "digit_logits")
    got = infer(cpu.grpc_target, "image-post", "digit_logits", logits, "digit")
    whole = infer(cpu.grpc_target, "image", "image", images, "digit")
    assert got.shape == whole.shape == (len(images), 5)
    np.testing.assert_allclose(got, whole, atol=1e-5)
    np.testing.assert_allclose(got, _whole_answers(split_artifact, images), atol=1e-5)
    assert (got.argmax(axis=1) == whole.argmax(axis=1)).all()


def test_a_softmax_dense_without_preprocessing_is_cut_at_its_logits_with_an_identity_preprocess(tmp_path):
    from export.convert import DEFAULT_OPSET
    from export.keras_load import load_model
    from export.split_stages import convert_stages, cut_stages

    model, rows = keras_corpus.sequential_mlp()
    model.save(tmp_path / "mlp.keras")
    loaded = load_model(tmp_path / "mlp.keras")
    stages = cut_stages(loaded)
    assert (stages.pre_layers, stages.post_layers) == ([], ["answer"])
    assert stages.core.output_names == ["answer_logits"] and stages.post.output_names == ["answer"]
    graphs = convert_stages(stages, rows, DEFAULT_OPSET, 1e-3)
    np.testing.assert_allclose(graphs.chained["answer"], np.asarray(model(rows["row"], training=False)), atol=1e-6)


def test_a_trailing_argmax_is_cut_with_the_softmax_before_it(tmp_path):
    import keras

    from export.convert import DEFAULT_OPSET
    from export.keras_load import load_model
    from export.split_stages import convert_stages, cut_stages

    inputs = keras.Input((6,), name="row")
    scores = keras.layers.Dense(4, activation="softmax", name="scores")(keras.layers.Dense(8, activation="relu")(inputs))
    keras.Model(inputs, keras.ops.cast(keras.ops.argmax(scores, axis=-1), "int64")).save(tmp_path / "labels.keras")
    loaded = load_model(tmp_path / "labels.keras")
    stages = cut_stages(loaded)
    assert stages.post_layers[0] == "scores" and len(stages.post_layers) == 3  # the softmax, the argmax, its cast
    [output] = loaded.output_names
    assert stages.core.output_names == [f"{output}_logits"] and stages.post.output_names == [output]
    rows = {"row": np.random.default_rng(0).normal(0, 2, (32, 6)).astype(np.float32)}
    graphs = convert_stages(stages, rows, DEFAULT_OPSET, 1e-3)
    labels = graphs.chained[output]
    assert labels.dtype == np.int64 and labels.shape == (32,)
    np.testing.assert_array_equal(labels, loaded.predict(rows)[output])


def test_a_model_with_nothing_to_cut_is_refused_in_one_line_naming_its_first_layer(tmp_path, monkeypatch):
    import keras

    from export.cli import main
    from slipway.cli import UserError

    monkeypatch.setattr("slipway.reports.REPORTS_DIR", tmp_path / "reports")
    inputs = keras.Input((4,), name="reading")
    keras.Model(inputs, keras.layers.Dense(2, name="score")(inputs)).save(tmp_path / "plain.keras")
    np.savez(tmp_path / "plain.npz", reading=np.ones((3, 4), np.float32))
    with pytest.raises(UserError) as caught:
        main(
            [
                "convert",
                str(tmp_path / "plain.keras"),
                "--data",
                str(tmp_path / "plain.npz"),
                "--out",
                str(tmp_path / "out"),
                "--split",
            ]
        )
    message = str(caught.value)
    assert "has nothing --split can cut: its first layer 'score' (Dense) is not one of Rescaling" in message, message
    assert "trailing softmax" in message and "without --split" in message and "\n" not in message
    assert not (tmp_path / "out").exists()


def test_render_split_cpu_gpu_takes_the_artifact_and_gives_each_pod_its_role(split_artifact):
    from deployments.render.records import ModelVersion
    from slipway.artifact import read_manifest
    from tests.deployments.rendering import rendering

    artifact = split_artifact["artifact"]
    version = ModelVersion.model_validate(
        {
            "name": "image",
            "version": "1",
            "uri": "s3://slipway-models/image/1",
            "digest": read_manifest(artifact).digest,
            "tags": [],
            "created_at": "2026-01-01T00:00:00Z",
            "local_dir": str(artifact),  # render checks the artifact has both stages (deployments.render.split.check_artifact)
        }
    )
    rendered = rendering(split_mode="cpu-gpu")("cpu", model=version)
    post = rendered.seldon_deployment["spec"]["predictors"][0]["graph"]
    pre = post["children"][0]
    assert [(n["name"], n["type"]) for n in (post, pre, pre["children"][0])] == [
        ("image-post", "OUTPUT_TRANSFORMER"),
        ("image-pre", "TRANSFORMER"),
        ("image", "MODEL"),
    ]


@pytest.fixture(scope="module")
def multi_split(tmp_path_factory):
    """A model of two inputs and two outputs (`image_and_measurements`) converted with --split: only the image is
    preprocessed inside, only label has a softmax."""
    import slipway.reports
    from export.cli import main

    root = tmp_path_factory.mktemp("split-multi")
    model, rows = keras_corpus.image_and_measurements()
    model.save(root / "mixed.keras")
    np.savez(root / "mixed.npz", **rows)
    before, slipway.reports.REPORTS_DIR = slipway.reports.REPORTS_DIR, root / "reports"
    try:
        command = ["convert", str(root / "mixed.keras"), "--data", str(root / "mixed.npz"), "--name", "mixed"]
        assert main([*command, "--out", str(root / "artifact"), "--split"]) == 0
        report = json.loads((root / "reports" / "convert.json").read_text())
    finally:
        slipway.reports.REPORTS_DIR = before
    return {"artifact": root / "artifact", "model": model, "rows": rows, "report": report}


def test_each_input_and_output_is_cut_on_its_own_and_the_rest_passes_by_name(multi_split):
    import onnxruntime as ort

    from export.split_stages import chain

    artifact, rows = multi_split["artifact"], multi_split["rows"]
    names = {}
    for file in SPLIT_FILES:
        session = ort.InferenceSession(str(artifact / file), providers=["CPUExecutionProvider"])
        names[file] = (sorted(i.name for i in session.get_inputs()), sorted(o.name for o in session.get_outputs()))
    assert names == {
        "preprocess.onnx": (["image"], ["image_preprocessed"]),  # measurements has no chain: it passes the transformer
        "split-model.onnx": (["image_preprocessed", "measurements"], ["label_logits", "value"]),
        "postprocess.onnx": (["label_logits"], ["label"]),  # value has no softmax: it passes the output transformer
    }
    split = multi_split["report"]["split"]
    assert (split["preprocess_layers"], split["postprocess_layers"]) == (["rescale", "normalize"], ["label_head"])
    graphs = [(artifact / file).read_bytes() for file in ("preprocess.onnx", "split-model.onnx", "postprocess.onnx")]
    answers = chain(graphs, rows)
    keras_answers = {key: np.asarray(value) for key, value in multi_split["model"](rows, training=False).items()}
    assert sorted(answers) == ["label", "value"]
    for output in ("label", "value"):
        np.testing.assert_allclose(answers[output], keras_answers[output], atol=1e-5)


def test_the_split_roles_of_a_two_input_two_output_model_answer_as_the_whole_model(multi_split, tmp_path):
    from slipway.local_server import LocalServer
    from tests.wrappers.v2 import post
    from wrappers.roles.serve import write_role_folder

    artifact, rows = multi_split["artifact"], multi_split["rows"]
    gpu_root, cpu_root = tmp_path / "gpu-pod", tmp_path / "cpu-pod"
    write_role_folder(artifact, "model", "mixed", gpu_root)
    write_role_folder(artifact, "transformer", "mixed-pre", cpu_root)
    write_role_folder(artifact, "output-transformer", "mixed-post", cpu_root)
    shutil.copytree(artifact, cpu_root / "mixed")
    body = {
        "inputs": [
            {"name": name, "datatype": "FP32", "shape": list(rows[name][:5].shape), "data": rows[name][:5].ravel().tolist()}
            for name in ("image", "measurements")
        ]
    }
    with LocalServer(gpu_root, ready_timeout_s=120) as gpu, LocalServer(cpu_root, ready_timeout_s=120) as cpu:
        status, one_pod = post(f"{cpu.http_url}/v2/models/mixed/infer", body)
        assert status == 200, one_pod
        status, pixels = post(f"{cpu.http_url}/v2/models/mixed-pre/infer", body)
        assert status == 200, pixels
        assert sorted(t["name"] for t in pixels["outputs"]) == ["image_preprocessed", "measurements"]
        status, logits = post(f"{gpu.http_url}/v2/models/mixed/infer", chain(pixels))
        assert status == 200, logits
        status, split = post(f"{cpu.http_url}/v2/models/mixed-post/infer", chain(logits))
        assert status == 200, split
    got = {t["name"]: np.asarray(t["data"], np.float32).reshape(t["shape"]) for t in split["outputs"]}
    whole = {t["name"]: np.asarray(t["data"], np.float32).reshape(t["shape"]) for t in one_pod["outputs"]}
    assert sorted(got) == sorted(whole) == ["label", "value"]
    for output in ("label", "value"):
        np.testing.assert_allclose(got[output], whole[output], atol=1e-5)
