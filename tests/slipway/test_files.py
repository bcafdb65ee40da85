import pytest

from slipway.files import FileProblem, parse_yaml, read_json, read_yaml


@pytest.mark.parametrize(
    "content, message",
    [
        (None, "record.json does not exist"),
        (
            b'{"name": "digits",\n "version": \xe9}',
            "record.json is not UTF-8 text (byte 0xe9 at line 2, column 13: invalid continuation byte)",
        ),
        (b'{"name": digits}', "record.json is not JSON (Expecting value at line 1, column 10)"),
        (b"[" * 100_000 + b"]" * 100_000, "record.json is not JSON this reader takes (nested too deeply)"),
    ],
)
def test_a_json_file_that_cannot_be_used_is_one_line_saying_where(tmp_path, content, message):
    path = tmp_path / "record.json"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(FileProblem) as caught:
        read_json(path)
    assert str(caught.value) == f"{path.parent}/{message}"


def test_a_folder_is_named_as_a_folder_under_the_name_given(tmp_path):
    with pytest.raises(FileProblem, match=r"^the SLO file is a folder, not a file$"):
        read_yaml(tmp_path, "the SLO file")


def test_yaml_documents_and_problems(tmp_path):
    path = tmp_path / "r.yaml"
    path.write_text("kind: A\n---\nkind: B\n")
    assert read_yaml(path, documents=True) == [{"kind": "A"}, {"kind": "B"}]
    path.write_text("kind: A\n  name: b\n")
    with pytest.raises(FileProblem, match=r"r\.yaml is not valid YAML: mapping values are not allowed here at line 2, column 7$"):
        read_yaml(path)
    with pytest.raises(FileProblem, match=r"^the patch is not valid YAML: .* at character 7$"):
        parse_yaml("kind: \x07", "the patch")
