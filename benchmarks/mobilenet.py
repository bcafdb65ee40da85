"""`python -m benchmarks.mobilenet --out FILE`: MobileNetV2 fp32 as ONNX, for the benchmark only.

It imports TensorFlow, so it only ever runs as its own process, started by the benchmark
when the export step has not produced a MobileNetV2 artifact; the serving code never
imports it. The model is the export step's (`export.sources.mobilenet_keras`): nothing is
downloaded, and its batch-norm statistics are set so that its activations do not vanish.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path


def build(out: Path, seed: int = 0) -> None:
    from export.convert import keras_to_onnx
    from export.sources import mobilenet_keras
    from slipway import atomic

    atomic.write_bytes(out, keras_to_onnx(mobilenet_keras(seed)).SerializeToString())


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.mobilenet", description=__doc__)
    parser.add_argument("--out", type=Path, required=True, help="ONNX file to write")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    build(args.out, args.seed)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
