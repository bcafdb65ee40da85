"""The digits data set (shipped with scikit-learn, no download) and its tf.data pipelines."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

from export import tf_env  # noqa: F401  (environment before TensorFlow)

IMAGE_SHAPE = (8, 8, 1)
NUM_CLASSES = 10
PIXEL_MAX = 16.0  # digits pixels are integers 0..16


@dataclass(frozen=True)
class Splits:
    """Train / validation / held-out test arrays: images float32 in [0, 1], labels int32."""

    x_train: np.ndarray
    y_train: np.ndarray
    x_val: np.ndarray
    y_val: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray

    def fingerprint(self) -> str:
        """sha256 over every array: two runs trained on the same data share it (lineage)."""
        digest = hashlib.sha256()
        for array in (self.x_train, self.y_train, self.x_val, self.y_val, self.x_test, self.y_test):
            digest.update(str(array.shape).encode())
            digest.update(np.ascontiguousarray(array).tobytes())
        return digest.hexdigest()

    def sizes(self) -> dict[str, int]:
        return {"train": len(self.y_train), "val": len(self.y_val), "test": len(self.y_test)}


def load_digits_splits(seed: int = 0, test_fraction: float = 0.2, val_fraction: float = 0.1) -> Splits:
    """Stratified splits of the 1,797 digits, the same for the same seed."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    images = (digits.images / PIXEL_MAX).astype(np.float32)[..., np.newaxis]
    labels = digits.target.astype(np.int32)
    x_rest, x_test, y_rest, y_test = train_test_split(images, labels, test_size=test_fraction, stratify=labels, random_state=seed)
    x_train, x_val, y_train, y_val = train_test_split(
        x_rest, y_rest, test_size=val_fraction / (1 - test_fraction), stratify=y_rest, random_state=seed
    )
    return Splits(x_train, y_train, x_val, y_val, x_test, y_test)


def _augment(image, label):
    """Shift by up to one pixel and jitter the contrast: handwriting is never centred the same way."""
    import tensorflow as tf

    padded = tf.pad(image, [[1, 1], [1, 1], [0, 0]])
    shifted = tf.image.random_crop(padded, IMAGE_SHAPE)
    scaled = shifted * tf.random.uniform([], 0.85, 1.15)
    return tf.clip_by_value(scaled, 0.0, 1.0), label


def make_dataset(x: np.ndarray, y: np.ndarray, *, batch_size: int, training: bool, seed: int = 0):
    """A tf.data pipeline: shuffle and augment (in `map`) when training, then batch and prefetch."""
    import tensorflow as tf

    dataset = tf.data.Dataset.from_tensor_slices((x, y))
    if training:
        dataset = dataset.shuffle(len(x), seed=seed, reshuffle_each_iteration=True)
        dataset = dataset.map(_augment, num_parallel_calls=tf.data.AUTOTUNE)
    return dataset.batch(batch_size).prefetch(tf.data.AUTOTUNE)
