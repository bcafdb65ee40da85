"""The rows a model is judged, calibrated and fine-tuned on: the user's .npz files, or the demo's digits split.

The demo and a user's model take the same road; only where the rows come from differs.
Every file is checked against the model's own inputs (names, dtypes, shapes) before any
conversion, so a mismatch is one line naming what the model takes.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from export.input_spec import InputSpec
from export.keras_load import LoadedModel
from export.measure import Feeds
from export.onnx_import import LABELS_KEY, ImportCheckError, read_rows
from export.training_rows import TrainingRows


@dataclass(frozen=True)
class Rows:
    """Held-out rows by input name, their labels when known, and where they came from (for the report)."""

    feeds: Feeds
    labels: np.ndarray | None
    note: str
    fingerprint: str | None = None  # the demo's data fingerprint (training lineage)

    @property
    def count(self) -> int:
        return len(next(iter(self.feeds.values())))


def user_rows(path: Path, model: LoadedModel, *, what: str) -> Rows:
    """An .npz of rows named like the model's inputs (plus optional `labels`), checked against them."""
    adopt_data_dtypes(path, model)
    feeds, labels = read_rows(path, model.inputs, what=what, optional_labels=True)
    rows = len(next(iter(feeds.values())))
    return Rows(feeds, labels, f"{path}, {rows} {'labelled ' if labels is not None else ''}rows")


def adopt_data_dtypes(path: Path, model: LoadedModel) -> None:
    """A subclassed model keeps no input dtypes (only build shapes; the policy's float32 is a guess): the first rows
    it is given set them, numbers or bools, so that integer tokens stay integers in the ONNX graph."""
    guessed = [spec for spec in model.inputs if spec.dtype_guessed]
    if not guessed:
        return
    try:
        with np.load(path, allow_pickle=False) as archive:
            dtypes = {key: archive[key].dtype for key in archive.files if key != LABELS_KEY}
    except Exception:  # read_rows says what is wrong with the file
        return
    if len(model.inputs) == 1 and len(dtypes) == 1:
        dtypes = {model.inputs[0].name: next(iter(dtypes.values()))}
    model.inputs = [
        InputSpec(spec.name, dtypes[spec.name], spec.shape)
        if spec.dtype_guessed and spec.name in dtypes and dtypes[spec.name].kind in "biuf"
        else spec
        for spec in model.inputs
    ]


def demo_rows(model: LoadedModel, model_path: Path) -> Rows:
    """The digits held-out split (the seed from the training config beside the model), when the model takes digits."""
    from export.data import IMAGE_SHAPE, load_digits_splits
    from export.train import read_train_config

    takes = ", ".join(f"{spec.name!r}: {spec.describe()}" for spec in model.inputs)
    if len(model.inputs) != 1 or model.inputs[0].shape[1:] != IMAGE_SHAPE or model.inputs[0].dtype != np.float32:
        raise ImportCheckError(
            f"{model_path} takes {takes}, not the demo's 8x8 digits: pass --data DATA.npz with held-out "
            "rows, one array per input named like it (optionally 'labels')"
        )
    config, fingerprint = read_train_config(model_path)
    splits = load_digits_splits(seed=config.seed)
    return Rows(
        {model.inputs[0].name: splits.x_test},
        splits.y_test,
        f"digits held-out test split, {len(splits.y_test)} labelled rows",
        fingerprint,
    )


HELD_OUT_MIN_ROWS = 50  # from here on, a tenth of the user's training rows is held out to keep the fine-tune's best epoch


def digits_training(splits) -> TrainingRows:
    """The demo's training and validation splits, augmented like `python -m export train` does."""
    return TrainingRows(
        (splits.x_train,),
        (splits.y_train,),
        (splits.x_val,),
        (splits.y_val,),
        augment=True,
        note=f"digits training split, {len(splits.y_train)} rows",
    )


def training_rows(path: Path, model: LoadedModel, *, loss: str | None) -> TrainingRows:
    """The user's --train rows: inputs named like the model's, targets named like its outputs (`labels`
    for a one-output model), and the loss to fine-tune under (`--loss`, else the model's compiled one)."""
    if model.keras_model is None:
        raise ImportCheckError(
            f"{model.path} is a SavedModel: pruned and slim variants fine-tune a Keras model; "
            "pass the .keras (or .h5) file, or leave --train out for fp32/int8/fp16"
        )
    feeds, _ = read_rows(path, model.inputs, what="training")
    with np.load(path, allow_pickle=False) as archive:
        arrays = {key: archive[key] for key in archive.files}
    rows = len(next(iter(feeds.values())))
    wanted = ", ".join(f"{name}=..." for name in model.output_names)
    targets = []
    for name in model.output_names:
        target = arrays.get(name)
        if target is None and len(model.output_names) == 1:
            target = arrays.get("labels")
        if target is None:
            raise ImportCheckError(
                f"training data {path} has no target for output {name!r}: save np.savez(path, <inputs>, {wanted})"
                + (" (or labels=...)" if len(model.output_names) == 1 else "")
            )
        if len(target) != rows:
            raise ImportCheckError(
                f"training target {name!r} in {path} has {len(target)} rows; the inputs have {rows}: one target per row"
            )
        targets.append(target)
    chosen = _loss(model, loss)
    inputs = tuple(feeds[spec.name] for spec in model.inputs)
    rate = compiled_learning_rate(model.keras_model)
    rate_note = f", learning rate {rate / 2:.1e} (half the compiled {rate:.1e}) unless given" if rate else ""
    if rows < HELD_OUT_MIN_ROWS:
        return TrainingRows(
            inputs,
            tuple(targets),
            loss=chosen,
            learning_rate=rate / 2 if rate else None,
            note=f"{path}, {rows} rows, loss {_describe_loss(chosen)}{rate_note}",
            interface=model.interface,
        )
    held = np.random.default_rng(0).permutation(rows)  # a seeded draw: rows sorted by class still give a fair tenth
    val, fit = held[: rows // 10], held[rows // 10 :]
    return TrainingRows(
        tuple(a[fit] for a in inputs),
        tuple(t[fit] for t in targets),
        tuple(a[val] for a in inputs),
        tuple(t[val] for t in targets),
        loss=chosen,
        learning_rate=rate / 2 if rate else None,
        note=f"{path}, {len(fit)} rows (+{len(val)} held out to keep the best epoch), loss {_describe_loss(chosen)}{rate_note}",
        interface=model.interface,
    )


def compiled_learning_rate(keras_model) -> float | None:
    """The learning rate `keras_model` was compiled (and saved) with, or None when it has no optimizer.

    A slimmed model re-learns much of what it lost: it needs steps of the size it was trained
    with, not the demo's gentle 5e-4 (a residual CNN trained at 1e-2, fine-tuned at 5e-4, stays
    9 points below its original after 40 epochs; at half its rate, within half a point).
    Half is the demo's own ratio (trained at 1e-3, fine-tuned at 5e-4).
    """
    import keras

    rate = getattr(getattr(keras_model, "optimizer", None), "learning_rate", None)
    if rate is None:
        return None
    try:
        value = float(keras.ops.convert_to_numpy(rate))
    except (TypeError, ValueError):  # a schedule object Keras cannot evaluate here: keep the default
        return None
    return value if 0 < value < 1 else None


def _loss(model: LoadedModel, name: str | None):
    """`--loss` checked against Keras' losses, else the model's compiled loss; one line when there is neither."""
    import keras

    if name is not None:
        try:
            keras.losses.get(name)
        except (ValueError, TypeError) as err:
            raise ImportCheckError(
                f"--loss {name!r} is not a Keras loss: use a name such as sparse_categorical_crossentropy, "
                "categorical_crossentropy, binary_crossentropy or mean_squared_error"
            ) from err
        return name
    compiled = getattr(model.keras_model, "loss", None)
    if compiled is None:  # never compiled, or compiled with a loss Keras 3 cannot rebuild from a legacy .h5
        raise ImportCheckError(
            f"{model.path} was saved without a compiled loss Keras can rebuild: pass --loss "
            "(e.g. --loss sparse_categorical_crossentropy) to fine-tune the pruned and slim variants"
        )
    return compiled


def _describe_loss(loss) -> str:
    if isinstance(loss, (list, tuple)):
        return "[" + ", ".join(_describe_loss(part) for part in loss) + "]"
    if isinstance(loss, dict):
        return "{" + ", ".join(f"{key}: {_describe_loss(value)}" for key, value in loss.items()) + "}"
    return loss if isinstance(loss, str) else type(loss).__name__
