"""Payloads from metadata and sample files, checked against what the model takes."""

import json
import re

import numpy as np
import pytest

from loadtest.payloads import PayloadError, arrays_from_file, arrays_from_metadata, check_against_metadata
from slipway.v2_requests import rest_body

METADATA_INPUTS = [
    {"name": "image", "datatype": "FP32", "shape": [-1, 8, 8, 1]},
    {"name": "ids", "datatype": "INT64", "shape": [-1, 3]},
]


def test_metadata_gives_typed_tensors_with_the_batch_filled_in():
    arrays = arrays_from_metadata(METADATA_INPUTS, batch_size=5)
    assert arrays["image"].shape == (5, 8, 8, 1) and arrays["image"].dtype == np.float32
    assert arrays["ids"].shape == (5, 3) and arrays["ids"].dtype == np.int64
    assert 0 <= arrays["image"].min() and arrays["image"].max() < 1
    check_against_metadata(arrays, METADATA_INPUTS)
    body = json.loads(rest_body(arrays))
    assert [item["datatype"] for item in body["inputs"]] == ["FP32", "INT64"] and len(body["inputs"][1]["data"]) == 15


def test_metadata_that_cannot_be_filled_at_random_is_refused():
    with pytest.raises(PayloadError, match="dynamic dimensions beyond the batch; pass --data"):
        arrays_from_metadata([{"name": "text", "datatype": "FP32", "shape": [-1, -1]}], 1)
    with pytest.raises(PayloadError, match="BYTES: random data would be meaningless"):
        arrays_from_metadata([{"name": "text", "datatype": "BYTES", "shape": [-1]}], 1)


def test_sample_files_npz_and_json(tmp_path):
    npz = tmp_path / "rows.npz"
    np.savez(
        npz,
        **{"input:image": np.ones((3, 8, 8, 1), np.float32), "output:probabilities": np.zeros((3, 10)), "labels": np.arange(3)},
    )
    rows = arrays_from_file(npz, batch_size=5)
    assert list(rows) == ["image"] and rows["image"].shape == (5, 8, 8, 1)  # wraps around the 3 rows
    body = tmp_path / "body.json"
    body.write_text(json.dumps({"inputs": [{"name": "image", "datatype": "FP32", "shape": [2, 8, 8, 1], "data": [0.5] * 128}]}))
    assert arrays_from_file(body, batch_size=1)["image"].shape == (2, 8, 8, 1)
    (tmp_path / "bad.json").write_text('{"inputs": [{"name": "x"}]}')
    with pytest.raises(PayloadError, match="is not a V2 request body"):
        arrays_from_file(tmp_path / "bad.json", 1)
    with pytest.raises(PayloadError, match="must be .npz or .json"):
        (tmp_path / "rows.csv").write_text("1,2")
        arrays_from_file(tmp_path / "rows.csv", 1)


def test_sample_data_that_does_not_match_the_model_is_refused():
    with pytest.raises(PayloadError, match=r"has inputs \['pixels'\], the model takes \['ids', 'image'\]"):
        check_against_metadata({"pixels": np.zeros((1, 64), np.float32)}, METADATA_INPUTS)
    with pytest.raises(PayloadError, match="'image' is FP64, the model wants FP32"):
        check_against_metadata({"image": np.zeros((1, 8, 8, 1)), "ids": np.zeros((1, 3), np.int64)}, METADATA_INPUTS)


def test_sample_files_numpy_cannot_read_safely_are_one_line(tmp_path):
    (tmp_path / "corrupt.npz").write_bytes(b"not a zip at all")
    np.savez(tmp_path / "objects.npz", image=np.array([{"a": 1}, None], dtype=object))
    np.save(tmp_path / "single.npy", np.zeros(3))
    (tmp_path / "single.npy").rename(tmp_path / "single.npz")
    (tmp_path / "folder.npz").mkdir()
    for name, message in (
        ("corrupt.npz", "is not a readable .npz archive (not a zip of arrays)"),
        ("objects.npz", "array 'image' cannot be read (Object arrays cannot be loaded"),
        ("single.npz", "a single .npy array, not an .npz archive"),
        ("folder.npz", "folder.npz is a folder"),
    ):
        with pytest.raises(PayloadError, match=re.escape(message)) as caught:
            arrays_from_file(tmp_path / name, 1)
        assert "\n" not in str(caught.value) and "allow_pickle=`" not in str(caught.value)
