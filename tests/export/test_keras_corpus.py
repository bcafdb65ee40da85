"""Every common shape of Keras model converts with its own names and answers as Keras does, or is refused in one line.

The corpus (benchmarks/corpus_models.py) is built once per run, tiny and with random
weights, saved as .keras and converted by `python -m export convert` in this process;
the ONNX graphs are then checked against the in-memory Keras models on the same rows, and
every model is published to a version store, served from it by MLServer and asked over REST and gRPC with
tritonclient, by its own input and output names. What no ONNX
graph can hold (a StringLookup, a tf.py_function) is refused by the command run as a
user runs it: one line, exit 2, no traceback.
"""

from __future__ import annotations

import json
import re
import sys

import numpy as np
import onnx
import pytest

from benchmarks import corpus_models as keras_corpus
from export.cli import EXAMPLE_ROWS
from tests.conftest import run_module

pytestmark = pytest.mark.slow

# How each model is called in Keras (its own structure), and the names its ONNX graph and its clients must use.
CALLS = {
    "mlp": (lambda rows: rows["row"], ["row"], ["answer"]),
    "list-io": (lambda rows: [rows["features"], rows["extra"]], ["features", "extra"], ["cls", "score"]),
    "dict-io": (
        lambda rows: {"pixels": rows["pixels"], "measurements": rows["measurements"]},
        ["measurements", "pixels"],
        ["label", "value"],
    ),
    "nested": (lambda rows: rows["reading"], ["reading"], ["kind"]),
    "subclassed": (lambda rows: rows["measurements"], ["measurements"], ["output_0"]),
    "subclassed-tokens": (lambda rows: rows["tokens"], ["tokens"], ["output_0"]),
    "image": (lambda rows: rows["image"], ["image"], ["digit"]),
    "tokens": (lambda rows: rows["tokens"], ["tokens"], ["sentiment"]),
    "lstm": (lambda rows: rows["words"], ["words"], ["topic"]),
    "custom-layer": (lambda rows: rows["reading"], ["reading"], ["grade"]),
    "transformer": (lambda rows: {"sequence": rows["sequence"], "keep": rows["keep"]}, ["keep", "sequence"], ["score"]),
    "mixed": (lambda rows: rows["x"], ["x"], ["confident", "label", "probabilities"]),
}


def keras_answers(name: str, model, rows: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The in-memory Keras model on `rows`, called as it was built, its answers by the names clients use."""
    call, _, outputs = CALLS[name]
    answers = model(call(rows), training=False)
    if isinstance(answers, dict):
        return {key: np.asarray(value) for key, value in answers.items()}
    answers = answers if isinstance(answers, (list, tuple)) else [answers]
    return {key: np.asarray(value) for key, value in zip(outputs, answers)}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """Each corpus model built, saved as .keras with its rows as .npz, and converted once into one repository."""
    import slipway.reports
    from export.cli import main

    root = tmp_path_factory.mktemp("keras-corpus")
    repository = root / "repository"
    reports_dir = tmp_path_factory.mktemp("reports")
    models, rows, reports = {}, {}, {}
    before, slipway.reports.REPORTS_DIR = slipway.reports.REPORTS_DIR, reports_dir
    try:
        for name, build in keras_corpus.CORPUS.items():
            custom = []
            if name in keras_corpus.CUSTOM_SOURCES:  # the user's own layers, in a file Keras is pointed at
                layers = root / f"{name.replace('-', '_')}_layers.py"
                layers.write_text(keras_corpus.CUSTOM_SOURCES[name])
                try:
                    models[name], rows[name] = build(keras_corpus.import_source(layers, layers.stem))
                    models[name].save(root / f"{name}.keras")
                finally:
                    sys.modules.pop(layers.stem)
                custom = ["--custom-objects", f"{layers}:CUSTOM_OBJECTS"]
            else:
                models[name], rows[name] = build()
                models[name].save(root / f"{name}.keras")
            np.savez(root / f"{name}.npz", **rows[name])
            assert (
                main(
                    [
                        "convert",
                        str(root / f"{name}.keras"),
                        "--data",
                        str(root / f"{name}.npz"),
                        "--name",
                        name,
                        "--out",
                        str(repository / name),
                        *custom,
                    ]
                )
                == 0
            ), name
            reports[name] = json.loads((reports_dir / "convert.json").read_text())
    finally:
        slipway.reports.REPORTS_DIR = before
    return {"root": root, "repository": repository, "models": models, "rows": rows, "reports": reports}


@pytest.mark.parametrize("name", list(keras_corpus.CORPUS))
def test_each_model_converts_with_its_own_names_and_answers_as_keras_does(name, corpus):
    import onnxruntime as ort

    _, input_names, output_names = CALLS[name]
    folder, rows = corpus["repository"] / name, corpus["rows"][name]
    graph = onnx.load(folder / "model.onnx").graph
    assert [i.name for i in graph.input] == input_names, name  # the model's own names, nothing captured left as an input
    dtypes = [onnx.helper.tensor_dtype_to_np_dtype(i.type.tensor_type.elem_type) for i in graph.input]
    assert dtypes == [corpus["rows"][name][key].dtype for key in input_names], name  # int64 tokens stay int64, bools bool
    assert sorted(o.name for o in graph.output) == sorted(output_names), name
    assert all(not i.type.tensor_type.shape.dim[0].HasField("dim_value") for i in graph.input), name  # dynamic batch
    report = corpus["reports"][name]
    assert [tensor["name"] for tensor in report["inputs"]] == input_names and report["outputs"] == output_names
    assert report["parity"]["samples"] == keras_corpus.ROWS and report["parity"]["identical_predictions"], report["parity"]
    session = ort.InferenceSession(str(folder / "model.onnx"), providers=["CPUExecutionProvider"])
    for count in (1, keras_corpus.ROWS):
        feeds = {key: array[:count] for key, array in rows.items()}
        got = dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds)))
        for output, expected in keras_answers(name, corpus["models"][name], feeds).items():
            assert got[output].dtype == expected.dtype and got[output].shape == expected.shape, (name, output)
            if expected.dtype.kind == "f":
                np.testing.assert_allclose(got[output], expected, atol=1e-5, err_msg=f"{name}: {output}")
            else:
                np.testing.assert_array_equal(got[output], expected, err_msg=f"{name}: {output}")


@pytest.mark.parametrize("name", list(keras_corpus.CORPUS))
def test_each_converted_model_has_a_float16_copy_that_loads_and_answers_closely(name, corpus):
    """The fp16 variant's conversion on every corpus graph: masks and counts cast to float, a resize, an argmax."""
    import onnxruntime as ort

    from export.float16 import to_float16
    from export.optimize import optimize_graph

    graph = optimize_graph(onnx.load(corpus["repository"] / name / "model.onnx"))
    half = to_float16(graph)
    feeds = corpus["rows"][name]
    full = dict(
        zip(
            [o.name for o in graph.graph.output],
            ort.InferenceSession(graph.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds),
        )
    )
    session = ort.InferenceSession(half.SerializeToString(), providers=["CPUExecutionProvider"])
    for output, answer in zip([o.name for o in session.get_outputs()], session.run(None, feeds)):
        assert answer.dtype == full[output].dtype, (name, output)  # float32 stays float32 at the edges
        if answer.dtype.kind == "f":
            np.testing.assert_allclose(answer, full[output], atol=1e-2, err_msg=f"{name}: {output}")


@pytest.mark.parametrize("name", list(keras_corpus.CORPUS))
def test_each_converted_model_has_an_int8_copy_with_its_names_dtypes_and_shapes(name, corpus, tmp_path, monkeypatch):
    """The int8 variant's quantization on every corpus graph: what it is fed and answers keeps the model's own form."""
    import onnxruntime as ort

    from export.optimize import optimize_graph
    from export.quantize import quantize_int8

    monkeypatch.chdir(tmp_path)
    graph = optimize_graph(onnx.load(corpus["repository"] / name / "model.onnx"))
    feeds = corpus["rows"][name]
    quantized = quantize_int8(graph, feeds)
    full = ort.InferenceSession(graph.SerializeToString(), providers=["CPUExecutionProvider"])
    session = ort.InferenceSession(quantized.SerializeToString(), providers=["CPUExecutionProvider"])
    assert [(i.name, i.type) for i in session.get_inputs()] == [(i.name, i.type) for i in full.get_inputs()], name
    expected = dict(zip([o.name for o in full.get_outputs()], full.run(None, feeds)))
    for output, answer in zip([o.name for o in session.get_outputs()], session.run(None, feeds)):
        assert answer.dtype == expected[output].dtype and answer.shape == expected[output].shape, (name, output)
        if answer.dtype.kind == "f":  # close in scale: int8 of random weights moves answers, not their form
            assert np.abs(answer - expected[output]).max() <= 0.25 * max(1.0, np.abs(expected[output]).max()), (name, output)


def test_the_transformer_block_quantizes_to_int8_and_leaves_no_file_behind(corpus, tmp_path, monkeypatch):
    """ONNX Runtime's symbolic shape inference gives up on the attention block's reshapes; int8 is still made."""
    import onnxruntime as ort

    from export.optimize import optimize_graph
    from export.quantize import quantize_int8

    monkeypatch.chdir(tmp_path)  # where ONNX Runtime drops its leftover when the inference gives up
    graph = optimize_graph(onnx.load(corpus["repository"] / "transformer" / "model.onnx"))
    rows = corpus["rows"]["transformer"]
    quantized = quantize_int8(graph, rows)
    assert any(node.op_type == "QuantizeLinear" for node in quantized.graph.node)
    score = ort.InferenceSession(quantized.SerializeToString(), providers=["CPUExecutionProvider"]).run(["score"], rows)[0]
    expected = keras_answers("transformer", corpus["models"]["transformer"], rows)["score"]
    assert score.shape == expected.shape and np.corrcoef(score.ravel(), expected.ravel())[0, 1] > 0.9
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("name, build, output", [("tokens", "token_gru", "sentiment"), ("lstm", "token_lstm", "topic")])
def test_a_token_model_takes_any_sequence_length(name, build, output, corpus):
    import onnxruntime as ort

    _, rows = getattr(keras_corpus, build)(seed=3, length=4)
    session = ort.InferenceSession(str(corpus["repository"] / name / "model.onnx"), providers=["CPUExecutionProvider"])
    tokens = session.get_inputs()[0]
    assert tokens.type == "tensor(int64)" and not isinstance(tokens.shape[1], int), tokens.shape  # the length is left open
    got = session.run([output], rows)[0]
    expected = keras_answers(name, corpus["models"][name], rows)[output]
    np.testing.assert_allclose(got, expected, atol=1e-5)


# Every corpus model: dict I/O; int64, bool inputs; int64, bool outputs; an LSTM; a custom layer (the server needs no
# class: it is ONNX); the Sequential, nested and subclassed ones; the image model with its preprocessing inside.
SERVED = tuple(keras_corpus.CORPUS)


def test_every_corpus_model_publishes_and_serves_over_rest_and_grpc_by_its_own_names(corpus, tmp_path, capsys):
    """Each artifact is published to a version store as a user publishes it, and what the store holds is served."""
    import shutil

    from export.cli import main
    from loadtest.smoke import check_grpc, check_http
    from slipway.local_server import LocalServer

    served, store = tmp_path / "repository", tmp_path / "store"
    for name in SERVED:
        capsys.readouterr()
        command = ["versions", "publish", str(corpus["repository"] / name), "--store", str(store), "--json"]
        assert main([*command, "--reports", str(tmp_path / "no-reports")]) == 0, name
        record = json.loads(capsys.readouterr().out)
        assert (record["name"], record["version"]) == (name, "1"), record
        shutil.copytree(store / "artifacts" / name / "1", served / name)
    with np.load(served / "dict-io" / "input-example.npz") as example:
        expected = keras_answers(
            "dict-io",
            corpus["models"]["dict-io"],
            {"pixels": example["input:pixels"], "measurements": example["input:measurements"]},
        )
        for output in ("label", "value"):
            np.testing.assert_allclose(example[f"output:{output}"], expected[output], atol=1e-5)
    with LocalServer(served, ready_timeout_s=120) as server:
        for name in SERVED:
            for result in (check_http(server.http_url, name, served / name), check_grpc(server.grpc_target, name, served / name)):
                assert result.predictions_match and result.rows == EXAMPLE_ROWS, (name, result)
        metadata = check_http(server.http_url, "dict-io", served / "dict-io").metadata
        assert {(t["name"], t["datatype"], tuple(t["shape"])) for t in metadata["inputs"]} == {
            ("pixels", "FP32", (-1, 8, 8, 2)),
            ("measurements", "FP32", (-1, 5)),
        }
        assert {(t["name"], t["datatype"]) for t in metadata["outputs"]} == {("label", "FP32"), ("value", "FP32")}
        mixed = check_http(server.http_url, "mixed", served / "mixed").metadata
        assert {(t["name"], t["datatype"]) for t in mixed["outputs"]} == {
            ("probabilities", "FP32"),
            ("label", "INT64"),
            ("confident", "BOOL"),
        }
        tokens = check_http(server.http_url, "tokens", served / "tokens").metadata
        assert [(t["name"], t["datatype"]) for t in tokens["inputs"]] == [("tokens", "INT64")]
        encoder = check_http(server.http_url, "transformer", served / "transformer").metadata
        assert {(t["name"], t["datatype"]) for t in encoder["inputs"]} == {("sequence", "FP32"), ("keep", "BOOL")}


# --- what no ONNX graph can hold: refused before conversion, in one line, exit 2 ---------------------------------


def _refused(result, expected: str) -> str:
    errors = [line for line in result.stderr.splitlines() + result.stdout.splitlines() if line.startswith("error:")]
    assert result.returncode == 2 and "Traceback" not in result.stderr + result.stdout, result.stderr
    assert len(errors) == 1 and expected in errors[0], result.stderr + result.stdout
    return errors[0]


def test_a_string_lookup_model_is_refused_naming_the_layer_and_the_fix(tmp_path, reports_env):
    keras_corpus.string_lookup_model().save(tmp_path / "words.keras")
    np.savez(tmp_path / "words.npz", word=np.array([["red"], ["blue"]]))
    result = run_module(
        "export",
        "convert",
        str(tmp_path / "words.keras"),
        "--data",
        str(tmp_path / "words.npz"),
        "--out",
        str(tmp_path / "out"),
        env=reports_env,
        check=False,
        warm=False,
    )
    line = _refused(result, "StringLookup layer 'vocabulary' works on strings, which an ONNX graph cannot")
    assert "pre-processing stage" in line and "integer tokens" in line
    assert not (tmp_path / "out").exists()


def test_a_py_function_model_is_refused_naming_the_layer_and_the_fix(tmp_path, reports_env):
    import importlib.util

    source = tmp_path / "python_layers.py"
    source.write_text(keras_corpus.PYTHON_LAYER_SOURCE)
    spec = importlib.util.spec_from_file_location("python_layers", source)
    module = importlib.util.module_from_spec(spec)
    sys.modules["python_layers"] = module
    try:
        spec.loader.exec_module(module)
        keras_corpus.python_step_model(module).save(tmp_path / "python.keras")
    finally:
        sys.modules.pop("python_layers")
    np.savez(tmp_path / "rows.npz", x=np.ones((4, 4), np.float32))
    result = run_module(
        "export",
        "convert",
        str(tmp_path / "python.keras"),
        "--data",
        str(tmp_path / "rows.npz"),
        "--custom-objects",
        f"{source}:CUSTOM_OBJECTS",
        "--out",
        str(tmp_path / "out"),
        env=reports_env,
        check=False,
        warm=False,
    )
    line = _refused(result, "layer 'python_step' runs Python (tf.py_function")
    assert "pre-processing stage" in line
    assert not (tmp_path / "out").exists()


def test_a_parity_failure_names_the_output_the_row_and_the_difference(corpus, tmp_path, monkeypatch):
    from export.cli import main
    from slipway.cli import UserError

    monkeypatch.setattr("slipway.reports.REPORTS_DIR", tmp_path / "reports")
    root = corpus["root"]
    with pytest.raises(UserError) as caught:  # float32 rounding (~1e-7) is over a tolerance no conversion meets
        main(
            [
                "convert",
                str(root / "list-io.keras"),
                "--data",
                str(root / "list-io.npz"),
                "--parity-tolerance",
                "1e-12",
                "--out",
                str(tmp_path / "out"),
            ]
        )
    message = str(caught.value)
    found = re.search(
        r"beyond --parity-tolerance, worst at output '(cls|score)', row (\d+): abs diff ([0-9.e+-]+) "
        r"\(allowed [0-9.e+-]+\); nothing was written",
        message,
    )
    assert found and "\n" not in message, message
    assert 0 <= int(found.group(2)) < keras_corpus.ROWS and 0 < float(found.group(3)) < 1e-5  # float32 rounding, nothing more
    assert not (tmp_path / "out").exists()


def test_the_dict_model_fine_tunes_on_dict_rows_for_its_pruned_and_slim_variants(corpus, tmp_path, monkeypatch):
    """Fine-tuning feeds the model as it was built too: dict inputs and dict targets, under its own dict loss."""
    import keras

    from export.cli import main
    from export.report import ExportReport

    monkeypatch.setattr("slipway.reports.REPORTS_DIR", tmp_path / "reports")
    model, rows = keras_corpus.functional_dict_io()
    model.compile(keras.optimizers.Adam(1e-3), {"label": "sparse_categorical_crossentropy", "value": "mean_squared_error"})
    model.save(tmp_path / "dict-io.keras")
    labels = np.random.default_rng(2).integers(0, 4, keras_corpus.ROWS)
    np.savez(tmp_path / "train.npz", **rows, label=labels, value=rows["measurements"][:, :1])
    assert (
        main(
            [
                "variants",
                str(tmp_path / "dict-io.keras"),
                "--data",
                str(corpus["root"] / "dict-io.npz"),
                "--train",
                str(tmp_path / "train.npz"),
                "--variants",
                "fp32,pruned,slim",
                "--fine-tune-epochs",
                "1",
                "--accuracy-budget",
                "100",
                "--out",
                str(tmp_path / "variants"),
                "--measure-rounds",
                "1",
                "--measure-seconds",
                "0.02",
            ]
        )
        == 0
    )
    report = ExportReport.model_validate_json((tmp_path / "reports" / "export.json").read_text())
    assert [row.name for row in report.variants] == ["fp32", "pruned", "slim"]
    assert (
        "loss {label: sparse_categorical_crossentropy, value: mean_squared_error}" in report.variants[1].details["fine_tuned_on"]
    )
    for variant in ("pruned", "slim"):
        graph = onnx.load(tmp_path / "variants" / variant / "model.onnx").graph
        assert [i.name for i in graph.input] == ["measurements", "pixels"] and {o.name for o in graph.output} == {
            "label",
            "value",
        }


def test_a_subclassed_token_model_s_pruned_variant_takes_its_int64_tokens(corpus, tmp_path, monkeypatch):
    """A subclassed model keeps its build shapes but not their dtypes: the pruned copy, converted again after its
    fine-tune, takes the int64 tokens the rows gave its source (it took float32 and ONNX Runtime refused the rows)."""
    from benchmarks.keras_corpus import write_training_rows
    from export.cli import main

    monkeypatch.setattr("slipway.reports.REPORTS_DIR", tmp_path / "reports")
    name, root = "subclassed-tokens", corpus["root"]
    train, _ = write_training_rows(name, corpus["models"][name], None, tmp_path / "train.npz")
    assert train is not None
    command = ["variants", str(root / f"{name}.keras"), "--data", str(root / f"{name}.npz"), "--train", str(train)]
    options = ["--loss", "mse", "--variants", "fp32,pruned", "--fine-tune-epochs", "1", "--accuracy-budget", "100"]
    timing = ["--measure-rounds", "1", "--measure-seconds", "0.02"]
    assert main([*command, *options, "--out", str(tmp_path / "variants"), *timing]) == 0
    for variant in ("fp32", "pruned"):
        (tokens,) = onnx.load(tmp_path / "variants" / variant / "model.onnx").graph.input
        assert tokens.type.tensor_type.elem_type == onnx.TensorProto.INT64, variant


def _variants(corpus, out, *options):
    from export.cli import main

    root = corpus["root"]
    command = ["variants", str(root / "dict-io.keras"), "--data", str(root / "dict-io.npz"), "--variants", "fp32,int8,fp16"]
    return main([*command, *options, "--out", str(out), "--measure-rounds", "1", "--measure-seconds", "0.02"])


def test_each_output_of_a_two_output_model_is_judged_by_its_own_budget(corpus, tmp_path, monkeypatch):
    """dict-io's 'label' (4 class scores) may change its top class on any row; its 'value' must stay within 1e-4 of
    scale: fp32 meets both, fp16 and int8 break 'value' and are rejected by name, whatever 'label' does."""
    from export.report import ExportReport

    monkeypatch.setattr("slipway.reports.REPORTS_DIR", tmp_path / "reports")
    budgets = ("--output-budget", "label=100", "--output-tolerance")
    assert _variants(corpus, tmp_path / "tight", *budgets, "value=1e-4") == 0
    report = ExportReport.model_validate_json((tmp_path / "reports" / "export.json").read_text())
    rows = {row.name: row for row in report.variants}
    assert report.budget["outputs"] == {
        "label": {"points": 100.0, "tolerance": None},
        "value": {"points": None, "tolerance": 1e-4},
    }
    assert rows["fp32"].status == "accepted" and report.chosen.name == "fp32", rows["fp32"].reason
    for variant in ("fp16", "int8"):
        assert rows[variant].status == "rejected" and rows[variant].reason.startswith("output 'value': max abs diff")
        assert rows[variant].outputs["value"]["max_abs_diff"] > 1e-4 * max(1.0, rows[variant].outputs["value"]["scale"])
    assert set(rows["int8"].outputs) == {"label", "value"} and rows["int8"].outputs["value"]["disagreement_points"] is None

    assert _variants(corpus, tmp_path / "loose", *budgets, "value=0.5") == 0  # the same variants within a looser one
    report = ExportReport.model_validate_json((tmp_path / "reports" / "export.json").read_text())
    assert all(row.status == "accepted" for row in report.variants), [row.reason for row in report.variants]


@pytest.mark.parametrize(
    "options, expected",
    [
        (
            ("--output-budget", "value=1"),
            "output 'value' (float32 [1] a row) scores no classes, so it has no top-1 answer to agree on: give it "
            "--output-tolerance value=DIFF instead of --output-budget",
        ),
        (("--output-tolerance", "score=0.1"), "dict-io has no output 'score': its outputs are 'label', 'value'"),
    ],
)
def test_an_output_budget_the_model_cannot_be_judged_by_is_refused_in_one_line(options, expected, corpus, tmp_path, monkeypatch):
    from slipway.cli import UserError

    monkeypatch.setattr("slipway.reports.REPORTS_DIR", tmp_path / "reports")
    with pytest.raises(UserError) as caught:
        _variants(corpus, tmp_path / "out", *options)
    assert str(caught.value) == expected
    assert not (tmp_path / "out").exists()
