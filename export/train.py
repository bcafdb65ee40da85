"""Train the digits CNN: tf.data in, callbacks on, a held-out score and a report out."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, Field
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from export import tf_env  # noqa: F401
from slipway import atomic

MODEL_FILE = "model.keras"
CONFIG_FILE = "train-config.json"


class TrainConfig(BaseModel):
    """Everything that decides the trained weights; stored beside the model for lineage."""

    seed: int = 0
    epochs: int = Field(default=40, ge=1)
    batch_size: int = Field(default=64, ge=1)
    learning_rate: float = Field(default=1e-3, gt=0)
    patience: int = Field(default=6, ge=1, description="epochs without val_loss improvement before stopping")
    filters: tuple[int, int] = (32, 64)
    dense_units: int = Field(default=128, ge=1)
    dropout: float = Field(default=0.3, ge=0, lt=1)
    profile_batches: tuple[int, int] | None = Field(
        default=(3, 5), description="training steps profiled into the TensorBoard logs"
    )


@dataclass(frozen=True)
class TrainResult:
    model_path: Path
    test_accuracy: float
    test_loss: float
    report: dict


def _progress_callback(epochs: int):
    import keras

    class RichProgress(keras.callbacks.Callback):
        """One bar over epochs with the latest metrics, instead of Keras' per-batch lines."""

        def on_train_begin(self, logs=None):
            self.progress = Progress(
                TextColumn("[bold]train[/]"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[metrics]}"),
                TimeElapsedColumn(),
                transient=False,
            )
            self.progress.start()
            self.task = self.progress.add_task("epochs", total=epochs, metrics="")

        def on_epoch_end(self, epoch, logs=None):
            logs = logs or {}
            text = " ".join(f"{key}={logs[key]:.4f}" for key in ("loss", "accuracy", "val_loss", "val_accuracy") if key in logs)
            self.progress.update(self.task, completed=epoch + 1, metrics=text)

        def on_train_end(self, logs=None):
            self.progress.stop()

    return RichProgress()


def train(config: TrainConfig, out_dir: Path) -> TrainResult:
    """Fit with checkpointing, early stopping and TensorBoard; evaluate on the held-out split."""
    import keras
    import tensorflow as tf

    from export.data import load_digits_splits, make_dataset
    from export.model import build_cnn

    keras.utils.set_random_seed(config.seed)
    splits = load_digits_splits(seed=config.seed)
    train_ds = make_dataset(splits.x_train, splits.y_train, batch_size=config.batch_size, training=True, seed=config.seed)
    val_ds = make_dataset(splits.x_val, splits.y_val, batch_size=256, training=False)
    test_ds = make_dataset(splits.x_test, splits.y_test, batch_size=256, training=False)

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    checkpoint = out_dir / "checkpoint.best.keras"
    model = build_cnn(config.filters, config.dense_units, config.dropout)
    model.compile(
        optimizer=keras.optimizers.Adam(config.learning_rate),
        loss=keras.losses.SparseCategoricalCrossentropy(),
        metrics=["accuracy"],
    )
    callbacks = [
        keras.callbacks.ModelCheckpoint(checkpoint, monitor="val_loss", save_best_only=True),
        keras.callbacks.EarlyStopping(monitor="val_loss", patience=config.patience, restore_best_weights=True),
        keras.callbacks.TensorBoard(
            log_dir=str(out_dir / "tensorboard"), histogram_freq=1, profile_batch=config.profile_batches or 0
        ),
        _progress_callback(config.epochs),
    ]
    started = time.perf_counter()
    history = model.fit(train_ds, validation_data=val_ds, epochs=config.epochs, callbacks=callbacks, shuffle=False, verbose=0)
    seconds = time.perf_counter() - started
    test_loss, test_accuracy = model.evaluate(test_ds, verbose=0)

    # Config first, then the model by rename: a model is never found without the config
    # (and data seed) that produced it, and never half-written.
    atomic.write_json(out_dir / CONFIG_FILE, {"config": config.model_dump(), "data_fingerprint": splits.fingerprint()})
    staging = out_dir / f".{MODEL_FILE}.staging.keras"
    model.save(staging)
    staging.replace(out_dir / MODEL_FILE)

    epochs_run = len(history.history["loss"])
    best_epoch = int(min(range(epochs_run), key=lambda i: history.history["val_loss"][i])) + 1
    report = {
        "model_path": str(out_dir / MODEL_FILE),
        "tensorboard_logs": str(out_dir / "tensorboard"),
        "config": config.model_dump(),
        "data": {"source": "sklearn.datasets.load_digits", "fingerprint": splits.fingerprint(), "sizes": splits.sizes()},
        "parameters": int(model.count_params()),
        "epochs_run": epochs_run,
        "best_epoch": best_epoch,
        "stopped_early": epochs_run < config.epochs,
        "history": {key: [float(v) for v in values] for key, values in history.history.items()},
        "test_accuracy": float(test_accuracy),
        "test_loss": float(test_loss),
        "train_seconds": round(seconds, 2),
        "tensorflow": tf.__version__,
        "keras": keras.__version__,
    }
    return TrainResult(out_dir / MODEL_FILE, float(test_accuracy), float(test_loss), report)


def read_train_config(model_path: Path) -> tuple[TrainConfig, str | None]:
    """The config (and data fingerprint) stored beside a trained model; defaults when absent."""
    path = Path(model_path).parent / CONFIG_FILE
    if not path.is_file():
        return TrainConfig(), None
    stored = json.loads(path.read_text())
    return TrainConfig.model_validate(stored["config"]), stored.get("data_fingerprint")
