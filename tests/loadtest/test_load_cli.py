"""`python -m loadtest run` and `tune` refusing what cannot be a load test, before any load and without leftovers."""

from __future__ import annotations

import pytest

from loadtest.cli import main
from slipway.cli import EXIT_USER_ERROR, run
from tests.conftest import json_http_server, run_module

METADATA = {
    "name": "mm",
    "platform": "",
    "inputs": [{"name": "x", "datatype": "FP32", "shape": [-1, 4]}],
    "outputs": [{"name": "y", "datatype": "FP32", "shape": [-1, 3]}],
}


@pytest.fixture
def failing_server():
    """A V2 server that describes its model and refuses every inference (HTTP 501: it has no POST)."""
    with json_http_server(lambda path: METADATA) as url:
        yield url


def _refused(capsys, *argv: str) -> str:
    """Run the command in this process; it must exit 2 with one line and no traceback."""
    assert run(main, list(argv)) == EXIT_USER_ERROR
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err, err
    return err


def _usage_error(capsys, *argv: str) -> str:
    with pytest.raises(SystemExit) as exited:
        main(list(argv))
    assert exited.value.code == EXIT_USER_ERROR
    err = capsys.readouterr().err.strip()
    assert "\n" not in err, err
    return err


def test_a_refused_run_leaves_no_out_dir_and_an_out_dir_that_is_a_file_is_named(capsys, tmp_path, failing_server):
    out_dir = tmp_path / "locust"
    err = _refused(capsys, "run", "--host", "http://127.0.0.1:9", "--model", "mm", "--out-dir", str(out_dir))
    assert "cannot reach" in err and not out_dir.exists()
    err = _refused(
        capsys, "run", "--host", failing_server, "--model", "mm", "--data", str(tmp_path / "none.npz"), "--out-dir", str(out_dir)
    )
    assert "does not exist" in err and not out_dir.exists()
    afile = tmp_path / "afile"
    afile.write_text("")
    err = _refused(capsys, "run", "--host", failing_server, "--model", "mm", "--out-dir", str(afile))
    assert f"--out-dir {afile} is a file" in err
    err = _refused(capsys, "run", "--host", failing_server, "--model", "mm", "--out-dir", str(afile / "below"))
    assert "cannot create --out-dir" in err


@pytest.mark.parametrize(
    "args, message",
    [
        (["--users", "0"], "users: Input should be greater than or equal to 1"),
        (["--shape", "step", "--users", "0"], "users: Input should be greater than or equal to 1"),
        (["--processes", "-1"], "--processes must be between 0 and 64"),
        (["--request-timeout", "nan"], "--request-timeout above 0 seconds"),
    ],
)
def test_run_settings_that_cannot_load_are_refused(capsys, tmp_path, args, message):
    err = _refused(capsys, "run", "--host", "http://127.0.0.1:9", "--model", "mm", *args, "--out-dir", str(tmp_path / "o"))
    assert message in err and not (tmp_path / "o").exists()


@pytest.mark.parametrize(
    "args, message",
    [
        (["--workers", "-1"], "argument --workers: -1 not allowed: each choice must be at least 0"),
        (["--batch-sizes", "0,8"], "argument --batch-sizes: 0 not allowed: each choice must be at least 1"),
        (["--batch-times-ms", "0"], "argument --batch-times-ms: 0 not allowed: each choice must be above 0"),
        (["--intra", ","], "argument --intra: ',' holds no value; give at least one"),
        (["--merge-rows", ""], "argument --merge-rows: '' holds no value; give at least one"),
        (["--inter", "x"], "argument --inter: 'x' is not a comma-separated list of integers"),
    ],
)
def test_tune_choices_are_checked_one_by_one(capsys, tmp_path, args, message):
    assert message in _usage_error(capsys, "tune", "--variant", f"fp32={tmp_path}", *args, "--out-dir", str(tmp_path / "o"))


@pytest.mark.parametrize(
    "args, message",
    [
        (["--step-seconds", "0"], "invalid measurement settings: --step-seconds: Input should be greater than 0"),
        (["--step-seconds", "1"], "invalid measurement settings: --step-seconds: a step stage of 1 s is too short"),
        (["--max-users", "0"], "invalid measurement settings: --max-users: Input should be greater than or equal to 1"),
    ],
)
def test_tune_measurement_settings_are_one_line(capsys, tmp_path, args, message):
    (tmp_path / "model-settings.json").write_text('{"name": "mm"}')
    err = _refused(capsys, "tune", "--variant", f"fp32={tmp_path}", *args, "--out-dir", str(tmp_path / "o"))
    assert message in err and not (tmp_path / "o").exists()


def test_search_space_refuses_a_choice_no_config_can_take(tmp_path):
    from pydantic import ValidationError

    from loadtest.tuning.space import SearchSpace

    (tmp_path / "model-settings.json").write_text('{"name": "mm"}')
    with pytest.raises(ValidationError, match="parallel_workers: -1 is not allowed; every choice must be at least 0"):
        SearchSpace(variants={"fp32": tmp_path}, parallel_workers=[0, -1])
    with pytest.raises(ValidationError, match="max_batch_time_ms: nan is not allowed; every choice must be above 0"):
        SearchSpace(variants={"fp32": tmp_path}, max_batch_time_ms=[float("nan")])


@pytest.mark.slow
def test_a_run_whose_every_request_fails_exits_non_zero_saying_so(failing_server, reports_env, tmp_path):
    result = run_module(
        "loadtest",
        "run",
        "--host",
        failing_server,
        "--model",
        "mm",
        "--duration",
        "2",
        "--name",
        "all-failed",
        "--out-dir",
        str(tmp_path / "locust"),
        env=reports_env,
        check=False,
    )
    assert result.returncode == 2, result.stderr
    error = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(error) == 1 and "Traceback" not in result.stderr
    assert "the server answered none of the" in error[0] and "LocustBadStatusCode(code=501)" in error[0]
    assert f"check that rest {failing_server} model mm serves V2 inference" in error[0]
    assert str(tmp_path / "locust" / "locust.log") in error[0]


def test_no_answer_tells_a_silent_or_failing_server_from_a_measured_one(tmp_path):
    from loadtest.run import LoadResult, LoadRun, no_answer

    def finished(requests: int, failures: int) -> LoadRun:
        result = LoadResult(
            users=4, duration_s=2, requests=requests, failures=failures, rps=requests / 2, p50_ms=1, p95_ms=2, p99_ms=3, avg_ms=1
        )
        return LoadRun(
            aggregate=result,
            steps=[],
            stopped="",
            saturation=None,
            files={"locust_failures": str(tmp_path / "locust_failures.csv")},
        )

    (tmp_path / "locust_failures.csv").write_text(
        "Method,Name,Error,Occurrences,First Seen,Last Seen\n"
        "POST,infer,LocustBadStatusCode(code=404),3,a,b\nPOST,infer,LocustBadStatusCode(code=501),40,a,b\n"
    )
    assert no_answer(finished(43, 43)) == (
        "the server answered none of the 43 requests (most failed with POST infer: LocustBadStatusCode(code=501))"
    )
    assert "completed no request" in no_answer(finished(0, 0))
    assert no_answer(finished(43, 42)) is None
    (tmp_path / "locust_failures.csv").unlink()
    assert no_answer(finished(5, 5)) == "the server answered none of the 5 requests"
