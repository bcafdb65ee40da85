"""Pruning in plain Keras 3: magnitude pruning with a mask constraint, and filter pruning by L1 norm.

`tensorflow-model-optimization` only works with Keras 2 and flips the process to legacy
Keras on import, so neither is used. Keras 3 re-applies `variable.constraint` after every
optimizer step: a constraint that multiplies a kernel by a mask keeps pruned weights at
zero while the rest fine-tune, and a callback tightens the mask on a polynomial schedule.

Unstructured sparsity only shrinks the compressed file. Removing whole filters (and
hidden units) makes a narrower model that really runs faster: `prune_filters` ranks
them by L1 norm, rebuilds the model without the weakest and copies the survivors,
across branches as well as chains (`export.channel_groups`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from export import tf_env  # noqa: F401

PRUNABLE = ("Conv2D", "Dense")


class PruneError(Exception):
    """The model's architecture does not allow this kind of pruning."""


@dataclass(frozen=True)
class FineTune:
    """How long and how gently a pruned model re-learns what it lost."""

    epochs: int = 10
    learning_rate: float = 5e-4
    batch_size: int = 64
    seed: int = 0
    loss: object | None = None  # the user's model's own loss; None: the demo's sparse categorical cross-entropy


def polynomial_sparsity(step: int, *, final: float, begin: int, end: int, initial: float = 0.0, power: int = 3) -> float:
    """Sparsity at `step`: fast at first, then gently towards `final` (Zhu & Gupta's schedule)."""
    if step <= begin:
        return initial
    progress = min(1.0, (step - begin) / max(1, end - begin))
    return final + (initial - final) * (1.0 - progress) ** power


def magnitude_mask(weights: np.ndarray, sparsity: float) -> np.ndarray:
    """1 for the weights kept, 0 for the `sparsity` fraction with the smallest magnitude."""
    flat = np.abs(weights).ravel()
    drop = int(np.floor(sparsity * flat.size))
    mask = np.ones(flat.size, dtype=weights.dtype)
    if drop > 0:
        mask[np.argpartition(flat, drop - 1)[:drop]] = 0
    return mask.reshape(weights.shape)


def _prunable_kernels(model) -> list:
    return [layer.kernel for layer in model.layers if type(layer).__name__ in PRUNABLE]


def prune_magnitude(model, train, val, *, sparsity: float, fine_tune: FineTune, steps_per_epoch: int):
    """Fine-tune `model` while pruning every Conv2D/Dense kernel to `sparsity` (in place); return it."""
    import keras

    if not 0 < sparsity < 1:
        raise PruneError(f"sparsity must be between 0 and 1 (exclusive), got {sparsity}")
    kernels = _prunable_kernels(model)
    if not kernels:
        raise PruneError(f"model {model.name} has no Conv2D or Dense kernels to prune")
    masks = [
        keras.Variable(np.ones(kernel.shape, dtype="float32"), trainable=False, name=f"{kernel.path}_mask".replace("/", "_"))
        for kernel in kernels
    ]

    class MaskConstraint(keras.constraints.Constraint):
        """Re-zero the pruned weights after every optimizer step."""

        def __init__(self, mask):
            self.mask = mask

        def __call__(self, weights):
            return weights * self.mask

    total_steps = fine_tune.epochs * steps_per_epoch
    end_step = max(1, int(0.7 * total_steps))  # reach the final sparsity, then recover with the mask fixed

    class PolynomialPruning(keras.callbacks.Callback):
        """Tighten the masks every few steps along the polynomial schedule."""

        frequency = max(1, steps_per_epoch // 2)

        def on_train_batch_begin(self, batch, logs=None):
            step = int(self.model.optimizer.iterations.numpy())
            if step % self.frequency and step < end_step:
                return
            target = polynomial_sparsity(step, final=sparsity, begin=0, end=end_step)
            for kernel, mask in zip(kernels, masks):
                new_mask = magnitude_mask(keras.ops.convert_to_numpy(kernel), target)
                mask.assign(new_mask)
                kernel.assign(kernel * new_mask)

    for kernel, mask in zip(kernels, masks):
        kernel.constraint = MaskConstraint(mask)
    try:
        _fit(model, train, val, fine_tune, [PolynomialPruning()])
        for kernel, mask in zip(kernels, masks):  # the last steps ran with the final masks: bake them in
            kernel.assign(kernel * mask)
    finally:
        for kernel in kernels:
            kernel.constraint = None
    return model


def nonzero_parameters(model) -> int:
    """Weights that are not exactly zero, over every variable of the model."""
    import keras

    return int(sum(np.count_nonzero(keras.ops.convert_to_numpy(w)) for w in model.weights))


def _fit(model, train, val, fine_tune: FineTune, callbacks: list) -> None:
    import keras

    keras.utils.set_random_seed(fine_tune.seed)
    model.compile(
        optimizer=keras.optimizers.Adam(fine_tune.learning_rate),
        loss=fine_tune.loss if fine_tune.loss is not None else keras.losses.SparseCategoricalCrossentropy(),
        metrics=["accuracy"] if fine_tune.loss is None else None,
    )
    model.fit(train, validation_data=val, epochs=fine_tune.epochs, callbacks=callbacks, shuffle=False, verbose=0)


def can_slim(model) -> bool:
    """Has `model` a channel group `prune_filters` can shrink (filters not tied to an input, an output or an unknown layer)?"""
    from export.channel_groups import ChannelGroupError, plan

    try:
        return bool(plan(model, 0.5).keep)
    except ChannelGroupError:
        return False


def prune_filters(model, fraction: float):
    """A new, narrower model without the `fraction` of filters (and hidden units) with the smallest L1 norm.

    Channels that must shrink together (across residual additions, concatenations, batch norm,
    depthwise convolutions) shrink together (`export.channel_groups`); the output layer keeps all
    its units. Weights of the surviving filters are copied, so the narrower model starts close to
    the original and needs only a short fine-tune.
    """
    from export.channel_groups import ChannelGroupError, narrow_model, plan

    if not 0 < fraction < 1:
        raise PruneError(f"the fraction of filters to remove must be between 0 and 1 (exclusive), got {fraction}")
    if not any(type(layer).__name__ in PRUNABLE for layer in model.layers):
        raise PruneError(f"model {model.name} has no Conv2D or Dense layers to prune")
    try:
        narrow = plan(model, fraction)
    except ChannelGroupError as err:
        raise PruneError(str(err)) from err
    if not narrow.keep:
        raise PruneError(
            f"no filters of model {model.name} can be removed: every Conv2D/Dense output reaches a model input or output "
            "or a layer filter pruning does not know how to narrow; leave slim out of --variants"
        )
    return narrow_model(model, narrow)


SETTLE_FROM = 0.75  # the share of the fine-tune's epochs after which the learning rate drops to a tenth
SETTLE_FACTOR = 0.1


def fine_tune(model, train, val, settings: FineTune):
    """Re-train a narrowed model: its rate, then a tenth of it for the last quarter; with validation rows, keep the best epoch.

    A narrowed model re-learns much of what it lost, at a learning rate large enough to move it
    (`export.user_source.compiled_learning_rate`); at that rate it keeps wandering around its
    optimum, and a last quarter at a tenth of the rate settles it there. Measured on the tests'
    residual CNN (94% held out, 16 -> 8 filters, 60 epochs at 5e-3): 0.6 points below the
    original at a constant rate, 2 points above it with the drop. At the end the weights of the
    epoch with the lowest validation loss are restored, where there are held-out rows.
    (Magnitude pruning does neither: its earlier epochs are less sparse than asked.)
    """
    import keras

    settle = int(SETTLE_FROM * settings.epochs)
    rate = settings.learning_rate
    callbacks: list = [keras.callbacks.LearningRateScheduler(lambda epoch, _: rate * SETTLE_FACTOR if epoch >= settle else rate)]
    if val is not None:
        callbacks.append(keras.callbacks.EarlyStopping(monitor="val_loss", patience=settings.epochs, restore_best_weights=True))
    _fit(model, train, val, settings, callbacks)
    return model
