"""`python -m deployments`: render, validate and apply the manifests for one model version."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from slipway.cli import UserError, console, exit_with
from slipway.paths import BUILD_DIR, DEMO_ARTIFACT_DIR

DEFAULT_OUT = BUILD_DIR / "manifests"


def _render(args: argparse.Namespace) -> list[dict]:
    from deployments.kustomize import KustomizeError
    from deployments.render import ModelRef, RenderError, render, write_manifests
    from deployments.validate import validate_documents
    from slipway.reports import write_report

    try:
        model = ModelRef.from_artifact(args.model_dir, version=args.version, uri=args.model_uri)
        docs = render(model, image=args.image)
    except (RenderError, KustomizeError) as err:
        raise UserError(str(err)) from err
    report = validate_documents(docs)
    for skipped in report.skipped:
        console.print(f"[yellow]skipped:[/] {skipped}")
    if not report.ok:
        raise UserError("rendered manifests are invalid, nothing written: " + "; ".join(report.errors))
    paths = write_manifests(docs, args.out)
    write_report(
        "manifests",
        {"model": model.__dict__, "image": args.image, "out_dir": str(args.out), "files": [str(p) for p in paths],
         "validation": report.as_dict()},
    )
    console.print(f"{len(docs)} resources for {model.name} version {model.version} -> {args.out} (valid: {len(report.checked)} checked)")
    return docs


def cmd_render(args: argparse.Namespace) -> int:
    _render(args)
    return 0


def cmd_deploy(args: argparse.Namespace) -> int:
    from deployments.apply import ClusterUnavailable, apply, connect

    try:
        connect()
    except ClusterUnavailable as err:
        raise UserError(f"{err}: nothing was applied. To render only, run `make manifests`") from err
    docs = _render(args)
    applied = apply(docs, namespace=args.namespace)
    console.print(f"applied {', '.join(applied)} to namespace {args.namespace}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m deployments", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    for name, func, text in (
        ("render", cmd_render, "render and validate the manifests into --out"),
        ("deploy", cmd_deploy, "render, validate and server-side apply to the current kubectl context"),
    ):
        command = commands.add_parser(name, help=text)
        command.add_argument("--model-dir", type=Path, default=DEMO_ARTIFACT_DIR, help="artifact folder to deploy")
        command.add_argument("--version", help="model version (default: the artifact's, else its digest's first 12 hex)")
        command.add_argument("--model-uri", help="where the cluster pulls the artifact from (s3://, gs://, pvc://)")
        command.add_argument("--image", default="slipway/mlserver-onnx:0.1.0", help="the MLServer + wrappers image")
        command.add_argument("--namespace", default="default")
        command.add_argument("--out", type=Path, default=DEFAULT_OUT)
        command.set_defaults(func=func)
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    exit_with(main)
