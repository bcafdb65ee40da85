"""Reading the JSON and YAML files people hand to commands.

Every command reads some: version records, model settings, SLOs, kustomizations, saved
Prometheus answers. A file that is missing, unreadable, not UTF-8 or does not parse is one
`FileProblem` naming the file and where it breaks (line and column, from 1), so each
command only adds what to send instead.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


class FileProblem(ValueError):
    """A file that cannot be used as it is; the message names it and says where and why."""


def read_text(path: Path, what: str | None = None) -> str:
    """The UTF-8 text of `path`; `what` names it in errors (the path by default)."""
    path, what = Path(path), what or str(path)
    if path.is_dir():
        raise FileProblem(f"{what} is a folder, not a file")
    try:
        data = path.read_bytes()
    except FileNotFoundError as err:
        raise FileProblem(f"{what} does not exist") from err
    except OSError as err:
        raise FileProblem(f"{what} cannot be read ({err.strerror or err})") from err
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise FileProblem(f"{what} is not UTF-8 text ({_utf8_problem(data, err)})") from err


def read_json(path: Path, what: str | None = None) -> Any:
    """The JSON value in `path`."""
    text, what = read_text(path, what), what or str(path)
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise FileProblem(f"{what} is not JSON ({err.msg} at line {err.lineno}, column {err.colno})") from err
    except RecursionError as err:
        raise FileProblem(f"{what} is not JSON this reader takes (nested too deeply)") from err


def read_yaml(path: Path, what: str | None = None, *, documents: bool = False) -> Any:
    """The YAML value in `path`, or with `documents` the list of every document in it."""
    return parse_yaml(read_text(path, what), what or str(path), documents=documents)


def parse_yaml(text: str, what: str, *, documents: bool = False) -> Any:
    """YAML text (a file's, or a string inside another file) parsed; `what` names it in errors."""
    import yaml

    try:
        return list(yaml.safe_load_all(text)) if documents else yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise FileProblem(f"{what} is not valid YAML: {_yaml_problem(err)}") from err


def _utf8_problem(data: bytes, err: UnicodeDecodeError) -> str:
    """Where the first byte that is not UTF-8 lies, as a person counts (line and column, from 1)."""
    line, column = data.count(b"\n", 0, err.start) + 1, err.start - data.rfind(b"\n", 0, err.start)
    return f"byte 0x{data[err.start]:02x} at line {line}, column {column}: {err.reason}"


def _yaml_problem(err: Exception) -> str:
    """PyYAML's several-line report as one line: the problem and where it is."""
    first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    problem = getattr(err, "problem", None) or getattr(err, "context", None) or first
    mark = getattr(err, "problem_mark", None) or getattr(err, "context_mark", None)
    if mark is not None:
        return f"{problem} at line {mark.line + 1}, column {mark.column + 1}"
    position = getattr(err, "position", None)  # a ReaderError: a character YAML does not allow
    return f"{problem} at character {position + 1}" if position is not None else problem
