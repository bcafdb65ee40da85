"""The README's measured sections: replaced between their markers only, and all present."""

import re

from slipway.readme import README, replace_section

MEASURED_SECTIONS = ("bench-export", "bench", "tune-check", "gpu")


def test_a_section_is_replaced_between_its_markers_only(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text("# Title\n<!-- bench:start -->\nold\n<!-- bench:end -->\n<!-- gpu:start -->\nkept\n<!-- gpu:end -->\n")
    assert replace_section(readme, "bench", "new figures")
    assert readme.read_text() == (
        "# Title\n<!-- bench:start -->\nnew figures\n<!-- bench:end -->\n<!-- gpu:start -->\nkept\n<!-- gpu:end -->\n"
    )


def test_nothing_is_written_where_the_markers_are_absent(tmp_path):
    plain = tmp_path / "PLAIN.md"
    plain.write_text("no markers\n")
    assert not replace_section(plain, "bench", "x") and plain.read_text() == "no markers\n"
    assert not replace_section(tmp_path / "missing.md", "bench", "x") and not (tmp_path / "missing.md").exists()


def test_every_measured_section_has_its_markers_once_in_the_readme():
    text = README.read_text()
    for name in MEASURED_SECTIONS:
        assert text.count(f"<!-- {name}:start -->") == 1 and text.count(f"<!-- {name}:end -->") == 1, name
        assert text.index(f"<!-- {name}:start -->") < text.index(f"<!-- {name}:end -->"), name


def _table_keys(text: str, heading: str) -> set[str]:
    """The backquoted names in the first column of the table under the row `heading`."""
    rows = text.split(heading, 1)[1].split("\n\n", 1)[0].splitlines()[2:]
    return {name for row in rows for name in re.findall(r"`([^`]+)`", row.split("|")[1])}


def test_every_runtime_setting_is_in_the_readmes_table_and_it_names_no_other():
    from wrappers.settings import RuntimeSettings

    assert _table_keys(README.read_text(), "| key | default | meaning |") == set(RuntimeSettings.model_fields)


def test_every_make_target_with_help_is_in_the_readmes_table_and_it_names_no_other():
    makefile = (README.parent / "Makefile").read_text()
    documented = set(re.findall(r"^([a-z-]+):.*## ", makefile, flags=re.MULTILINE)) - {"help"}
    listed = {key.split()[1] for key in _table_keys(README.read_text(), "| target | what it does |")}
    assert listed == documented
