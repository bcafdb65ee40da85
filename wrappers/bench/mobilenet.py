"""`python -m wrappers.bench.mobilenet --out FILE`: MobileNetV2 fp32 as ONNX, for the benchmark only.

It imports TensorFlow, so it only ever runs as its own process, started by the benchmark
when the export step has not produced a MobileNetV2 artifact; the serving code never
imports it. Nothing is downloaded: `weights=None`. Random weights with fresh batch-norm
statistics make activations shrink towards zero through the network (and tiny floats can
take slow CPU paths), so one forward pass in training mode with momentum 0 sets the
batch-norm statistics from synthetic images first; no weight is trained.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

SHAPE = (224, 224, 3)


def build(out: Path, seed: int = 0) -> None:
    import numpy as np

    from export import tf_env  # noqa: F401  (quiet TensorFlow, set before importing it)
    from export.convert import keras_to_onnx
    from slipway import atomic

    import keras

    keras.utils.set_random_seed(seed)
    model = keras.applications.MobileNetV2(weights=None, input_shape=SHAPE)
    norms = [layer for layer in model.layers if isinstance(layer, keras.layers.BatchNormalization)]
    momenta = [layer.momentum for layer in norms]
    for layer in norms:
        layer.momentum = 0.0
    images = np.random.default_rng(seed).uniform(-1, 1, (16, *SHAPE)).astype(np.float32)
    model(images, training=True)
    for layer, momentum in zip(norms, momenta):
        layer.momentum = momentum
    atomic.write_bytes(out, keras_to_onnx(model).SerializeToString())


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m wrappers.bench.mobilenet", description=__doc__)
    parser.add_argument("--out", type=Path, required=True, help="ONNX file to write")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    build(args.out, args.seed)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
