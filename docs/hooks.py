"""mkdocs hook: the reference sections that code owns, generated at build time so they cannot drift.

A page asks for one with a marker line, replaced by the generated markdown:

- `<!-- generated: settings-reference -->`: every field of the runtime's settings model
  (`slipway.runtime_settings.RuntimeSettings` and the models it nests), with its type, default and description;
- `<!-- generated: wrappers-modules -->`: the docstring of every module in `engine/` and `wrappers/`, which
  says what it does (in MLServer, for `wrappers/`) and why;
- `<!-- generated: make-targets -->`: every Make target with a `##` description, as `make help` lists them.

The plots the benchmarks write beside their JSON (`reports/*.png`, the ones kept in git) are served as
`assets/<name>.png`, so a page shows the figure itself, never a copy that could drift from it.

Importing `slipway.runtime_settings` needs only pydantic; the modules' docstrings are read with `ast`, so
building the docs never imports MLServer or ONNX Runtime.
"""

from __future__ import annotations

import ast
import json
import re
import sys
import types
import typing
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SETTINGS_MARKER = "<!-- generated: settings-reference -->"
MODULES_MARKER = "<!-- generated: wrappers-modules -->"
TARGETS_MARKER = "<!-- generated: make-targets -->"
_TARGET = re.compile(r"^([a-z][a-z-]*):.*?## (.+)$", re.MULTILINE)


REPORTS = ROOT / "reports"


def on_files(files, config):  # the arguments mkdocs passes to this hook
    from mkdocs.structure.files import File

    for plot in sorted(REPORTS.glob("*.png")):
        files.append(File.generated(config, f"assets/{plot.name}", abs_src_path=str(plot)))
    return files


def on_page_markdown(markdown: str, page, config, files) -> str:  # the arguments mkdocs passes to this hook
    if SETTINGS_MARKER in markdown:
        markdown = markdown.replace(SETTINGS_MARKER, settings_reference())
    if MODULES_MARKER in markdown:
        markdown = markdown.replace(MODULES_MARKER, package_modules("engine") + "\n\n" + package_modules("wrappers"))
    if TARGETS_MARKER in markdown:
        markdown = markdown.replace(TARGETS_MARKER, make_targets())
    return markdown


def _models():
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from pydantic import BaseModel

    from slipway.runtime_settings import RuntimeSettings

    found: list[type[BaseModel]] = []

    def visit(model: type[BaseModel]) -> None:
        if model in found:
            return
        found.append(model)
        for field in model.model_fields.values():
            for nested in _nested_models(field.annotation, BaseModel):
                visit(nested)

    visit(RuntimeSettings)
    return found


def _nested_models(annotation, base) -> list:
    if isinstance(annotation, type) and issubclass(annotation, base):
        return [annotation]
    return [model for arg in typing.get_args(annotation) for model in _nested_models(arg, base)]


def _anchor(model: type) -> str:
    return f"settings-{model.__name__.lower()}"


def _type_text(annotation) -> str:
    """A field's type as a reader of JSON would name it."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if annotation is type(None):
        return "null"
    if origin is typing.Literal:
        return " \\| ".join(f"`{json.dumps(arg)}`" for arg in args)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_type_text(arg) for arg in args)
    if origin in (list, tuple):
        inner = sorted({_type_text(arg) for arg in args if arg is not Ellipsis})
        kind = "list" if origin is list else f"{len(args)} items"
        return f"{kind} of {', '.join(inner)}"
    if origin is dict:
        return f"object of {_type_text(args[1])}"
    if isinstance(annotation, type) and hasattr(annotation, "model_fields"):
        return f"[{annotation.__name__}](#{_anchor(annotation)})"
    names = {bool: "boolean", int: "integer", float: "number", str: "string"}
    if annotation in names:
        return names[annotation]
    return str(annotation).replace("typing.", "")


def _default_text(field) -> str:
    from pydantic_core import PydanticUndefined

    if field.default_factory is not None:
        value = field.default_factory()
        if hasattr(value, "model_dump"):
            return "its defaults"
    elif field.default is PydanticUndefined:
        return "(required)"
    else:
        value = field.default
    if isinstance(value, float) and value != round(value, 6):
        return f"`{value:.6g}`"
    return f"`{json.dumps(value)}`"


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def settings_reference() -> str:
    blocks = []
    for model in _models():
        doc = " ".join((model.__doc__ or "").split())
        rows = ["| key | type | default | meaning |", "|---|---|---|---|"]
        for name, field in model.model_fields.items():
            rows.append(f"| `{name}` | {_type_text(field.annotation)} | {_default_text(field)} | "
                        f"{_cell(field.description or '')} |")
        title = "`parameters.extra`" if model.__name__ == "RuntimeSettings" else f"`{model.__name__}`"
        blocks.append(f"### {title} {{#{_anchor(model)}}}\n\n{doc}\n\n" + "\n".join(rows))
    return "\n\n".join(blocks)


def package_modules(package: str) -> str:
    blocks = []
    for path in sorted((ROOT / package).rglob("*.py")):
        docstring = ast.get_docstring(ast.parse(path.read_text()))
        if not docstring or path.name == "__init__.py":
            continue
        blocks.append(f"### `{path.relative_to(ROOT).as_posix()}`\n\n{docstring}")
    return "\n\n".join(blocks)


def make_targets() -> str:
    """The Makefile's described targets as a table; `help` aside. Words in CAPS=, paths and commands are code."""
    rows = ["| target | what it does |", "|---|---|"]
    for target, text in _TARGET.findall((ROOT / "Makefile").read_text()):
        if target != "help":
            rows.append(f"| `make {target}` | {_cell(text).replace('<', '&lt;')} |")  # <overlay> is not a tag
    return "\n".join(rows)
