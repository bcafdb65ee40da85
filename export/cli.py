"""`python -m export`: train the digits CNN, turn it (or any ONNX model) into measured, served-ready ONNX variants, and version them."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from export.commands import (
    VARIANTS_DIR,
    add_export_options,
    cmd_bench,
    cmd_bench_slim,
    cmd_import,
    cmd_profile,
    cmd_uint8_input,
    cmd_variants,
)
from export.convert import DEFAULT_OPSET, ParityError, UnsupportedOpsError, onnx_outputs, outputs_parity
from export.onnx_import import ImportCheckError, check_name
from export.package import check_out_dir, write_artifact
from export.store.cli import add_versions_parser
from export.tolerance import FP32_TOLERANCE, worst_beyond
from export.train import TrainConfig, train
from slipway.cli import UserError, console, dispatch
from slipway.paths import BUILD_DIR, DEMO_MODEL_NAME, artifact_dir
from slipway.readme import BENCHMARKS_PAGE
from slipway.reports import write_report

PROG = "python -m export"

DEFAULT_TRAIN_DIR = BUILD_DIR / "train" / DEMO_MODEL_NAME
EXAMPLE_ROWS = 32


def cmd_train(args: argparse.Namespace) -> int:
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
    """Any trained Keras / TensorFlow model (the demo's by default) to a served-ready ONNX artifact folder.

    Parity is checked on held-out rows (the user's --data, else the digits split) over every
    output before anything is written; a disagreement writes nothing.
    """
    # Kept here: they would add a third of a second to every other export command.
    from export.keras_load import ModelLoadError, default_name, load_model, read_custom_objects
    from export.split_stages import SplitError, convert_stages, cut_stages, stage_files, stage_settings
    from export.user_source import demo_rows, user_rows

    if args.model_path is not None and args.model is not None:
        raise UserError("pass the model once: as MODEL or as --model, not both")
    model_path = args.model_path or args.model or DEFAULT_TRAIN_DIR / "model.keras"
    if args.model_path is None and args.model is None and not model_path.exists():
        raise UserError(f"no trained model at {model_path}: run `python -m export train` first or pass MODEL")
    try:
        name = check_name(args.name or (DEMO_MODEL_NAME if args.model_path is None else default_name(model_path)))
        out = args.out or artifact_dir(name)
        check_out_dir(out)  # before TensorFlow loads and converts
        custom = read_custom_objects(args.custom_objects) if args.custom_objects else None
        with console.status(f"loading {model_path}"):
            model = load_model(model_path, custom_objects=custom, signature=args.signature)
        stages = cut_stages(model) if args.split else None  # before converting: a model with nothing to cut is refused
        rows = user_rows(args.data, model, what="held-out") if args.data else demo_rows(model, model_path)
        with console.status("converting to ONNX (tf.function -> tf2onnx)"):
            onnx_bytes = model.to_onnx(args.opset).SerializeToString()
        with console.status(f"checking parity on {rows.count} rows"):
            source_outputs = model.predict(rows.feeds)
            converted = onnx_outputs(onnx_bytes, rows.feeds)
            parity = outputs_parity(source_outputs, converted)
        refuse_parity(parity, source_outputs, converted, f"ONNX and {model.format}", rows.count, args.parity_tolerance)
        split, split_note, extra_files, extra_settings = None, None, None, None
        if stages is not None:
            with console.status("cutting the preprocessing and softmax/argmax into graphs of their own (--split)"):
                graphs = convert_stages(stages, rows.feeds, args.opset, args.parity_tolerance)
                chained = outputs_parity(source_outputs, graphs.chained)
            refuse_parity(
                chained,
                source_outputs,
                graphs.chained,
                f"the --split stages chained and {model.format}",
                rows.count,
                args.parity_tolerance,
            )
            extra_files, extra_settings = stage_files(graphs), stage_settings()
            split = {
                "preprocess_layers": stages.pre_layers,
                "postprocess_layers": stages.post_layers,
                "stage_max_abs_diff": graphs.stage_diffs,
                "chained_parity": chained.as_dict(),
                "files": sorted(extra_files),
            }
            split_note = (
                f"--split: preprocess {stages.pre_layers or 'identity'}, postprocess {stages.post_layers or 'identity'}; "
                f"the three graphs chained: max abs diff {chained.max_abs_diff:.2e} -> {', '.join(sorted(extra_files))}"
            )
    except (ModelLoadError, ImportCheckError, UnsupportedOpsError, ParityError, SplitError) as err:
        raise UserError(str(err)) from err
    first = converted[model.output_names[0]]
    manifest = write_artifact(
        out,
        onnx_bytes=onnx_bytes,
        name=name,
        example_inputs={key: array[:EXAMPLE_ROWS] for key, array in rows.feeds.items()},
        example_outputs={key: array[:EXAMPLE_ROWS] for key, array in converted.items()},
        example_labels=rows.labels[:EXAMPLE_ROWS] if rows.labels is not None else None,
        extra_settings=extra_settings,
        extra_files=extra_files,
    )
    scores_classes = rows.labels is not None and first.ndim == 2 and first.shape[1] > 1
    accuracy = float((first.argmax(axis=1) == rows.labels).mean()) if scores_classes else None
    write_report(
        "convert",
        {
            "source_model": str(model_path),
            "source_format": model.format,
            "artifact": str(out),
            "model_name": name,
            "opset": args.opset,
            "digest": manifest.digest,
            "onnx_bytes": len(onnx_bytes),
            "inputs": [{"name": spec.name, "dtype": str(spec.dtype), "shape": ["N", *spec.shape[1:]]} for spec in model.inputs],
            "outputs": model.output_names,
            "evaluation": rows.note,
            "parity": parity.as_dict(),
            "onnx_test_accuracy": accuracy,
            "data_fingerprint": rows.fingerprint,
        }
        | ({"split": split} if split is not None else {}),
    )
    console.print(
        f"ONNX opset {args.opset}: predictions identical on {parity.samples} held-out rows, "
        f"max abs diff {parity.max_abs_diff:.2e}" + (f", accuracy {accuracy:.4f}" if accuracy is not None else "") + f" -> {out}",
        soft_wrap=True,
    )
    if split_note is not None:
        console.print(split_note, soft_wrap=True)
    return 0


def refuse_parity(parity, source_outputs: dict, converted: dict, what: str, count: int, tolerance: float) -> None:
    """One line when the converted answers disagree on a top class, or an output differs beyond its allowance
    (`export.tolerance`: `tolerance` times max(1, that output's largest value))."""
    beyond = worst_beyond(source_outputs, converted, tolerance)
    if parity.identical_predictions and beyond is None:
        return
    if not parity.identical_predictions:
        problem = (
            f"disagree on the top class of {1 - parity.top1_agreement:.2%} of {count} held-out rows, worst at {parity.worst()}"
        )
        output = parity.worst_output
    else:
        assert beyond is not None
        output, row, diff, limit = beyond
        problem = (
            f"answer {count} held-out rows beyond --parity-tolerance, worst at output {output!r}, row {row}: "
            f"abs diff {diff:.2e} (allowed {limit:.1e})"
        )
    raise UserError(
        f"{what} {problem}; nothing was written: check the layers feeding {output!r}, or raise --parity-tolerance "
        "if the difference is acceptable"
    )


def opset(text: str) -> int:
    """`--opset`, refused before any work when the Keras conversion cannot write it."""
    value = int(text)  # not a number: argparse says "invalid opset value"
    if value < DEFAULT_OPSET:
        raise argparse.ArgumentTypeError(f"opset {value} is too old for the Keras conversion: use {DEFAULT_OPSET} or newer")
    return value


def register(commands: argparse._SubParsersAction) -> None:
    """Add `python -m export`'s subcommands to `commands` (the `slipway` command reaches them through slipway.command)."""
    train = commands.add_parser("train", help="train the digits CNN (tf.data, callbacks, TensorBoard)")
    train.add_argument("--out", type=Path, default=DEFAULT_TRAIN_DIR, help="folder for the model and its logs")
    train.add_argument("--epochs", type=int, default=40)
    train.add_argument("--batch-size", type=int, default=64)
    train.add_argument("--learning-rate", type=float, default=1e-3)
    train.add_argument("--seed", type=int, default=0)
    train.add_argument("--min-accuracy", type=float, default=0.95, help="fail when the held-out accuracy is lower")
    train.set_defaults(func=cmd_train)

    convert = commands.add_parser(
        "convert", help="convert a trained Keras/TensorFlow model to ONNX, check parity, write the artifact folder"
    )
    convert.add_argument(
        "model_path",
        nargs="?",
        type=Path,
        metavar="MODEL",
        help="a .keras file, an .h5 file or a SavedModel folder (default: the trained digits demo model)",
    )
    convert.add_argument("--model", type=Path, help=argparse.SUPPRESS)  # the demo's older spelling of MODEL
    convert.add_argument(
        "--data",
        type=Path,
        metavar="DATA.npz",
        help="held-out rows for the parity check: one array per model input, named like it, optionally 'labels'",
    )
    convert.add_argument(
        "--custom-objects",
        metavar="MODULE:ATTR",
        help="custom layers' classes: a dict {name: class} or a function returning one (MODULE may be a .py path)",
    )
    convert.add_argument(
        "--signature", metavar="NAME", help="a SavedModel's signature to convert (default: serving_default, or its only one)"
    )
    convert.add_argument("--out", type=Path, help="artifact folder to write (default build/artifacts/<name>)")
    convert.add_argument(
        "--name", help="model name clients use in /v2/models/<name> (default: digits for the demo, else MODEL's name)"
    )
    convert.add_argument(
        "--parity-tolerance",
        type=float,
        default=FP32_TOLERANCE,
        help=f"largest abs difference ONNX may show against the model on an output, times max(1, its largest value) "
        f"(default {FP32_TOLERANCE:g}, as export variants' --fp32-tolerance)",
    )
    convert.add_argument("--opset", type=opset, default=DEFAULT_OPSET, help=f"ONNX opset to write (>= {DEFAULT_OPSET})")
    convert.add_argument(
        "--split",
        action="store_true",
        help="also cut leading preprocessing layers (Rescaling, Normalization, Resizing, CenterCrop) and a trailing "
        "softmax/argmax into ONNX graphs of their own, for render --split cpu-gpu",
    )
    convert.set_defaults(func=cmd_convert)

    variants = commands.add_parser(
        "variants", help="make fp32/int8/fp16/pruned/slim ONNX variants, measure them, choose the one to ship"
    )
    variants.add_argument(
        "model",
        nargs="?",
        default=DEMO_MODEL_NAME,
        metavar="MODEL",
        help="digits (the trained demo CNN), mobilenetv2 (random weights, synthetic data), or your own "
        "model: a .keras file, an .h5 file or a SavedModel folder (with --data)",
    )
    variants.add_argument(
        "--data",
        type=Path,
        metavar="DATA.npz",
        help="your model: held-out rows the variants are judged on, one array per input named like it, optionally 'labels'",
    )
    variants.add_argument(
        "--train",
        type=Path,
        metavar="TRAIN.npz",
        help="your model: training rows to fine-tune pruned and slim on: its inputs, and targets "
        "named like its outputs ('labels' for one output)",
    )
    variants.add_argument(
        "--calibration", type=Path, metavar="DATA.npz", help="your model: rows to calibrate int8 on (default: the --train rows)"
    )
    variants.add_argument("--loss", help="your model: the Keras loss to fine-tune under (default: the model's compiled loss)")
    variants.add_argument("--name", help="your model: the name clients use in /v2/models/<name> (default: the file's name)")
    variants.add_argument(
        "--custom-objects",
        metavar="MODULE:ATTR",
        help="your model's custom layers: a dict {name: class} or a function returning one (MODULE may be a .py path)",
    )
    variants.add_argument(
        "--signature",
        metavar="NAME",
        help="your SavedModel: the signature to convert (default: serving_default, or its only one)",
    )
    variants.add_argument(
        "--split",
        action="store_true",
        help="your Keras model: cut its preprocessing and softmax/argmax as convert --split does, and give every "
        "variant those stage graphs and its own graph between them, for render --split cpu-gpu",
    )
    variants.add_argument("--keras-model", type=Path, default=DEFAULT_TRAIN_DIR / "model.keras", help="the trained digits model")
    variants.add_argument("--sparsity", type=float, default=0.75, help="pruned: share of Conv/Dense weights set to zero")
    variants.add_argument("--slim-fraction", type=float, default=0.5, help="slim: share of filters and hidden units removed")
    variants.add_argument("--fine-tune-epochs", type=int, default=12, help="pruned and slim: epochs of fine-tuning")
    variants.add_argument(
        "--fine-tune-learning-rate",
        type=float,
        default=None,
        help="pruned and slim: Adam's learning rate while fine-tuning (default: half the rate your model was "
        "compiled with; 5e-4 for the demo and models saved without an optimizer)",
    )
    variants.add_argument(
        "--opset", type=opset, default=DEFAULT_OPSET, help=f"ONNX opset of the Keras conversions (>= {DEFAULT_OPSET})"
    )
    add_export_options(
        variants,
        variants_help="comma-separated, from fp32,int8,fp16,pruned,pruned-int8,slim,slim-int8 "
        "(default: all for digits; fp32,int8,fp16 for mobilenetv2)",
    )
    variants.set_defaults(func=cmd_variants)

    importer = commands.add_parser(
        "import", help="bring any ONNX model (PyTorch's included): check it, make fp32/int8/fp16 variants, measure, choose"
    )
    importer.add_argument("model", type=Path, metavar="MODEL.onnx", help="the ONNX file (e.g. from torch.onnx.export)")
    importer.add_argument("--name", required=True, help="model name clients use in /v2/models/<name>")
    importer.add_argument(
        "--calibration",
        type=Path,
        metavar="DATA.npz",
        help="sample inputs to calibrate int8 on: one array per model input, named like it",
    )
    importer.add_argument(
        "--labels",
        type=Path,
        metavar="DATA.npz",
        help="held-out inputs (named like the model's) plus a 'labels' array: fills the accuracy columns",
    )
    add_export_options(importer, variants_help="comma-separated, from fp32,int8,fp16 (default: all three)")
    importer.set_defaults(
        func=cmd_import, sparsity=0.75, slim_fraction=0.5, fine_tune_epochs=12, fine_tune_learning_rate=5e-4, opset=DEFAULT_OPSET
    )

    profile = commands.add_parser("profile", help="run ONNX Runtime's profiler on one variant: top operators, trace for Perfetto")
    profile.add_argument("variant", metavar="VARIANT", help="a variant name (fp32, int8, ...) or an artifact folder")
    profile.add_argument("--model", default=DEMO_MODEL_NAME, help="whose variants (a folder under --variants-dir)")
    profile.add_argument("--variants-dir", type=Path, default=VARIANTS_DIR)
    profile.add_argument("--batch-size", type=int, default=1)
    profile.add_argument("--runs", type=int, default=200, help="profiled runs (after 5 unprofiled warm-up runs)")
    profile.add_argument("--top", type=int, default=10, help="operators to list")
    profile.add_argument(
        "--trace", type=Path, help="where to keep the trace JSON (default build/profiles/<model>-<variant>-b<batch>.json)"
    )
    profile.set_defaults(func=cmd_profile)

    uint8 = commands.add_parser(
        "uint8-input",
        help="copy an artifact with a uint8 NHWC image input: scaling and mean/std "
        "move into the graph, requests carry 4x fewer bytes",
    )
    uint8.add_argument(
        "artifact", type=Path, metavar="ARTIFACT", help="an artifact folder (e.g. build/variants/mobilenetv2/fp16)"
    )
    uint8.add_argument("--out", type=Path, help="artifact folder to write (default ARTIFACT-uint8 beside it)")
    uint8.add_argument("--input", help="the image input (default: the graph's only input)")
    uint8.add_argument(
        "--scale",
        type=float,
        help="pixels are multiplied by this first (default: the artifact's preprocess settings, else 1/255)",
    )
    uint8.add_argument(
        "--mean",
        help="then this is subtracted: one number or one per channel, comma-separated (default: preprocess settings, else 0)",
    )
    uint8.add_argument("--std", help="then the result is divided by this, like --mean (default: preprocess settings, else 1)")
    uint8.set_defaults(func=cmd_uint8_input)

    bench = commands.add_parser(
        "bench", help="digits and MobileNetV2 through every variant in one run; figures -> reports + docs/benchmarks.md"
    )
    bench.add_argument("--keras-model", type=Path, default=DEFAULT_TRAIN_DIR / "model.keras", help="the trained digits model")
    bench.add_argument(
        "--page",
        type=Path,
        default=BENCHMARKS_PAGE,
        help="docs page whose bench-export section is refreshed (default docs/benchmarks.md)",
    )
    bench.add_argument("--no-docs", action="store_true", help="leave the docs page alone")
    add_export_options(bench, variants_help=None)
    bench.set_defaults(
        func=cmd_bench,
        sparsity=0.75,
        slim_fraction=0.5,
        fine_tune_epochs=12,
        fine_tune_learning_rate=5e-4,
        opset=DEFAULT_OPSET,
        measure_rounds=7,
    )

    slim = commands.add_parser(
        "bench-slim",
        help="MobileNetV2 and its half-width copy (channel groups) timed side by side; "
        "figures -> reports/bench-slim.* + docs/benchmarks.md",
    )
    slim.add_argument(
        "model",
        nargs="?",
        default="mobilenetv2",
        metavar="MODEL",
        help="mobilenetv2 (random weights, nothing downloaded) or a one-input Keras image model (.keras or .h5)",
    )
    slim.add_argument(
        "--fraction", type=float, default=0.5, help="share of the channels of every shrinkable channel group removed"
    )
    slim.add_argument("--batch-size", type=int, default=32, help="images per call")
    slim.add_argument(
        "--rounds", type=int, default=10, help="interleaved timing rounds (both models in each; the ratio's spread is over them)"
    )
    slim.add_argument("--calls", type=int, default=3, help="timed calls per model and round (the round keeps their median)")
    slim.add_argument("--seed", type=int, default=0, help="MobileNetV2's random weights and the synthetic images")
    slim.add_argument("--opset", type=opset, default=DEFAULT_OPSET, help=f"ONNX opset of the conversions (>= {DEFAULT_OPSET})")
    slim.add_argument(
        "--page",
        type=Path,
        default=BENCHMARKS_PAGE,
        help="docs page whose bench-slim section is refreshed (default docs/benchmarks.md)",
    )
    slim.add_argument("--no-docs", action="store_true", help="leave the docs page alone")
    slim.set_defaults(func=cmd_bench_slim)

    add_versions_parser(commands)


def main(argv: Sequence[str] | None = None) -> int:
    return dispatch(PROG, __doc__, register, argv)
