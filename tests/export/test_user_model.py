"""`python -m export convert MODEL`: the user's own trained Keras / TensorFlow models, in every format, converted and served.

The models are built and trained here (tests/export/user_models.py). Conversions run
in this process through the command's `main` (TensorFlow is imported once, not once
per conversion); one runs as a user would, in its own process, to pin the exit codes.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

from slipway.artifact import verify_artifact
from slipway.cli import UserError
from tests.conftest import run_module
from tests.export import user_models

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    """Every user model trained once and saved in the three formats, with its held-out rows as .npz."""
    root = tmp_path_factory.mktemp("user-models")
    layers, layers_file = user_models.custom_layers(root)
    two, two_data = user_models.two_input_model()
    np.savez(root / "two.npz", **{key: value[-64:] for key, value in two_data.items()})
    residual, splits = user_models.residual_cnn()
    np.savez(root / "residual.npz", pixels=splits.x_test, labels=splits.y_test.astype(np.int64))
    np.savez(root / "residual-train.npz", pixels=splits.x_train, labels=splits.y_train.astype(np.int64))
    custom, custom_data = user_models.custom_layer_model(layers)
    np.savez(root / "custom.npz", **custom_data)
    paths = {
        "two": user_models.save_all(two, root / "saved", "two"),
        "residual": user_models.save_all(residual, root / "saved", "residual"),
        "custom": user_models.save_all(custom, root / "saved", "custom"),
    }
    sys.modules.pop(user_models.CUSTOM_MODULE)  # as in the user's shell: the layers' module is not importable from here
    return {
        "root": root,
        "layers_file": layers_file,
        "layers": layers,
        "models": {"two": two, "residual": residual, "custom": custom},
        "paths": paths,
    }


@pytest.fixture
def convert(monkeypatch, tmp_path):
    """`python -m export convert ...` in this process, its report sent to a folder of the test's own."""
    from export.cli import main

    monkeypatch.setattr("slipway.reports.REPORTS_DIR", tmp_path / "reports")

    def run(*args: str) -> dict:
        assert main(["convert", *map(str, args)]) == 0
        return json.loads((tmp_path / "reports" / "convert.json").read_text())

    return run


@pytest.fixture(scope="module")
def served(workspace, tmp_path_factory):
    """Each model converted from each format into one model repository (one artifact folder per name)."""
    from export.cli import main

    repository = tmp_path_factory.mktemp("repository")
    root, paths = workspace["root"], workspace["paths"]
    jobs = {
        "two-keras": (paths["two"]["keras"], "two.npz", []),
        "two-h5": (paths["two"]["h5"], "two.npz", []),
        "two-savedmodel": (paths["two"]["savedmodel"], "two.npz", []),
        "residual-keras": (paths["residual"]["keras"], "residual.npz", []),
        "custom-h5": (paths["custom"]["h5"], "custom.npz", ["--custom-objects", f"{workspace['layers_file']}:custom_objects"]),
        "custom-savedmodel": (paths["custom"]["savedmodel"], "custom.npz", []),
    }
    reports = {}
    reports_dir = tmp_path_factory.mktemp("reports")
    import slipway.reports

    before = slipway.reports.REPORTS_DIR
    slipway.reports.REPORTS_DIR = reports_dir
    try:
        for name, (model, data, extra) in jobs.items():
            assert (
                main(["convert", str(model), "--data", str(root / data), "--name", name, "--out", str(repository / name), *extra])
                == 0
            )
            reports[name] = json.loads((reports_dir / "convert.json").read_text())
    finally:
        slipway.reports.REPORTS_DIR = before
    return repository, reports


def test_each_format_converts_with_its_names_dynamic_batch_and_parity(served, workspace):
    import onnxruntime as ort

    repository, reports = served
    two = workspace["models"]["two"]
    with np.load(workspace["root"] / "two.npz") as data:
        features, extra = data["features"], data["extra"]
    expected_cls, expected_score = two.predict([features, extra], verbose=0)
    for name in ("two-keras", "two-h5", "two-savedmodel"):
        verify_artifact(repository / name)
        graph = onnx.load(repository / name / "model.onnx").graph
        assert [i.name for i in graph.input] == ["features", "extra"] or name == "two-savedmodel", name
        assert {i.name for i in graph.input} == {"features", "extra"}
        assert all(not i.type.tensor_type.shape.dim[0].HasField("dim_value") for i in graph.input), name  # dynamic batch
        session = ort.InferenceSession(str(repository / name / "model.onnx"), providers=["CPUExecutionProvider"])
        for rows in (1, 7):
            answers = dict(
                zip(
                    [o.name for o in session.get_outputs()],
                    session.run(None, {"features": features[:rows], "extra": extra[:rows]}),
                )
            )
            cls_name, score_name = ("cls", "score") if name != "two-savedmodel" else ("output_0", "output_1")
            np.testing.assert_allclose(answers[cls_name], expected_cls[:rows], atol=1e-5)
            np.testing.assert_allclose(answers[score_name], expected_score[:rows], atol=1e-5)
        report = reports[name]
        assert report["parity"]["identical_predictions"] and report["parity"]["samples"] == 64
        assert report["source_format"] == name.split("-")[1] and report["onnx_test_accuracy"] > 0.8
    residual = reports["residual-keras"]
    assert residual["inputs"] == [{"name": "pixels", "dtype": "float32", "shape": ["N", 8, 8, 1]}] and residual["outputs"] == [
        "digit"
    ]
    assert residual["onnx_test_accuracy"] > 0.7  # trained: chance is 0.1


def test_converted_models_serve_over_rest_and_grpc(served, workspace):
    from loadtest.smoke import check_grpc, check_http
    from slipway.local_server import LocalServer

    repository, _ = served
    custom = workspace["models"]["custom"]
    with np.load(repository / "custom-h5" / "input-example.npz") as example:
        np.testing.assert_allclose(example["output:probabilities"], custom.predict(example["input:x"], verbose=0), atol=1e-5)
    with LocalServer(repository, ready_timeout_s=120) as server:
        for name in sorted(path.name for path in repository.iterdir()):
            for result in (
                check_http(server.http_url, name, repository / name),
                check_grpc(server.grpc_target, name, repository / name),
            ):
                assert result.predictions_match and result.rows == 32, (name, result)
        rest = check_http(server.http_url, "two-keras", repository / "two-keras")
        assert {tensor["name"] for tensor in rest.metadata["outputs"]} == {"cls", "score"}
        assert {(tensor["name"], tuple(tensor["shape"])) for tensor in rest.metadata["inputs"]} == {
            ("features", (-1, 4)),
            ("extra", (-1, 3)),
        }


# --- bad input: one line naming what was expected, exit 2, nothing written ---------------------------------


def _refused(convert, tmp_path: Path, *args, expected: str) -> None:
    out = tmp_path / "out"
    with pytest.raises(UserError) as caught:
        convert(*args, "--out", out)
    message = str(caught.value)
    assert "\n" not in message and expected in message, message
    assert not out.exists() and not list(tmp_path.glob(".out.*"))


def test_a_file_that_is_not_a_model_exits_2_with_one_line(tmp_path, reports_env):
    (tmp_path / "notes.keras").write_text("not a model\n")
    np.savez(tmp_path / "data.npz", x=np.zeros((2, 4), np.float32))
    out = tmp_path / "out"
    result = run_module(
        "export",
        "convert",
        str(tmp_path / "notes.keras"),
        "--data",
        str(tmp_path / "data.npz"),
        "--out",
        str(out),
        env=reports_env,
        check=False,
    )
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert len(errors) == 1 and "is not a model: expected a .keras file" in errors[0], result.stderr
    assert not out.exists()


def test_custom_layers_are_named_until_their_classes_are_given(workspace, convert, tmp_path):
    paths = workspace["paths"]["custom"]
    for fmt in ("keras", "h5"):
        _refused(
            convert,
            tmp_path,
            paths[fmt],
            "--data",
            workspace["root"] / "custom.npz",
            expected="uses custom layers Keras cannot rebuild without their classes (Scale): pass --custom-objects module:attr",
        )
    report = convert(
        paths["keras"],
        "--data",
        workspace["root"] / "custom.npz",
        "--out",
        tmp_path / "custom",
        "--custom-objects",
        f"{workspace['layers_file']}:CUSTOM_OBJECTS",
    )
    assert report["parity"]["identical_predictions"] and report["model_name"] == "custom"
    _refused(
        convert,
        tmp_path,
        paths["keras"],
        "--data",
        workspace["root"] / "custom.npz",
        "--custom-objects",
        f"{workspace['layers_file']}:Scale",
        expected="must be a dict {name: class} or a function returning one",
    )


@pytest.mark.parametrize(
    "arrays, expected",
    [
        (
            {"features": np.zeros((5, 4), np.float32)},
            "the model takes 'features': float32 [N, 4], 'extra': float32 [N, 3]: missing ['extra']",
        ),
        (
            {"features": np.zeros((5, 5), np.float32), "extra": np.zeros((5, 3), np.float32)},
            "held-out array 'features' is float32 [5, 5]; the model's input 'features' takes float32 [N, 4]",
        ),
        ({"features": np.zeros((5, 4)), "extra": np.zeros((5, 3), np.float32)}, "convert with .astype(np.float32)"),
        (
            {"features": np.zeros((5, 4), np.float32), "extra": np.zeros((5, 3), np.float32), "labels": np.zeros(4, np.int64)},
            "'labels' must be a 1-D integer array with one class index per row (5 rows), got int64 [4]",
        ),
    ],
)
def test_data_that_does_not_fit_the_model_is_refused(arrays, expected, workspace, convert, tmp_path):
    np.savez(tmp_path / "bad.npz", **arrays)
    _refused(convert, tmp_path, workspace["paths"]["two"]["keras"], "--data", tmp_path / "bad.npz", expected=expected)


def test_ops_the_converter_cannot_take_are_named(workspace, convert, tmp_path):
    model = user_models.unconvertible_model(workspace["layers"])
    model.export(tmp_path / "lgamma", verbose=False)
    np.savez(tmp_path / "data.npz", x=np.ones((4, 4), np.float32))
    _refused(
        convert,
        tmp_path,
        tmp_path / "lgamma",
        "--data",
        tmp_path / "data.npz",
        expected="uses TensorFlow ops tf2onnx cannot convert to ONNX (Lgamma)",
    )


def test_other_bad_models_are_refused(convert, tmp_path):
    (tmp_path / "empty").mkdir()
    _refused(convert, tmp_path, tmp_path / "empty", expected="is a folder without saved_model.pb")
    _refused(convert, tmp_path, tmp_path / "missing.keras", expected="no model at")
    _refused(convert, tmp_path, tmp_path / "empty", "--name", "no spaces", expected="cannot be used in /v2/models/<name>")


# --- variants: the same fp32/int8/fp16/pruned road, fine-tuned on the user's rows under the model's loss ----


@pytest.fixture(scope="module")
def user_variants(workspace, tmp_path_factory):
    """`python -m export variants two.keras --data --train` (short fine-tune, short timing): its folder and report."""
    import slipway.reports
    from export.cli import main

    root = workspace["root"]
    rng = np.random.default_rng(1)
    features, extra = rng.normal(0, 1, (256, 4)).astype(np.float32), rng.normal(0, 1, (256, 3)).astype(np.float32)
    np.savez(
        root / "two-train.npz",
        features=features,
        extra=extra,
        cls=(features[:, 0] > 0).astype(np.int64) + (extra[:, 0] > 0.5),
        score=extra.sum(axis=1, keepdims=True),
    )
    out = tmp_path_factory.mktemp("variants") / "two"
    reports_dir = tmp_path_factory.mktemp("reports")
    before, slipway.reports.REPORTS_DIR = slipway.reports.REPORTS_DIR, reports_dir
    try:
        assert (
            main(
                [
                    "variants",
                    str(workspace["paths"]["two"]["keras"]),
                    "--data",
                    str(root / "two.npz"),
                    "--train",
                    str(root / "two-train.npz"),
                    "--name",
                    "two",
                    "--out",
                    str(out),
                    "--sparsity",
                    "0.3",
                    "--fine-tune-epochs",
                    "2",
                    "--accuracy-budget",
                    "10",
                    "--measure-rounds",
                    "1",
                    "--measure-seconds",
                    "0.02",
                ]
            )
            == 0
        )
    finally:
        slipway.reports.REPORTS_DIR = before
    return out, json.loads((reports_dir / "export.json").read_text())


def test_variants_of_a_user_model_are_fine_tuned_on_its_rows_under_its_own_loss(user_variants):
    from export.report import ExportReport

    out, report = user_variants
    parsed = ExportReport.model_validate(report)
    assert [row.name for row in parsed.variants] == ["fp32", "int8", "fp16", "pruned", "pruned-int8", "slim", "slim-int8"]
    slim = next(row for row in parsed.variants if row.name == "slim")
    assert slim.parameters < next(row for row in parsed.variants if row.name == "fp32").parameters  # the hidden layer narrowed
    assert parsed.baseline.name == "keras" and parsed.budget["basis"] == "accuracy drop" and parsed.evaluation["rows"] == 64
    pruned = next(row for row in parsed.variants if row.name == "pruned")
    assert "loss [sparse_categorical_crossentropy, mean_squared_error]" in pruned.details["fine_tuned_on"]
    assert pruned.nonzero_parameters < 0.8 * pruned.parameters
    assert parsed.calibration["note"].startswith("training rows")
    for variant in ("fp32", "int8", "pruned", "slim"):
        graph = onnx.load(out / variant / "model.onnx").graph
        assert {i.name for i in graph.input} == {"features", "extra"} and {o.name for o in graph.output} == {"cls", "score"}
    assert parsed.chosen.name in {row.name for row in parsed.variants if row.status == "accepted"}


def test_a_user_model_s_int8_variant_serves_over_rest_and_grpc(user_variants):
    from loadtest.smoke import check_grpc, check_http
    from slipway.local_server import LocalServer

    out, _ = user_variants
    with LocalServer(out / "int8") as server:
        for result in (check_http(server.http_url, "two", out / "int8"), check_grpc(server.grpc_target, "two", out / "int8")):
            assert result.predictions_match and result.rows == 32


@pytest.fixture
def variants(monkeypatch, tmp_path):
    """`python -m export variants ...` in this process, for requests refused before any work."""
    from export.cli import main

    monkeypatch.setattr("slipway.reports.REPORTS_DIR", tmp_path / "reports")
    return lambda *args: main(["variants", *map(str, args)])


def test_variants_requests_that_cannot_work_are_refused(workspace, variants, tmp_path):
    root, two = workspace["root"], workspace["paths"]["two"]
    np.savez(tmp_path / "no-targets.npz", features=np.zeros((4, 4), np.float32), extra=np.zeros((4, 3), np.float32))
    for args, expected in [
        ((two["keras"],), "pass --data HELD-OUT.npz"),
        (
            (two["savedmodel"], "--data", root / "two.npz", "--train", root / "two.npz"),
            "is a SavedModel: pruned and slim variants fine-tune a Keras model",
        ),
        ((two["keras"], "--data", root / "two.npz", "--train", tmp_path / "no-targets.npz"), "has no target for output 'cls'"),
        (
            (two["keras"], "--data", root / "two.npz", "--train", root / "two-train.npz", "--loss", "no_such_loss"),
            "is not a Keras loss",
        ),
        ((two["keras"], "--data", root / "two.npz", "--loss", "mse"), "pass --train TRAIN.npz with it"),
        (
            (two["savedmodel"], "--data", root / "two.npz", "--variants", "fp32,pruned"),
            "pruned need(s) a Keras model with training data",
        ),
    ]:
        out = tmp_path / "out"
        with pytest.raises(UserError) as caught:
            variants(*args, "--out", out)
        assert expected in str(caught.value) and "\n" not in str(caught.value), str(caught.value)
        assert not out.exists()


def test_a_residual_cnn_slims_across_its_addition_and_stays_within_budget_after_the_fine_tune(workspace, tmp_path, monkeypatch):
    from export.cli import main
    from export.report import ExportReport

    monkeypatch.setattr("slipway.reports.REPORTS_DIR", tmp_path / "reports")
    root, out = workspace["root"], tmp_path / "residual"
    # the default accuracy budget and learning rate (half the 1e-2 the model was compiled with); 60 short epochs (~10 s)
    assert (
        main(
            [
                "variants",
                str(workspace["paths"]["residual"]["keras"]),
                "--data",
                str(root / "residual.npz"),
                "--train",
                str(root / "residual-train.npz"),
                "--variants",
                "fp32,slim",
                "--fine-tune-epochs",
                "60",
                "--out",
                str(out),
                "--measure-rounds",
                "1",
                "--measure-seconds",
                "0.02",
            ]
        )
        == 0
    )
    report = ExportReport.model_validate_json((tmp_path / "reports" / "export.json").read_text())
    slim = next(row for row in report.variants if row.name == "slim")
    assert report.budget["accuracy_points"] == 0.5 and report.baseline.accuracy > 0.9  # a trained original, the default budget
    assert slim.status == "accepted" and slim.accuracy_drop_points <= 0.5, slim  # a 16-filter model at half width
    assert slim.details["fine_tune_learning_rate"] == pytest.approx(5e-3) and slim.details["best_epoch_kept"]
    graph = onnx.load(out / "slim" / "model.onnx").graph
    widths = {init.name: list(init.dims) for init in graph.initializer if len(init.dims) == 4}
    assert max(dims[0] for dims in widths.values()) == 8  # the stem and both block convolutions: 16 -> 8 filters, together


def test_a_sequential_model_converts_with_its_input_s_name_and_its_last_layer_s(convert, tmp_path):
    import keras

    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [
            keras.Input((5,), name="row"),
            keras.layers.Dense(8, activation="relu"),
            keras.layers.Dense(2, activation="softmax", name="answer"),
        ]
    )
    model.save(tmp_path / "seq.keras")
    np.savez(tmp_path / "rows.npz", row=np.random.default_rng(0).random((12, 5)).astype(np.float32), labels=np.arange(12) % 2)
    report = convert(tmp_path / "seq.keras", "--data", tmp_path / "rows.npz", "--out", tmp_path / "seq")
    assert report["inputs"] == [{"name": "row", "dtype": "float32", "shape": ["N", 5]}] and report["outputs"] == ["answer"]
    assert report["parity"]["identical_predictions"] and report["model_name"] == "seq"
    with np.load(tmp_path / "seq" / "input-example.npz") as example:
        assert sorted(example.files) == ["input:row", "labels", "output:answer"]


def test_a_savedmodel_with_several_signatures_converts_the_one_named(convert, tmp_path):
    import keras
    import tensorflow as tf

    class TwoWays(tf.Module):
        def __init__(self):
            super().__init__()
            self.weights = tf.Variable([[1.0, 2.0], [3.0, 4.0]])

        @tf.function(input_signature=[tf.TensorSpec((None, 2), tf.float32, name="x")])
        def scale(self, x):
            return {"scaled": tf.matmul(x, self.weights)}

        @tf.function(input_signature=[tf.TensorSpec((None, 2), tf.float32, name="x")])
        def shift(self, x):
            return {"shifted": x + 1.0}

    module = TwoWays()
    tf.saved_model.save(module, str(tmp_path / "two-ways"), signatures={"scale": module.scale, "shift": module.shift})
    rows = np.arange(12, dtype=np.float32).reshape(6, 2)
    np.savez(tmp_path / "rows.npz", x=rows)
    _refused(
        convert,
        tmp_path,
        tmp_path / "two-ways",
        "--data",
        tmp_path / "rows.npz",
        expected="has no 'serving_default' signature: pass --signature with one of scale, shift",
    )
    report = convert(tmp_path / "two-ways", "--data", tmp_path / "rows.npz", "--signature", "scale", "--out", tmp_path / "scale")
    assert report["outputs"] == ["scaled"] and report["parity"]["max_abs_diff"] == 0.0
    with np.load(tmp_path / "scale" / "input-example.npz") as example:
        np.testing.assert_allclose(example["output:scaled"], rows @ np.array([[1.0, 2.0], [3.0, 4.0]], np.float32))
    keras.Sequential([keras.Input((2,), name="x"), keras.layers.Dense(1)]).save(tmp_path / "plain.keras")
    _refused(
        convert,
        tmp_path,
        tmp_path / "plain.keras",
        "--data",
        tmp_path / "rows.npz",
        "--signature",
        "scale",
        expected="--signature scale chooses among a SavedModel's signatures; ",
    )
