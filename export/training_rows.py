"""The rows a pruned or slimmed model is fine-tuned on, and the loss it is fine-tuned under: made by
`export.user_source` (the user's --train file, or the demo's digits split), held by the export's `Source`
(`export.model_source`) and read by the pipeline when it fine-tunes."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from export.keras_io import KerasInterface


@dataclass(frozen=True)
class TrainingRows:
    """Rows to fine-tune pruned and slimmed models on, and the loss to fine-tune them under.

    The demo's come from the digits split (augmented as in training); a user's from their
    --train file, under the model's own compiled loss (or --loss). `loss=None` is the demo's
    sparse categorical cross-entropy, with accuracy reported while fitting.
    """

    inputs: tuple[np.ndarray, ...]  # in the model's input order
    targets: tuple[np.ndarray, ...]  # in the model's output order
    val_inputs: tuple[np.ndarray, ...] | None = None
    val_targets: tuple[np.ndarray, ...] | None = None
    loss: object | None = None
    augment: bool = False  # the digits' pixel shifts: only for the demo's images
    note: str = ""
    learning_rate: float | None = None  # the fine-tune's step size when none is given (None: the pipeline's default)
    interface: KerasInterface | None = None  # how the model takes its inputs and targets (None: one array, or a tuple)

    @property
    def count(self) -> int:
        return len(self.inputs[0])

    def datasets(self, batch_size: int, seed: int = 0):
        """tf.data pipelines (train shuffled, validation if any) and the steps in one training epoch."""
        import keras
        import tensorflow as tf

        from export.data import make_dataset

        def one(parts: tuple[np.ndarray, ...]):
            return parts[0] if len(parts) == 1 else parts

        # A dict-input model is fed a dict, as it was built; tf.data reads a list as one tensor, so lists become tuples.
        def inputs(parts: tuple[np.ndarray, ...]):
            return keras.tree.lists_to_tuples(self.interface.pack_inputs(parts)) if self.interface is not None else one(parts)

        def targets(parts: tuple[np.ndarray, ...]):
            return keras.tree.lists_to_tuples(self.interface.pack_outputs(parts)) if self.interface is not None else one(parts)

        if self.augment:
            train = make_dataset(one(self.inputs), one(self.targets), batch_size=batch_size, training=True, seed=seed)
        else:
            train = (
                tf.data.Dataset.from_tensor_slices((inputs(self.inputs), targets(self.targets)))
                .shuffle(self.count, seed=seed, reshuffle_each_iteration=True)
                .batch(batch_size)
                .prefetch(tf.data.AUTOTUNE)
            )
        val = None
        if self.val_inputs is not None and self.val_targets is not None:
            val = tf.data.Dataset.from_tensor_slices((inputs(self.val_inputs), targets(self.val_targets))).batch(256)
        return train, val, -(-self.count // batch_size)
