"""The front door and the measured sections: a README that stays short and points at pages that exist, the
benchmarks page's sections replaced between their markers only, and the hand-kept make-target table complete."""

import re
import subprocess

from slipway.paths import PROJECT_ROOT
from slipway.readme import BENCHMARKS_PAGE, replace_section

README = PROJECT_ROOT / "README.md"
DOCS = PROJECT_ROOT / "docs"
MEASURED_SECTIONS = ("bench-export", "bench-slim", "bench", "bench-peers", "tune-check", "gpu")
README_LIMIT_BYTES = 10 * 1024


def test_a_section_is_replaced_between_its_markers_only(tmp_path):
    page = tmp_path / "benchmarks.md"
    page.write_text("# Title\n<!-- bench:start -->\nold\n<!-- bench:end -->\n<!-- gpu:start -->\nkept\n<!-- gpu:end -->\n")
    assert replace_section(page, "bench", "new figures")
    assert page.read_text() == (
        "# Title\n<!-- bench:start -->\nnew figures\n<!-- bench:end -->\n<!-- gpu:start -->\nkept\n<!-- gpu:end -->\n"
    )


def test_nothing_is_written_where_the_markers_are_absent(tmp_path):
    plain = tmp_path / "PLAIN.md"
    plain.write_text("no markers\n")
    assert not replace_section(plain, "bench", "x") and plain.read_text() == "no markers\n"
    assert not replace_section(tmp_path / "missing.md", "bench", "x") and not (tmp_path / "missing.md").exists()


def test_every_measured_section_has_its_markers_once_on_the_benchmarks_page_and_none_in_the_readme():
    text = BENCHMARKS_PAGE.read_text()
    assert BENCHMARKS_PAGE == DOCS / "benchmarks.md"
    for name in MEASURED_SECTIONS:
        assert text.count(f"<!-- {name}:start -->") == 1 and text.count(f"<!-- {name}:end -->") == 1, name
        assert text.index(f"<!-- {name}:start -->") < text.index(f"<!-- {name}:end -->"), name
        assert f"<!-- {name}:start -->" not in README.read_text(), name


def test_the_readme_stays_a_front_door():
    text = README.read_text()
    assert len(text.encode()) <= README_LIMIT_BYTES, f"README.md is {len(text.encode())} bytes: move detail into docs/"
    commands = re.findall(r"^make \w+", text, flags=re.MULTILINE)
    assert commands[:2] == ["make demo", "make test"], commands[:2]


def test_every_page_the_readme_links_to_exists():
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", README.read_text())
    local = [link for link in links if not link.startswith(("http://", "https://"))]
    assert local, "the README links to no docs page"
    missing = [link for link in local if not (PROJECT_ROOT / link).is_file()]
    assert missing == []


def _table_keys(text: str, heading: str) -> set[str]:
    """The backquoted names in the first column of the table under the row `heading`."""
    rows = text.split(heading, 1)[1].split("\n\n", 1)[0].splitlines()[2:]
    return {name for row in rows for name in re.findall(r"`([^`]+)`", row.split("|")[1])}


def test_the_make_target_table_is_generated_from_the_makefile_with_every_described_target():
    import importlib.util

    spec = importlib.util.spec_from_file_location("docs_hooks", DOCS / "hooks.py")
    hooks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hooks)
    makefile = (PROJECT_ROOT / "Makefile").read_text()
    documented = set(re.findall(r"^([a-z-]+):.*## ", makefile, flags=re.MULTILINE)) - {"help"}
    assert hooks.TARGETS_MARKER in (DOCS / "getting-started.md").read_text()
    table = hooks.make_targets()
    listed = {key.split()[1] for key in _table_keys(table + "\n\n", "| target | what it does |")}
    assert listed == documented and len(table.splitlines()) == len(documented) + 2
    make_help = subprocess.run(
        ["make", "--no-print-directory", "help"], cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=60, check=True
    ).stdout
    assert {line.split()[1] for line in make_help.splitlines() if line.strip().startswith("make ")} - {"help"} == documented
