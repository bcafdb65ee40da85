"""How far a converted graph's answers may stray from the model it was made from: one rule for every command.

`export convert` (its parity check, and each `--split` stage) and `export variants` (its fp32 and fp16
variants, and `--output-tolerance`) all ask the same question of one output: is the largest abs difference
within `tolerance * max(1, the output's largest |value|)`? Within +-1 (probabilities, calm logits) the
tolerance is an absolute bound; beyond, a relative one, since float32 rounding grows with the values.
The defaults live here and nowhere else, so a graph `convert` accepts is not rejected as `variants`' fp32.
"""

from __future__ import annotations

import numpy as np

# float32 rounding over a deep graph (ResNet50's random head: 1.5e-4; a mixed-precision float16 layer: ~4e-4
# relative) stays well below it; a conversion bug (a wrong axis, a dropped bias) lands far above.
FP32_TOLERANCE = 1e-3
FP16_TOLERANCE = 1e-2  # float16 keeps 11 bits: about 5e-4 per rounding, compounded over the layers


def scale(values: np.ndarray) -> float:
    """The output's largest |value| (0 for an empty one)."""
    array = np.asarray(values)
    return float(np.abs(array.astype(np.float64)).max()) if array.size else 0.0


def allowed(tolerance: float, output_scale: float) -> float:
    """The largest abs difference an output whose largest |value| is `output_scale` may show."""
    return tolerance * max(1.0, output_scale)


def worst_beyond(
    expected: dict[str, np.ndarray], got: dict[str, np.ndarray], tolerance: float
) -> tuple[str, int, float, float] | None:
    """The output furthest beyond its own allowance (output, row, abs diff, allowed), or None when each is within it.

    Each output is judged by its own scale: a large regression output does not loosen a probability output's bound."""
    worst: tuple[str, int, float, float] | None = None
    for name, reference in expected.items():
        if not reference.size:
            continue
        rows = len(reference)
        per_row = np.abs(reference.astype(np.float64) - got[name].astype(np.float64)).reshape(rows, -1).max(axis=1)
        row = int(per_row.argmax())
        limit = allowed(tolerance, scale(reference))
        if per_row[row] > limit and (worst is None or per_row[row] / limit > worst[2] / worst[3]):
            worst = (name, row, float(per_row[row]), limit)
    return worst
