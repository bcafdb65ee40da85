"""`python -m export versions ...`: the model store's commands.

Every command takes `--store` (default `./model-store`) and `--json` (machine-readable
output on stdout; messages stay on stderr). Mistakes and refusals are one line and exit 2.
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TransferSpeedColumn
from rich.table import Table

from export.store.db import StoreError
from export.store.lineage import gather
from export.store.records import TagMove, VersionRecord, diff_records, flatten
from export.store.refs import Ref, RefError, parse_ref, parse_tag_ref
from export.store.store import ModelStore, check_publish
from slipway.artifact import ArtifactError, read_manifest
from slipway.cli import UserError, console
from slipway.paths import DEMO_ARTIFACT_DIR, MODEL_STORE_DIR, artifact_dir

out = Console(highlight=False, soft_wrap=True)
ACCURACY_KEYS = ("accuracy", "onnx_test_accuracy", "train.test_accuracy")


def _emit(args: argparse.Namespace, payload: Any, human: Callable[[], None]) -> None:
    if args.json:
        print(json.dumps(payload, indent=2, sort_keys=True, default=str))
    else:
        human()


def _open(args: argparse.Namespace, *, create: bool = False) -> ModelStore:
    return ModelStore.open(args.store, create=create, artifact_root=getattr(args, "artifact_root", None))


def _tag(store: ModelStore, text: str, model: str | None) -> tuple[str, str]:
    """A bare tag's model: `--model`, else the only model carrying that tag."""
    model, tag = parse_tag_ref(text, model)
    if model is None:
        models = store.models_with_tag(tag)
        if len(models) != 1:
            where = f"models {', '.join(models)} all carry it" if models else "no model carries it"
            raise StoreError(f"tag {tag!r}: {where}; name the model as NAME@{tag} or with --model")
        model = models[0]
    return model, tag


def _ref(store: ModelStore, text: str) -> Ref:
    """A reference; without its name (`:3`, `:latest`, `@champion`, as `make` passes them when MODEL_NAME is unset),
    the model the store knows it by: the only model it holds, or the only one carrying that tag."""
    if not text.startswith((":", "@")):
        return parse_ref(text)
    models = store.models_with_tag(text[1:]) if text.startswith("@") else store.models()
    if len(models) != 1:
        where = f"models {', '.join(models)} all match" if models else "no model matches"
        raise StoreError(f"reference {text!r} names no model and {where}: write NAME{text} (make: MODEL_NAME=NAME)")
    return parse_ref(models[0] + text)


def _metric(text: str) -> tuple[str, float]:
    name, sep, value = text.partition("=")
    try:
        number = float(value)
        if not sep or not name or not math.isfinite(number):
            raise ValueError(text)
        return name, number
    except ValueError:
        raise UserError(f"--metric {text!r}: write NAME=NUMBER, e.g. --metric accuracy=0.98") from None


def cmd_publish(args: argparse.Namespace) -> int:
    if args.artifact_dir is None:  # the folder `export convert` wrote for --model, else the demo's
        args.artifact_dir = artifact_dir(args.model) if args.model else DEMO_ARTIFACT_DIR
    metrics = dict(_metric(text) for text in args.metric)
    try:
        source_digest = read_manifest(args.artifact_dir).digest
    except ArtifactError as err:
        raise UserError(f"cannot publish: {err}") from err
    check_publish(args.artifact_dir, args.model, args.tag)  # before a new store is created for nothing
    lineage = gather(args.artifact_dir, source_digest, reports_dir=args.reports, variant=args.variant, extra_metrics=metrics)
    with (
        _open(args, create=True) as store,
        Progress(
            TextColumn("[bold]publish[/]"),
            BarColumn(),
            DownloadColumn(),
            TransferSpeedColumn(),
            console=console,
            transient=True,
            disable=not console.is_terminal,
        ) as progress,
    ):
        total = sum(path.stat().st_size for path in Path(args.artifact_dir).rglob("*") if path.is_file())
        task = progress.add_task("copy", total=total)
        record, created = store.publish(
            args.artifact_dir,
            args.model,
            lineage=lineage,
            tag=args.tag,
            on_bytes=lambda n: progress.advance(task, n),
        )
    notes = lineage.notes if created else []  # an existing version keeps the lineage it was published with
    for note in notes:
        console.print(f"[yellow]note:[/] {note}", soft_wrap=True)

    def human() -> None:
        tags = f", tags: {', '.join(record.tags)}" if record.tags else ""
        if created:
            out.print(
                f"published [bold]{record.ref}[/] (sha256 {record.digest[:12]}, {_size(record.size_bytes)}{tags}) -> {record.uri}"
            )
        else:
            out.print(
                f"[bold]{record.ref}[/] already holds this content (sha256 {record.source_digest[:12]}); nothing new was stored{tags}"
            )

    _emit(args, {**record.model_dump(), "created": created, "notes": notes}, human)
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    with _open(args) as store:
        records = store.list(args.model)

    def human() -> None:
        if not records:
            out.print("the store holds no versions yet: publish one with `python -m export versions publish ARTIFACT_DIR`")
            return
        table = Table(title=f"model versions in {args.store}")
        for column in ("version", "tags", "created", "by", "variant", "accuracy", "size", "digest"):
            table.add_column(column)
        for record in records:
            accuracy = next((record.metrics[k] for k in ACCURACY_KEYS if k in record.metrics), None)
            table.add_row(
                record.ref,
                ", ".join(record.tags),
                record.created_at,
                record.created_by,
                str(record.lineage.get("variant") or "-"),
                "-" if accuracy is None else f"{accuracy:.4f}",
                _size(record.size_bytes),
                record.digest[:12],
            )
        out.print(table)

    _emit(args, [record.model_dump() for record in records], human)
    return 0


def _show_record(record: VersionRecord) -> None:
    table = Table(title=record.ref, show_header=False)
    table.add_column("field", style="bold")
    table.add_column("value", overflow="fold")
    for field, value in flatten(record.model_dump()).items():
        table.add_row(field, _text(value))
    out.print(table)


def cmd_show(args: argparse.Namespace) -> int:
    with _open(args) as store:
        record = store.get(_ref(store, args.ref))
    _emit(args, record.model_dump(), lambda: _show_record(record))
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    with _open(args) as store:
        record = store.verify(_ref(store, args.ref))
    _emit(
        args,
        {**record.model_dump(), "verified": True},
        lambda: out.print(
            f"{record.ref}: every file matches its sha256 and the digest recorded at publish ({record.digest[:12]})"
        ),
    )
    return 0


def _print_move(move: TagMove) -> None:
    if not move.changed:
        out.print(f"{move.model}@{move.tag} already points at version {move.version}; nothing changed")
        return
    before = f" (was {move.previous})" if move.previous else ""
    out.print(f"{move.model}@{move.tag} -> version [bold]{move.version}[/]{before}")


def cmd_promote(args: argparse.Namespace) -> int:
    model, tag = parse_tag_ref(args.tag, None)
    with _open(args) as store:
        ref = _ref(store, args.ref)
        if model is not None and model != ref.model:
            raise UserError(f"tag {args.tag!r} belongs to model {model!r} but {args.ref!r} is a version of {ref.model!r}")
        move = store.promote(tag, ref)
    _emit(args, move.model_dump(), lambda: _print_move(move))
    return 0


def cmd_rollback(args: argparse.Namespace) -> int:
    with _open(args) as store:
        move = store.rollback(*_tag(store, args.tag, args.model))
    _emit(args, move.model_dump(), lambda: _print_move(move))
    return 0


def cmd_history(args: argparse.Namespace) -> int:
    with _open(args) as store:
        model, tag = _tag(store, args.tag, args.model)
        moves = store.tag_history(model, tag)

    def human() -> None:
        table = Table(title=f"history of {model}@{tag}")
        for column in ("when", "action", "version", "from", "by"):
            table.add_column(column)
        for move in moves:
            table.add_row(move.at, move.action, move.version, move.previous or "-", move.by)
        out.print(table)

    _emit(args, [move.model_dump() for move in moves], human)
    return 0


def cmd_diff(args: argparse.Namespace) -> int:
    with _open(args) as store:
        a, b = store.get(_ref(store, args.a)), store.get(_ref(store, args.b))
    rows = diff_records(a, b)

    def human() -> None:
        table = Table(title=f"{a.ref} vs {b.ref}")
        for column in ("field", a.ref, b.ref, "change"):
            table.add_column(column, overflow="fold")
        for row in rows:
            change = f"{row['change']:+.6g}" if "change" in row else ("" if row["same"] else "changed")
            style = None if row["same"] else "bold"
            table.add_row(row["field"], _text(row["a"]), _text(row["b"]), change, style=style)
        out.print(table)

    _emit(args, {"a": a.model_dump(), "b": b.model_dump(), "rows": rows}, human)
    return 0


def cmd_gc(args: argparse.Namespace) -> int:
    with _open(args) as store:
        result = store.gc(args.keep, model=args.model, dry_run=args.dry_run)

    def human() -> None:
        verb = "would delete" if result.dry_run else "deleted"
        out.print(f"{verb} {len(result.deleted)} version(s){': ' + ', '.join(result.deleted) if result.deleted else ''}")
        for ref, tags in result.kept_for_tags.items():
            out.print(f"kept {ref}: needed by {', '.join(tags)}")
        for folder in result.unknown_folders:
            console.print(f"[yellow]note:[/] {folder} is in the artifact folder but unknown to the store; left alone")

    _emit(args, result.model_dump(), human)
    return 0


def _size(n: int) -> str:
    return f"{n / 1024:.1f} KiB" if n < 1 << 20 else f"{n / (1 << 20):.1f} MiB"


def _text(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.6g}"
    return value if isinstance(value, str) else json.dumps(value)


def _guarded(func: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """Store refusals and malformed references become one-line user errors."""

    def run(args: argparse.Namespace) -> int:
        try:
            return func(args)
        except (StoreError, RefError) as err:
            raise UserError(str(err)) from err

    return run


def add_versions_parser(commands: argparse._SubParsersAction) -> None:
    """Add `versions` and its commands to `python -m export`."""
    versions = commands.add_parser(
        "versions",
        help="the model store: publish, list, show, promote, rollback, diff, gc",
        description="Immutable, numbered, tagged model versions with lineage. REF is NAME:NUMBER, NAME:latest or NAME@TAG.",
    )
    sub = versions.add_subparsers(dest="versions_command", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--store", default=MODEL_STORE_DIR, help=f"store folder holding store.db (default: {MODEL_STORE_DIR})")
    common.add_argument("--json", action="store_true", help="print machine-readable JSON on stdout")

    def command(name: str, func: Callable[[argparse.Namespace], int], text: str) -> argparse.ArgumentParser:
        parser = sub.add_parser(name, parents=[common], help=text, description=text)
        parser.set_defaults(func=_guarded(func))
        return parser

    publish = command("publish", cmd_publish, "store an artifact folder as the model's next version (same content: same version)")
    publish.add_argument(
        "artifact_dir",
        type=Path,
        nargs="?",
        help="artifact folder (model.onnx, model-settings.json, manifest.json; default: the one `export convert` "
        "wrote for --model, else the demo's)",
    )
    publish.add_argument("--model", help="model name (default: the name in the folder's model-settings.json)")
    publish.add_argument("--tag", help="point this tag at the version (e.g. v1.0, champion)")
    publish.add_argument("--variant", help="export variant to record (default: from reports/export.json)")
    publish.add_argument(
        "--metric", action="append", default=[], metavar="NAME=NUMBER", help="an extra metric to record (repeatable)"
    )
    publish.add_argument("--reports", type=Path, help="reports folder to read lineage from (default: reports/)")
    publish.add_argument(
        "--artifact-root", help="fsspec URL for the artifacts (s3://..., gs://...), chosen when the store is created"
    )

    listing = command("list", cmd_list, "list published versions, newest first")
    listing.add_argument("--model", help="only this model")

    show = command("show", cmd_show, "one version's record: URI, digest, tags, metrics, lineage")
    show.add_argument("ref", help="NAME:NUMBER, NAME:latest or NAME@TAG")

    promote = command("promote", cmd_promote, "point a tag at a version (the move is recorded)")
    promote.add_argument("tag", help="tag to move, e.g. champion (or NAME@TAG)")
    promote.add_argument("ref", help="version to point it at: NAME:NUMBER, NAME:latest or NAME@OTHER_TAG")

    for name, func, text in (
        ("rollback", cmd_rollback, "move a tag back to the version it pointed at before"),
        ("history", cmd_history, "every recorded move of a tag"),
    ):
        tag_command = command(name, func, text)
        tag_command.add_argument("tag", help="TAG or NAME@TAG")
        tag_command.add_argument("--model", help="the tag's model, when a bare TAG is ambiguous")

    diff = command("diff", cmd_diff, "two versions' metrics and lineage side by side")
    diff.add_argument("a", help="REF")
    diff.add_argument("b", help="REF")

    gc = command("gc", cmd_gc, "delete versions beyond the newest N of each model (records and files), never one a tag needs")
    gc.add_argument("--keep", type=int, required=True, help="versions to keep per model, newest first")
    gc.add_argument("--model", help="only this model")
    gc.add_argument("--dry-run", action="store_true", help="say what would be deleted, delete nothing")

    verify = command("verify", cmd_verify, "re-hash a stored version against its manifest and its recorded digest")
    verify.add_argument("ref", help="NAME:NUMBER, NAME:latest or NAME@TAG")
