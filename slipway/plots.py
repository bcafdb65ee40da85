"""Plots beside reports: matplotlib without a display, saved atomically as PNG.

matplotlib is imported on first use: it is an extra (loadtest, export), not a core dependency.
"""

from __future__ import annotations

import io
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

from slipway import atomic

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def pyplot() -> ModuleType:
    """`matplotlib.pyplot` on the Agg backend (no display needed, CI included)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_png(figure: Figure, path: Path, *, dpi: int = 110) -> None:
    """Lay out, render and atomically write `figure` as a PNG, then free it."""
    import matplotlib.pyplot as plt

    figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=dpi)
    plt.close(figure)
    atomic.write_bytes(Path(path), buffer.getvalue())
