"""How faithful and how accurate a variant is on held-out rows, against a reference model.

Agreement is top-1 over the last axis of the first output (the class scores of a
classifier); accuracy needs labels; the max abs difference is measured against the
model a variant was converted from, which is what a faithful conversion must reproduce.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from export.measure import Feeds

EVAL_BATCH = 256


@dataclass(frozen=True)
class Quality:
    rows: int
    top1_agreement: float
    accuracy: float | None
    reference_accuracy: float | None
    max_abs_diff: float | None
    reference_scale: float

    @property
    def accuracy_drop_points(self) -> float | None:
        """Accuracy lost against the reference, in percentage points (negative: gained)."""
        if self.accuracy is None or self.reference_accuracy is None:
            return None
        return (self.reference_accuracy - self.accuracy) * 100

    @property
    def disagreement_points(self) -> float:
        return (1 - self.top1_agreement) * 100


def rows_of(feeds: Feeds) -> int:
    return len(next(iter(feeds.values())))


def predict(run, feeds: Feeds, *, fixed_batch: int | None = None) -> np.ndarray:
    """The first output over all rows, in chunks; a fixed batch dimension gets padded chunks."""
    batch = fixed_batch or EVAL_BATCH
    total = rows_of(feeds)
    chunks = []
    for start in range(0, total, batch):
        chunk = {name: array[start : start + batch] for name, array in feeds.items()}
        taken = rows_of(chunk)
        if fixed_batch and taken < fixed_batch:
            chunk = {
                name: np.concatenate([array, array[-1:].repeat(fixed_batch - taken, axis=0)]) for name, array in chunk.items()
            }
        output = run(chunk)
        first = output[0] if isinstance(output, (list, tuple)) else output
        chunks.append(np.asarray(first)[:taken])
    return np.concatenate(chunks)


def accuracy_of(outputs: np.ndarray, labels: np.ndarray | None) -> float | None:
    if labels is None:
        return None
    return float((outputs.argmax(axis=-1) == labels).mean())


def compare(
    outputs: np.ndarray,
    reference: np.ndarray,
    labels: np.ndarray | None,
    *,
    conversion_reference: np.ndarray | None = None,
) -> Quality:
    """Agreement and accuracy against `reference`; max abs diff against `conversion_reference` when given."""
    if outputs.shape != reference.shape:
        raise ValueError(f"variant output shape {outputs.shape} differs from the reference's {reference.shape}")
    faithful_to = conversion_reference if conversion_reference is not None else reference
    return Quality(
        rows=len(outputs),
        top1_agreement=float((outputs.argmax(axis=-1) == reference.argmax(axis=-1)).mean()),
        accuracy=accuracy_of(outputs, labels),
        reference_accuracy=accuracy_of(reference, labels),
        max_abs_diff=float(np.abs(outputs.astype(np.float64) - faithful_to).max()),
        reference_scale=float(np.abs(faithful_to).max()),
    )
