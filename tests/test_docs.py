"""The documentation site: `mkdocs build --strict` passes, every page is in the nav, and the reference
sections generated from the code (docs/hooks.py) name every setting and every wrappers module."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from html import unescape
from pathlib import Path

import pytest
import yaml

from slipway.paths import PROJECT_ROOT

DOCS = PROJECT_ROOT / "docs"


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site")
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=PROJECT_ROOT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, f"mkdocs build --strict failed:\n{result.stdout}\n{result.stderr}"
    return out


def _text(html_file: Path) -> str:
    return unescape(re.sub(r"<[^>]+>", "", html_file.read_text()))


def _nav_pages(nav) -> set[str]:
    pages = set()
    for entry in nav:
        value = next(iter(entry.values())) if isinstance(entry, dict) else entry
        pages |= _nav_pages(value) if isinstance(value, list) else {value}
    return pages


def test_every_page_is_in_the_nav_and_the_nav_names_no_missing_page():
    config = yaml.load((PROJECT_ROOT / "mkdocs.yml").read_text(), Loader=yaml.SafeLoader)
    pages = {str(path.relative_to(DOCS)) for path in DOCS.rglob("*.md")}
    assert _nav_pages(config["nav"]) == pages


def test_the_settings_reference_names_every_field_of_every_settings_model(site):
    from pydantic import BaseModel

    from slipway.runtime_settings import RuntimeSettings

    page = _text(site / "serving" / "index.html")
    models, seen = [RuntimeSettings], set()
    while models:
        model = models.pop()
        if model in seen:
            continue
        seen.add(model)
        for name, field in model.model_fields.items():
            assert re.search(rf"\b{re.escape(name)}\b", page), f"{model.__name__}.{name} is not in the settings reference"
            if field.description:
                assert " ".join(field.description.split()) in page, f"{model.__name__}.{name}'s description"
            models += [
                arg
                for arg in (field.annotation, *getattr(field.annotation, "__args__", ()))
                if isinstance(arg, type) and issubclass(arg, BaseModel)
            ]
    assert {model.__name__ for model in seen} >= {"TensorrtOptions", "CudaOptions", "ImagePreprocessing", "TopKPostprocessing"}
    assert "<!-- generated" not in (site / "serving" / "index.html").read_text()


@pytest.mark.parametrize("package", ["engine", "wrappers"])
def test_the_internals_page_carries_every_engine_and_wrappers_module_docstring(site, package):
    page = _text(site / "internals" / "index.html")
    for path in sorted((PROJECT_ROOT / package).rglob("*.py")):
        docstring = ast.get_docstring(ast.parse(path.read_text()))
        if path.name == "__init__.py" or not docstring:
            continue
        assert path.relative_to(PROJECT_ROOT).as_posix() in page, path
        first_words = re.sub(r"[`*]", "", docstring.split("\n")[0])[:40]
        assert first_words in page, (path.name, first_words)


def test_every_plot_kept_in_git_is_shown_on_a_page(site):
    """A committed plot (reports/*.png) is shown where its figures are discussed, from the one copy in reports/."""
    kept = subprocess.run(["git", "ls-files", "reports/*.png"], cwd=PROJECT_ROOT, capture_output=True, text=True, check=True)
    names = [Path(line).name for line in kept.stdout.split()]
    assert names, "no plot is kept in git"
    pages = "".join(path.read_text() for path in site.rglob("index.html"))
    hidden = [name for name in names if f"assets/{name}" not in pages]
    assert not hidden, f"plots named but shown on no page (add ![...](assets/NAME) where they are discussed): {hidden}"
    for name in names:
        assert (site / "assets" / name).is_file(), name
