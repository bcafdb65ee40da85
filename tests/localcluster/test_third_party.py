"""The vendored Seldon Core operator is exactly its 1.17.1 release: every file's git blob id matches the tag's."""

from __future__ import annotations

import hashlib

from localcluster.components import SELDON_OPERATOR_DIR

PROVENANCE = SELDON_OPERATOR_DIR / "PROVENANCE.tsv"


def _git_blob_id(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def test_every_vendored_file_is_the_release_s_own():
    lines = PROVENANCE.read_text().splitlines()
    assert "operator/v1.17.1" in lines[0] and "822053e7bbc897f34d84aaf5892d5947163249c5" in lines[0]
    recorded = dict(line.split("\t") for line in lines[1:])
    assert {"main.go", "go.mod", "go.sum", "LICENSE", "config/crd/bases/machinelearning.seldon.io_seldondeployments.yaml"} <= set(
        recorded
    )
    for path, blob in recorded.items():
        assert _git_blob_id((SELDON_OPERATOR_DIR / path).read_bytes()) == blob, f"{path} differs from operator/v1.17.1"


def test_nothing_unrecorded_lies_in_the_vendored_tree():
    recorded = {line.split("\t")[0] for line in PROVENANCE.read_text().splitlines()[1:]}
    present = {
        str(path.relative_to(SELDON_OPERATOR_DIR))
        for path in SELDON_OPERATOR_DIR.rglob("*")
        if path.is_file() and path.name not in ("PROVENANCE.tsv", "README.md")
    }
    assert present == recorded
