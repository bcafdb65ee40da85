"""`python -m export`: train the digits CNN, turn it (or any ONNX model) into measured, served-ready ONNX variants, and version them."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from export.commands import KERAS_MODELS, VARIANTS_DIR, add_export_options, cmd_bench, cmd_import, cmd_profile, cmd_variants
from export.convert import DEFAULT_OPSET
from export.store.cli import add_versions_parser
from slipway.cli import ArgumentParser, UserError, console, exit_with
from slipway.paths import BUILD_DIR, DEMO_ARTIFACT_DIR, DEMO_MODEL_NAME
from slipway.readme import README

DEFAULT_TRAIN_DIR = BUILD_DIR / "train" / DEMO_MODEL_NAME
EXAMPLE_ROWS = 32


def cmd_train(args: argparse.Namespace) -> int:
    from export.train import TrainConfig, train
    from slipway.reports import write_report

    config = TrainConfig(seed=args.seed, epochs=args.epochs, batch_size=args.batch_size, learning_rate=args.learning_rate)
    result = train(config, args.out)
    path = write_report("train", result.report)
    console.print(f"test accuracy [bold]{result.test_accuracy:.4f}[/] -> {result.model_path} (report {path})")
    if result.test_accuracy < args.min_accuracy:
        raise UserError(
            f"test accuracy {result.test_accuracy:.4f} is below --min-accuracy {args.min_accuracy}; "
            "train longer (--epochs) or check the data"
        )
    return 0


def cmd_convert(args: argparse.Namespace) -> int:
    from export.convert import check_parity, keras_to_onnx, onnx_predict
    from export.data import load_digits_splits
    from export.model import INPUT_NAME, OUTPUT_NAME
    from export.package import check_out_dir, write_artifact
    from export.train import read_train_config
    from slipway.reports import write_report

    if not args.model.is_file():
        raise UserError(f"no trained model at {args.model}: run `python -m export train` first or pass --model")
    check_out_dir(args.out)  # before TensorFlow loads and converts
    import keras

    try:
        model = keras.models.load_model(args.model)
    except Exception as err:  # Keras raises many types for a bad file
        raise UserError(f"cannot read {args.model} as a Keras model ({type(err).__name__}: {err})") from err
    config, fingerprint = read_train_config(args.model)
    splits = load_digits_splits(seed=config.seed)
    with console.status("converting to ONNX (tf.function -> tf2onnx)"):
        onnx_model = keras_to_onnx(model, opset=args.opset)
    onnx_bytes = onnx_model.SerializeToString()
    keras_probs = model.predict(splits.x_test, batch_size=256, verbose=0)
    onnx_probs = onnx_predict(onnx_bytes, splits.x_test)
    parity = check_parity(keras_probs, onnx_probs)
    if not parity.identical_predictions:
        raise UserError(
            f"ONNX and Keras disagree on {1 - parity.top1_agreement:.2%} of the held-out split "
            f"(max abs diff {parity.max_abs_diff:.2e}); nothing was written"
        )
    manifest = write_artifact(
        args.out,
        onnx_bytes=onnx_bytes,
        name=args.name,
        example_inputs={INPUT_NAME: splits.x_test[:EXAMPLE_ROWS]},
        example_outputs={OUTPUT_NAME: onnx_probs[:EXAMPLE_ROWS]},
        example_labels=splits.y_test[:EXAMPLE_ROWS],
    )
    accuracy = float((onnx_probs.argmax(axis=1) == splits.y_test).mean())
    write_report(
        "convert",
        {
            "source_model": str(args.model),
            "artifact": str(args.out),
            "model_name": args.name,
            "opset": args.opset,
            "digest": manifest.digest,
            "onnx_bytes": len(onnx_bytes),
            "parity": parity.as_dict(),
            "onnx_test_accuracy": accuracy,
            "data_fingerprint": fingerprint,
        },
    )
    console.print(
        f"ONNX opset {args.opset}: predictions identical on {parity.samples} held-out images, "
        f"max abs diff {parity.max_abs_diff:.2e}, accuracy {accuracy:.4f} -> {args.out}"
    )
    return 0


def opset(text: str) -> int:
    """`--opset`, refused before any work when the Keras conversion cannot write it."""
    value = int(text)  # not a number: argparse says "invalid opset value"
    if value < DEFAULT_OPSET:
        raise argparse.ArgumentTypeError(f"opset {value} is too old for the Keras conversion: use {DEFAULT_OPSET} or newer")
    return value


def main(argv: Sequence[str] | None = None) -> int:
    parser = ArgumentParser(prog="python -m export", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    train = commands.add_parser("train", help="train the digits CNN (tf.data, callbacks, TensorBoard)")
    train.add_argument("--out", type=Path, default=DEFAULT_TRAIN_DIR, help="folder for the model and its logs")
    train.add_argument("--epochs", type=int, default=40)
    train.add_argument("--batch-size", type=int, default=64)
    train.add_argument("--learning-rate", type=float, default=1e-3)
    train.add_argument("--seed", type=int, default=0)
    train.add_argument("--min-accuracy", type=float, default=0.95, help="fail when the held-out accuracy is lower")
    train.set_defaults(func=cmd_train)

    convert = commands.add_parser("convert", help="convert to ONNX, check parity, write the artifact folder")
    convert.add_argument("--model", type=Path, default=DEFAULT_TRAIN_DIR / "model.keras")
    convert.add_argument("--out", type=Path, default=DEMO_ARTIFACT_DIR, help="artifact folder to write")
    convert.add_argument("--name", default=DEMO_MODEL_NAME, help="model name clients use in /v2/models/<name>")
    convert.add_argument("--opset", type=opset, default=DEFAULT_OPSET, help=f"ONNX opset to write (>= {DEFAULT_OPSET})")
    convert.set_defaults(func=cmd_convert)

    variants = commands.add_parser(
        "variants", help="make fp32/int8/fp16/pruned/slim ONNX variants, measure them, choose the one to ship"
    )
    variants.add_argument("model", nargs="?", choices=KERAS_MODELS, default="digits",
                          help="digits (the trained demo CNN) or mobilenetv2 (random weights, synthetic data)")
    variants.add_argument("--keras-model", type=Path, default=DEFAULT_TRAIN_DIR / "model.keras", help="the trained digits model")
    variants.add_argument("--sparsity", type=float, default=0.75, help="pruned: share of Conv/Dense weights set to zero")
    variants.add_argument("--slim-fraction", type=float, default=0.5, help="slim: share of filters and hidden units removed")
    variants.add_argument("--fine-tune-epochs", type=int, default=12, help="pruned and slim: epochs of fine-tuning")
    variants.add_argument("--opset", type=opset, default=DEFAULT_OPSET,
                          help=f"ONNX opset of the Keras conversions (>= {DEFAULT_OPSET})")
    add_export_options(variants, variants_help="comma-separated, from fp32,int8,fp16,pruned,pruned-int8,slim,slim-int8 "
                       "(default: all for digits; fp32,int8,fp16 for mobilenetv2)")
    variants.set_defaults(func=cmd_variants)

    importer = commands.add_parser(
        "import", help="bring any ONNX model (PyTorch's included): check it, make fp32/int8/fp16 variants, measure, choose"
    )
    importer.add_argument("model", type=Path, metavar="MODEL.onnx", help="the ONNX file (e.g. from torch.onnx.export)")
    importer.add_argument("--name", required=True, help="model name clients use in /v2/models/<name>")
    importer.add_argument("--calibration", type=Path, metavar="DATA.npz",
                          help="sample inputs to calibrate int8 on: one array per model input, named like it")
    importer.add_argument("--labels", type=Path, metavar="DATA.npz",
                          help="held-out inputs (named like the model's) plus a 'labels' array: fills the accuracy columns")
    add_export_options(importer, variants_help="comma-separated, from fp32,int8,fp16 (default: all three)")
    importer.set_defaults(func=cmd_import, sparsity=0.75, slim_fraction=0.5, fine_tune_epochs=12, opset=DEFAULT_OPSET)

    profile = commands.add_parser("profile", help="run ONNX Runtime's profiler on one variant: top operators, trace for Perfetto")
    profile.add_argument("variant", metavar="VARIANT", help="a variant name (fp32, int8, ...) or an artifact folder")
    profile.add_argument("--model", default="digits", help="whose variants (a folder under --variants-dir)")
    profile.add_argument("--variants-dir", type=Path, default=VARIANTS_DIR)
    profile.add_argument("--batch-size", type=int, default=1)
    profile.add_argument("--runs", type=int, default=200, help="profiled runs (after 5 unprofiled warm-up runs)")
    profile.add_argument("--top", type=int, default=10, help="operators to list")
    profile.add_argument("--trace", type=Path, help="where to keep the trace JSON (default build/profiles/<model>-<variant>-b<batch>.json)")
    profile.set_defaults(func=cmd_profile)

    bench = commands.add_parser("bench", help="digits and MobileNetV2 through every variant in one run; figures -> reports + README")
    bench.add_argument("--keras-model", type=Path, default=DEFAULT_TRAIN_DIR / "model.keras", help="the trained digits model")
    bench.add_argument("--readme", type=Path, default=README, help="README whose performance section is refreshed")
    bench.add_argument("--no-readme", action="store_true", help="leave the README alone")
    add_export_options(bench, variants_help=None)
    bench.set_defaults(func=cmd_bench, sparsity=0.75, slim_fraction=0.5, fine_tune_epochs=12, opset=DEFAULT_OPSET, measure_rounds=7)

    add_versions_parser(commands)

    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    exit_with(main)
