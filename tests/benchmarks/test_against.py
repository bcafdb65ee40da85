"""`python -m benchmarks against REV`: this tree's server and another commit's, both real, loaded in turns."""

from __future__ import annotations

import pytest

from benchmarks.against import BASE, THIS, compare, plot, resolve, served_by, tree_of
from benchmarks.models import BenchModel
from slipway.artifact import MODEL_FILE, load_input_example
from slipway.cli import UserError


def test_a_name_git_does_not_know_is_refused_in_one_line_naming_what_to_pass():
    with pytest.raises(UserError, match="not a commit of this repository: pass a commit id"):
        resolve("no-such-branch-anywhere")


@pytest.mark.slow
def test_this_tree_against_its_own_commit_serves_the_same_answers_and_pairs_every_round(digits_artifact, tmp_path):
    commit = resolve("HEAD")
    tree = tree_of(commit, root=tmp_path / "trees")
    assert tree_of(commit, root=tmp_path / "trees") == tree  # unpacked once
    assert (tree / "wrappers" / "launch.py").is_file() and not list((tmp_path / "trees").glob(".*"))
    row = load_input_example(digits_artifact)[0]["image"][:1]
    model = BenchModel("digits", digits_artifact / MODEL_FILE, "image", row, "test artifact")
    steps = []
    result = compare(
        model,
        commit,
        tree,
        protocols=["grpc", "rest"],
        concurrency=[2],
        seconds=0.3,
        rounds=2,
        work_dir=tmp_path / "servers",
        on_step=lambda: steps.append(1),
    )
    assert len(steps) == 2 * 2 * 2
    assert [(p["protocol"], p["concurrency"]) for p in result["points"]] == [("grpc", 2), ("rest", 2)]
    for point in result["points"]:
        for side in (THIS, BASE):
            assert len(point[side]["rounds"]) == 2 and all(run["errors"] == 0 for run in point[side]["rounds"])
            assert point[side]["rows_per_s"] > 0 and point[side]["server_cpu_ms_per_request"] > 0
        this_rounds, base_rounds = point[THIS]["rounds"], point[BASE]["rounds"]
        assert point["rows_per_s_ratio_rounds"] == [
            round(a["rows_per_s"] / b["rows_per_s"], 3) for a, b in zip(this_rounds, base_rounds)
        ]
        assert min(point["rows_per_s_ratio_rounds"]) <= point["rows_per_s_ratio"] <= max(point["rows_per_s_ratio_rounds"])
    with served_by(tree, tmp_path / "servers" / "digits-against") as served:  # REV's code serves, not ours
        environ = dict(item.split(b"=", 1) for item in open(f"/proc/{served.pid}/environ", "rb").read().split(b"\0") if item)
    assert environ[b"PYTHONPATH"].split(b":")[0] == str(tree).encode()
    plot({"rev": commit, "models": {"digits": result}}, tmp_path / "against.png")
    assert (tmp_path / "against.png").read_bytes().startswith(b"\x89PNG")
