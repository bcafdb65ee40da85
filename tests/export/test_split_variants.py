"""`export variants --split`: every variant of the corpus image model keeps its preprocessing and softmax as graphs
of their own, with a graph between them made like the whole variant (fp32, int8, fp16, slim), and the chosen one
served by the split's three roles answers as the whole variant served in one pod."""

from __future__ import annotations

import json
import shutil

import numpy as np
import onnx
import pytest

from benchmarks import corpus_models as keras_corpus

pytestmark = pytest.mark.slow

VARIANTS = ("fp32", "int8", "fp16", "slim")
STAGES = ("preprocess.onnx", "postprocess.onnx")


@pytest.fixture(scope="module")
def split_variants(tmp_path_factory):
    """The corpus image model (Rescaling -> Normalization -> Resizing -> CenterCrop -> conv -> softmax Dense) through
    `export variants --split`, slim fine-tuned for one epoch on labelled rows; its rows, the report, the folder."""
    import slipway.reports
    from export.cli import main
    from export.report import ExportReport

    root = tmp_path_factory.mktemp("split-variants")
    model, rows = keras_corpus.image_with_preprocessing()
    model.save(root / "image.keras")
    np.savez(root / "image.npz", **rows)
    train = np.random.default_rng(1).uniform(0, 255, (128, 12, 12, 3)).astype(np.float32)
    np.savez(root / "train.npz", image=train, labels=np.asarray(model.predict(train, verbose=0)).argmax(axis=1))
    before, slipway.reports.REPORTS_DIR = slipway.reports.REPORTS_DIR, root / "reports"
    try:
        out = root / "variants"
        command = ["variants", str(root / "image.keras"), "--data", str(root / "image.npz"), "--train", str(root / "train.npz")]
        options = ["--loss", "sparse_categorical_crossentropy", "--fine-tune-epochs", "1", "--variants", ",".join(VARIANTS)]
        timing = ["--measure-rounds", "1", "--measure-seconds", "0.02"]
        assert main([*command, *options, *timing, "--split", "--out", str(out)]) == 0
        report = ExportReport.model_validate_json((root / "reports" / "export.json").read_text())
    finally:
        slipway.reports.REPORTS_DIR = before
    return {"root": root, "out": out, "rows": rows, "report": report}


def _run(path, feeds: dict) -> dict:
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = [output.name for output in session.get_outputs()]
    return dict(zip(names, session.run(names, feeds)))


def test_every_variant_keeps_the_same_stages_and_a_graph_between_them_of_its_own(split_variants):
    from deployments.render.split import check_artifact
    from slipway.artifact import SETTINGS_FILE, verify_artifact

    out = split_variants["out"]
    stages = {file: (out / "fp32" / file).read_bytes() for file in STAGES}
    cores = {}
    for variant in VARIANTS:
        folder = out / variant
        extra = json.loads((folder / SETTINGS_FILE).read_text())["parameters"]["extra"]
        assert extra == {
            "preprocess": {"graph": "preprocess.onnx"},
            "postprocess": {"graph": "postprocess.onnx"},
            "split_model": "split-model.onnx",
        }, variant
        check_artifact(folder)  # what render --split cpu-gpu asks of it
        verify_artifact(folder)  # the stage graphs are in its manifest, under its digest
        assert {file: (folder / file).read_bytes() for file in STAGES} == stages, variant  # the same stages in each
        core = onnx.load(folder / "split-model.onnx").graph
        assert ([i.name for i in core.input], [o.name for o in core.output]) == (["image_preprocessed"], ["digit_logits"])
        cores[variant] = core
    ops = {variant: {node.op_type for node in core.node} for variant, core in cores.items()}
    assert "QuantizeLinear" in ops["int8"] and "QuantizeLinear" not in ops["fp32"]
    assert any(init.data_type == onnx.TensorProto.FLOAT16 for init in cores["fp16"].initializer)
    kernels = {
        variant: next(init for init in core.initializer if len(init.dims) == 4 and init.data_type == onnx.TensorProto.FLOAT)
        for variant, core in cores.items()
        if variant in ("fp32", "slim")
    }
    assert kernels["slim"].dims[0] < kernels["fp32"].dims[0]  # slim's graph between the stages has fewer filters


@pytest.mark.parametrize("variant", VARIANTS)
def test_each_variants_stages_chained_answer_as_its_whole_graph_within_its_budget(variant, split_variants):
    out, rows = split_variants["out"], split_variants["rows"]
    folder = out / variant
    whole = _run(folder / "model.onnx", rows)["digit"]
    chained = _run(folder / "postprocess.onnx", _run(folder / "split-model.onnx", _run(folder / "preprocess.onnx", rows)))
    got = chained["digit"]
    row = next(row for row in split_variants["report"].variants if row.name == variant)
    recorded = row.details["split"]
    assert recorded["preprocess_layers"] == ["rescale", "normalize", "resize", "crop"] and recorded["postprocess_layers"] == [
        "digit"
    ]
    assert recorded["against_whole"]["digit"]["max_abs_diff"] == pytest.approx(float(np.abs(got - whole).max()), abs=1e-6)
    changed = float((got.argmax(axis=1) != whole.argmax(axis=1)).mean()) * 100
    assert recorded["against_whole"]["digit"]["disagreement_points"] == pytest.approx(changed)
    assert row.status == "accepted" and "--split stages chained: top-1 disagreement with the whole variant" in row.reason
    if variant in ("fp32", "slim"):  # the same float32 arithmetic, cut in three
        np.testing.assert_allclose(got, whole, atol=1e-5)
    elif variant == "fp16":
        np.testing.assert_allclose(got, whole, atol=1e-2)
    else:  # int8: the graph between the stages is quantized on its own, calibrated on the rows as preprocessed
        assert changed <= 0.5  # the default accuracy budget: top-1 as the whole int8 graph answers


def test_the_chosen_variant_served_split_answers_as_it_does_in_one_pod(split_variants, tmp_path):
    from slipway.local_server import LocalServer
    from tests.wrappers.v2 import post
    from wrappers.roles.serve import write_role_folder

    chosen = split_variants["out"] / split_variants["report"].chosen.name
    gpu_root, cpu_root = tmp_path / "gpu-pod", tmp_path / "cpu-pod"
    write_role_folder(chosen, "model", "image", gpu_root)
    write_role_folder(chosen, "transformer", "image-pre", cpu_root)
    write_role_folder(chosen, "output-transformer", "image-post", cpu_root)
    shutil.copytree(chosen, cpu_root / "image")
    images = split_variants["rows"]["image"][:6]
    body = {"inputs": [{"name": "image", "datatype": "FP32", "shape": list(images.shape), "data": images.ravel().tolist()}]}

    def chain(answer: dict) -> dict:  # what Seldon's executor sends the next node
        return {("inputs" if key == "outputs" else key): value for key, value in answer.items()}

    with LocalServer(gpu_root, ready_timeout_s=120) as gpu, LocalServer(cpu_root, ready_timeout_s=120) as cpu:
        status, one_pod = post(f"{cpu.http_url}/v2/models/image/infer", body)
        assert status == 200, one_pod
        status, pixels = post(f"{cpu.http_url}/v2/models/image-pre/infer", body)
        assert status == 200, pixels
        status, logits = post(f"{gpu.http_url}/v2/models/image/infer", chain(pixels))
        assert status == 200, logits
        status, split = post(f"{cpu.http_url}/v2/models/image-post/infer", chain(logits))
        assert status == 200, split
    [answer] = split["outputs"]
    assert (answer["name"], answer["shape"]) == ("digit", [6, 5])
    got = np.asarray(answer["data"], np.float32).reshape(6, 5)
    whole = np.asarray(one_pod["outputs"][0]["data"], np.float32).reshape(6, 5)
    assert (got.argmax(axis=1) == whole.argmax(axis=1)).all()
    np.testing.assert_allclose(got, whole, atol=1e-5 if split_variants["report"].chosen.name in ("fp32", "slim") else 1e-2)


@pytest.mark.parametrize(
    "precision, points, diff, accepted, said",
    [
        ("fp32", 0.0, 5e-4, True, "max abs diff from the whole variant 5.0e-04"),
        ("fp32", 0.0, 2e-3, False, "max abs diff from the whole variant 2.00e-03 > fp32 tolerance 1.0e-03"),
        ("int8", 0.0, 2e-2, True, "top-1 disagreement with the whole variant 0.00 points"),
        ("int8", 2.0, 2e-2, False, "top-1 disagreement with the whole variant 2.00 points > budget 0.5"),
    ],
)
def test_a_chain_that_strays_from_its_whole_variant_beyond_the_budget_is_rejected(precision, points, diff, accepted, said):
    from export.evaluate import OutputQuality
    from export.selection import Budget
    from export.split_variants import split_verdict

    within, reason = split_verdict(OutputQuality("digit", points, diff, 0.3), precision, Budget())
    assert within is accepted and said in reason, reason


def test_an_outputs_own_budget_judges_its_chain_too():
    from export.evaluate import OutputQuality
    from export.selection import Budget
    from export.split_variants import split_verdict

    budget = Budget(outputs={"label": {"points": 5}, "value": {"tolerance": 0.01}})
    assert split_verdict(OutputQuality("label", 2.0, 0.1, 1.0), "int8", budget)[0]  # 2 points <= its own 5
    within, reason = split_verdict(OutputQuality("value", None, 0.05, 2.0), "int8", budget)
    assert not within and reason == "max abs diff from the whole variant 5.00e-02 > its tolerance 2.0e-02", reason


def test_a_model_with_nothing_to_cut_is_refused_before_any_variant_is_built(tmp_path, monkeypatch):
    import keras

    from export.cli import main
    from slipway.cli import UserError

    monkeypatch.setattr("slipway.reports.REPORTS_DIR", tmp_path / "reports")
    inputs = keras.Input((4,), name="reading")
    keras.Model(inputs, keras.layers.Dense(2, name="score")(inputs)).save(tmp_path / "plain.keras")
    np.savez(tmp_path / "plain.npz", reading=np.ones((3, 4), np.float32))
    command = ["variants", str(tmp_path / "plain.keras"), "--data", str(tmp_path / "plain.npz"), "--split"]
    with pytest.raises(UserError) as caught:
        main([*command, "--out", str(tmp_path / "out")])
    message = str(caught.value)
    assert "has nothing --split can cut: its first layer 'score' (Dense)" in message, message
    assert message.endswith("make its variants without --split") and "\n" not in message
    assert not (tmp_path / "out").exists()

    with pytest.raises(UserError, match="--split are for your own model: pass its path instead of 'digits'"):
        main(["variants", "digits", "--split"])


def test_a_two_input_two_output_model_keeps_its_stages_per_name_in_every_variant(tmp_path, monkeypatch):
    from export.cli import main
    from export.report import ExportReport
    from export.split_stages import chain

    monkeypatch.setattr("slipway.reports.REPORTS_DIR", tmp_path / "reports")
    model, rows = keras_corpus.image_and_measurements()
    model.save(tmp_path / "mixed.keras")
    np.savez(tmp_path / "mixed.npz", **rows)
    command = ["variants", str(tmp_path / "mixed.keras"), "--data", str(tmp_path / "mixed.npz"), "--variants", "fp32,int8"]
    assert main([*command, "--split", "--measure-rounds", "1", "--measure-seconds", "0.02", "--out", str(tmp_path / "out")]) == 0
    report = ExportReport.model_validate_json((tmp_path / "reports" / "export.json").read_text())
    for row in report.variants:
        folder = tmp_path / "out" / row.name
        core = onnx.load(folder / "split-model.onnx").graph
        assert sorted(i.name for i in core.input) == ["image_preprocessed", "measurements"], row.name
        assert sorted(o.name for o in core.output) == ["label_logits", "value"], row.name
        graphs = [(folder / file).read_bytes() for file in ("preprocess.onnx", "split-model.onnx", "postprocess.onnx")]
        answers, whole = chain(graphs, rows), _run(folder / "model.onnx", rows)
        assert set(row.details["split"]["against_whole"]) == {"label", "value"}, row.name
        for output in ("label", "value"):
            recorded = row.details["split"]["against_whole"][output]["max_abs_diff"]
            assert recorded == pytest.approx(float(np.abs(answers[output] - whole[output]).max()), abs=1e-6), (row.name, output)
        if row.name == "fp32":
            assert row.status == "accepted" and "output 'value' max abs diff from the whole variant" in row.reason
            for output in ("label", "value"):
                np.testing.assert_allclose(answers[output], whole[output], atol=1e-5)
