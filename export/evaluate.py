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


def predict_outputs(run, feeds: Feeds, *, fixed_batch: int | None = None) -> list[np.ndarray]:
    """Every output over all rows, in the runner's order, in chunks; a fixed batch dimension gets padded chunks."""
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
        chunks.append([np.asarray(part)[:taken] for part in (output if isinstance(output, (list, tuple)) else [output])])
    return [np.concatenate([chunk[index] for chunk in chunks]) for index in range(len(chunks[0]))]


def predict(run, feeds: Feeds, *, fixed_batch: int | None = None) -> np.ndarray:
    """The first output over all rows (`predict_outputs`)."""
    return predict_outputs(run, feeds, fixed_batch=fixed_batch)[0]


def scores_classes(array: np.ndarray) -> bool:
    """A float output with a score per class on its last axis: its top-1 answer is what a client acts on."""
    return array.dtype.kind == "f" and array.ndim >= 2 and array.shape[-1] > 1


@dataclass(frozen=True)
class OutputQuality:
    """One named output of a variant against the source model (agreement) and the model it was made from (diff)."""

    name: str
    disagreement_points: float | None  # rows whose top-1 class (int/bool outputs: whose value) changed; None: no classes
    max_abs_diff: float
    scale: float  # the largest |value| of the output the variant was made from

    def as_dict(self) -> dict:
        return {"disagreement_points": self.disagreement_points, "max_abs_diff": self.max_abs_diff, "scale": self.scale}


def output_quality(name: str, outputs: np.ndarray, reference: np.ndarray, conversion_reference: np.ndarray) -> OutputQuality:
    if outputs.shape != reference.shape:
        raise ValueError(f"variant output {name!r} has shape {outputs.shape}, the source model's {reference.shape}")
    if scores_classes(reference):
        changed: float | None = float((outputs.argmax(axis=-1) != reference.argmax(axis=-1)).mean())
    elif reference.dtype.kind in "biu":
        changed = float((outputs != reference).reshape(len(outputs), -1).any(axis=1).mean())
    else:
        changed = None
    faithful_to = np.asarray(conversion_reference, np.float64)
    return OutputQuality(
        name=name,
        disagreement_points=None if changed is None else changed * 100,
        max_abs_diff=float(np.abs(outputs.astype(np.float64) - faithful_to).max()) if outputs.size else 0.0,
        scale=float(np.abs(faithful_to).max()) if faithful_to.size else 0.0,
    )


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
