"""A graph input as the export reads it, from an ONNX graph or a Keras model: its name, numpy dtype and shape.

A leaf: the ONNX import, the Keras interface and the Keras loader all describe inputs with it, and none of them
needs another's module for it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class InputSpec:
    """A graph input: its numpy dtype and its shape, None for a dimension the graph leaves open."""

    name: str
    dtype: np.dtype
    shape: tuple[int | None, ...]
    dtype_guessed: bool = False  # a subclassed Keras model keeps no input dtype: the rows it is fed say it

    def describe(self) -> str:
        dims = ", ".join("N" if i == 0 and d is None else ("?" if d is None else str(d)) for i, d in enumerate(self.shape))
        return f"{self.dtype} [{dims}]"
