"""Where a model to export comes from, with the rows it is judged and calibrated on.

Every source gives the export pipeline the same things: an fp32 ONNX graph, held-out
rows (labelled when possible) with the source model's own answers on them, rows to
calibrate int8 on, and a baseline to time against. Keras sources can also be
fine-tuned, which pruning needs.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np

from export import tf_env  # noqa: F401
from export.model_source import Source, sha256_bytes

MOBILENET_SHAPE = (224, 224, 3)
MOBILENET_EVAL_ROWS = 64
MOBILENET_CALIBRATION_ROWS = 32


def load_keras_model(path: Path):
    """Load a Keras model, turning every way a file can be wrong into one `ValueError` line."""
    import zipfile

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(
            f"no trained model at {path}: run `python -m export train` (or `make train`) first, or pass --keras-model"
        )
    if path.suffix == ".keras" and not zipfile.is_zipfile(path):  # found without the seconds TensorFlow takes to import
        raise ValueError(f"cannot read {path} as a Keras model: a .keras file is a zip archive and this is not one")
    import keras

    try:
        return keras.models.load_model(path)
    except Exception as err:  # Keras raises many types for a bad file
        raise ValueError(
            f"cannot read {path} as a Keras model ({type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''})"
        ) from err


def digits_source(model_path: Path, *, opset: int, calibration_rows: int) -> Source:
    """The trained digits CNN: judged on the held-out split, calibrated on training rows."""
    from export.convert import keras_to_onnx
    from export.data import load_digits_splits
    from export.model import INPUT_NAME
    from export.train import read_train_config
    from export.user_source import digits_training

    model = load_keras_model(model_path)
    config, _ = read_train_config(model_path)
    splits = load_digits_splits(seed=config.seed)
    calibration = splits.x_train[:calibration_rows]
    return Source(
        name="digits",
        kind="keras",
        description=f"Keras model {model_path}",
        sha256=sha256_bytes(Path(model_path).read_bytes()),
        onnx_model=keras_to_onnx(model, opset=opset),
        evaluation={INPUT_NAME: splits.x_test},
        labels=splits.y_test,
        evaluation_note=f"held-out test split, {len(splits.y_test)} labelled rows",
        calibration={INPUT_NAME: calibration},
        calibration_note=f"training split, {len(calibration)} rows",
        calibration_synthetic=False,
        reference=model.predict(splits.x_test, batch_size=256, verbose=0),
        keras_model=model,
        splits=splits,
        training=digits_training(splits),
        keras_path=Path(model_path),
    )


def keras_file_source(
    model, name: str, rows, *, calibration=None, training=None, opset: int, calibration_rows: int
) -> tuple[Source, list[str]]:
    """The user's own model (`export.keras_load.LoadedModel`) judged on their held-out rows, calibrated on their
    calibration rows (else their training rows, else the held-out ones, with a warning), fine-tuned on `training`.

    A SavedModel cannot be fine-tuned or run as Keras: its converted graph is the baseline, as an imported ONNX file's is.
    """
    warnings = []
    onnx_model = model.to_onnx(opset)
    if calibration is not None:
        calibration_feeds, calibration_note = calibration.feeds, calibration.note
    elif training is not None:
        calibration_feeds = {spec.name: array for spec, array in zip(model.inputs, training.inputs)}
        calibration_note = f"training rows ({training.note.split(',')[0]})"
    else:
        calibration_feeds, calibration_note = rows.feeds, f"the held-out rows ({rows.note})"
        warnings.append(
            "no --calibration or --train data: int8 is calibrated on the held-out rows it is judged on, "
            "which flatters it; pass --calibration DATA.npz"
        )
    if rows.labels is None:
        warnings.append("no 'labels' in --data: accuracy is unknown; the budget applies to top-1 agreement with the model")
    calibration_feeds = {key: array[:calibration_rows] for key, array in calibration_feeds.items()}
    answers = model.predict(rows.feeds)
    reference = answers[model.output_names[0]]
    keras = model.keras_model is not None
    source = Source(
        name=name,
        kind="keras" if keras else "onnx",
        description=f"{'Keras' if keras else 'SavedModel'} model {model.path} ({model.format})",
        sha256=_path_digest(model.path),
        onnx_model=onnx_model,
        evaluation=rows.feeds,
        labels=rows.labels,
        evaluation_note=rows.note,
        calibration=calibration_feeds,
        calibration_note=f"{calibration_note}, {len(next(iter(calibration_feeds.values())))} rows",
        calibration_synthetic=False,
        reference=reference,
        keras_model=model.keras_model,
        original_bytes=None if keras else onnx_model.SerializeToString(),
        keras_path=Path(model.path) if keras else None,
        training=training,
        io_names=([spec.name for spec in model.inputs], list(model.output_names)),
        references={name: np.asarray(answers[name]) for name in model.output_names},
    )
    return source, warnings


def _path_digest(path: Path) -> str:
    """sha256 of a model file, or of a SavedModel folder's files (names and bytes, in order)."""
    path = Path(path)
    if path.is_file():
        return sha256_bytes(path.read_bytes())
    digest = hashlib.sha256()
    for child in sorted(p for p in path.rglob("*") if p.is_file()):
        digest.update(str(child.relative_to(path)).encode())
        digest.update(child.read_bytes())
    return digest.hexdigest()


def synthetic_images(rows: int, shape: tuple[int, int, int], seed: int) -> np.ndarray:
    """Image-like rows in [-1, 1]: blocky colour fields with per-image contrast, not white noise.

    White noise makes every image look alike to a CNN (every answer the same class), so
    agreement between variants would say nothing; varied low-frequency content does.
    """
    rng = np.random.default_rng(seed)
    height, width, channels = shape
    cells = 7
    low = rng.normal(0, 1, (rows, cells, cells, channels))
    blocks = np.kron(low, np.ones((1, -(-height // cells), -(-width // cells), 1)))[:, :height, :width]
    images = blocks * rng.uniform(0.3, 1.0, (rows, 1, 1, channels)) + rng.uniform(-0.5, 0.5, (rows, 1, 1, channels))
    images += rng.normal(0, 0.1, images.shape)
    return np.clip(images, -1, 1).astype(np.float32)


def mobilenet_keras(seed: int = 0):
    """MobileNetV2 with random weights (nothing is downloaded) and batch-norm statistics set.

    Random weights with freshly initialised batch-norm statistics make activations vanish
    through the depth of the network (every output exactly uniform, and tiny floats can take
    slow CPU paths). One forward pass in training mode with momentum 0 sets each batch-norm
    layer's statistics from synthetic images, as a trained network's would be: no weight is trained.
    """
    import keras

    keras.utils.set_random_seed(seed)
    model = keras.applications.MobileNetV2(weights=None, input_shape=MOBILENET_SHAPE)
    return settle_batch_norm(model, synthetic_images(32, MOBILENET_SHAPE, seed + 1))


def settle_batch_norm(model, rows):
    """`model` with every batch-norm layer's statistics set from one training-mode pass over `rows` (momentum 0),
    as a trained network's would be: no weight is trained. Returns the model."""
    import keras

    def walk(layer):
        yield layer
        for inner in getattr(layer, "layers", ()):  # nested models' layers too
            yield from walk(inner)

    norms = [layer for layer in walk(model) if isinstance(layer, keras.layers.BatchNormalization)]
    momenta = [layer.momentum for layer in norms]
    for layer in norms:
        layer.momentum = 0.0
    try:
        model(rows, training=True)
    finally:
        for layer, momentum in zip(norms, momenta):
            layer.momentum = momentum
    return model


def mobilenet_source(*, opset: int, seed: int = 0) -> Source:
    """MobileNetV2 (`mobilenet_keras`) for realistic sizes and speeds, evaluated on synthetic images."""
    from export.convert import keras_to_onnx
    from export.model import INPUT_NAME

    model = mobilenet_keras(seed)
    evaluation = synthetic_images(MOBILENET_EVAL_ROWS, MOBILENET_SHAPE, seed + 2)
    return Source(
        name="mobilenetv2",
        kind="keras",
        description="keras.applications.MobileNetV2(weights=None), batch-norm statistics from synthetic images",
        sha256=None,
        onnx_model=keras_to_onnx(model, opset=opset),
        evaluation={INPUT_NAME: evaluation},
        labels=None,
        evaluation_note=f"{MOBILENET_EVAL_ROWS} synthetic images: accuracy n/a, agreement with Keras reported",
        calibration={INPUT_NAME: synthetic_images(MOBILENET_CALIBRATION_ROWS, MOBILENET_SHAPE, seed + 3)},
        calibration_note=f"synthetic, {MOBILENET_CALIBRATION_ROWS} images",
        calibration_synthetic=True,
        reference=model.predict(evaluation, batch_size=32, verbose=0),
        keras_model=model,
    )
