"""Slipway's launcher (`python -m wrappers.launch`) and the model repository rules it and `slipway serve` share.

What is refused before MLServer is imported is checked in this process (the launcher imports MLServer only once
the folder and the settings pass); what needs MLServer's own listing runs the launcher as its own process. The
servers it starts are exercised by every `LocalServer` test and by test_serve.py.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from types import SimpleNamespace

import pytest

from slipway.artifact import SETTINGS_FILE
from slipway.cli import run
from slipway.local_server import ServerError, model_names
from slipway.model_repository import RepositoryError, check_unique, settings_files
from slipway.paths import PROJECT_ROOT
from slipway.ports import LOOPBACK
from slipway.server_process import HOOK_ENV, failure_reason
from tests.graphs import scalar_graph
from tests.wrappers.folders import model_folder
from wrappers import launch


@pytest.fixture(scope="module")
def graph(tmp_path_factory):
    return scalar_graph(tmp_path_factory.mktemp("graph") / "scalar.onnx")


def _settings(folder, name, version=None):
    parameters = {"uri": "./model.onnx", **({"version": version} if version else {})}
    folder.mkdir(parents=True)
    (folder / SETTINGS_FILE).write_text(json.dumps({"name": name, "parameters": parameters}))


def test_a_folder_of_artifact_folders_at_any_depth_is_a_repository(tmp_path):
    _settings(tmp_path / "digits" / "1", "digits", "1")
    _settings(tmp_path / "digits" / "2", "digits", "2")  # two versions of one model: MLServer serves both
    _settings(tmp_path / "scalar", "scalar")
    _settings(tmp_path / ".hidden", "ignored")  # MLServer's glob skips hidden folders, and so must the count
    assert sorted(model_names(tmp_path)) == ["digits", "digits", "scalar"]
    assert len(settings_files(tmp_path)) == 3
    assert model_names(tmp_path / "scalar") == ["scalar"]


def test_two_models_of_one_name_and_version_are_one_line_naming_both_files(tmp_path):
    _settings(tmp_path / "a", "same")
    _settings(tmp_path / "b", "same")
    with pytest.raises(ServerError) as caught:
        model_names(tmp_path)
    message = str(caught.value)
    assert "\n" not in message and "model 'same' (no version) is declared twice" in message
    assert str(tmp_path / "a" / SETTINGS_FILE) in message and str(tmp_path / "b" / SETTINGS_FILE) in message
    with pytest.raises(RepositoryError, match="model 'm' version '2' is declared twice"):
        check_unique([("m", "2", "x.json"), ("m", "1", "y.json"), ("m", "2", "z.json")])


@pytest.mark.parametrize("make", [lambda path: path.mkdir(), lambda path: path.write_text("a file")])
def test_a_folder_that_is_neither_is_one_line_and_nothing_starts(tmp_path, capsys, make):
    folder = tmp_path / "empty"
    make(folder)
    code = run(launch.main, [str(folder), "--failure-file", str(tmp_path / "why.txt")])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert ("is neither an artifact folder nor a folder of them" in err) or ("is not a folder" in err), err
    assert (tmp_path / "why.txt").read_text() == err.strip().removeprefix("error: ") + "\n"
    assert "mlserver.server" not in sys.modules  # refused before MLServer was imported


def test_another_model_repository_class_is_refused_before_anything_starts(tmp_path, capsys, monkeypatch, graph):
    monkeypatch.setenv(HOOK_ENV, "mlserver.repository.repository.SchemalessModelRepository")
    code = run(launch.main, [str(model_folder(tmp_path, "scalar", graph))])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert (
        f"{HOOK_ENV}=mlserver.repository.repository.SchemalessModelRepository: Slipway serves models through "
        "wrappers.repository_api.GuardedRepository"
        in err
        and "unset the variable" in err
    ), err


def test_a_port_taken_or_given_twice_is_named_with_its_variable():
    with socket.socket() as taken:
        taken.bind((LOOPBACK, 0))
        taken.listen()
        port = taken.getsockname()[1]
        settings = SimpleNamespace(host=LOOPBACK, http_port=port, grpc_port=0, metrics_endpoint=None, metrics_port=0)
        with pytest.raises(launch.LaunchError) as caught:
            launch._check_ports(settings)
    assert str(caught.value) == (
        f"cannot serve HTTP on ('{LOOPBACK}', {port}): address already in use; free the port or set MLSERVER_HTTP_PORT to another"
    )
    twice = SimpleNamespace(host=LOOPBACK, http_port=1, grpc_port=2, metrics_endpoint="/metrics", metrics_port=1)
    with pytest.raises(launch.LaunchError, match="MLSERVER_HTTP_PORT is 1, as another of MLServer's ports"):
        launch._check_ports(twice)


def test_why_a_server_stopped_is_the_launchers_line_else_how_it_ended(tmp_path):
    written = tmp_path / "why.txt"
    written.write_text("model m failed to load: ValueError: bad\n")
    assert failure_reason(written, 2) == "model m failed to load: ValueError: bad"
    assert failure_reason(tmp_path / "none.txt", -9) == "it was killed by signal 9 without saying why"
    assert failure_reason(tmp_path / "none.txt", 1) == "it exited with status 1 without saying why"
    assert failure_reason(tmp_path / "none.txt", 0) == "it stopped by itself"


@pytest.mark.slow  # imports MLServer, which lists the models (no server is built)
def test_the_launcher_refuses_two_models_mlserver_would_name_alike(tmp_path, graph):
    """Names MLServer gives itself (a folder's name, where the settings give none) clash as well."""
    model_folder(tmp_path / "repo", "scalar", graph)
    unnamed = model_folder(tmp_path / "repo" / "more", "scalar", graph)
    (unnamed / SETTINGS_FILE).write_text(json.dumps({"implementation": "wrappers.runtime.OnnxRuntime"}))
    done = subprocess.run(
        [sys.executable, "-m", "wrappers.launch", str(tmp_path / "repo")],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    err = done.stderr.strip().splitlines()
    assert done.returncode == 2 and err and err[-1].startswith("error: model 'scalar' (no version) is declared twice"), (
        done.stderr[-2000:]
    )
    assert "HTTP server running" not in done.stdout  # refused before any server was built
