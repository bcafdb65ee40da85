"""The Makefile's recipes leave each default to the command they run: an unset setting passes no option, so
`slipway COMMAND --help` is the one place a default is written; a setting given is passed as it is."""

from __future__ import annotations

import subprocess

from slipway.paths import PROJECT_ROOT


def _dry_run(target: str, *settings: str) -> str:
    """The commands `make TARGET` would run, with a venv path that makes nothing (setup's own lines aside)."""
    done = subprocess.run(
        ["make", "--no-print-directory", "-n", target, "VENV=/nonexistent-venv", *settings],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    lines = done.stdout.replace("\\\n", " ").splitlines()  # a command continued over lines is one command
    return " ".join(" ".join(line.split()) for line in lines if "/nonexistent-venv/bin/slipway" in line)


def test_unset_settings_leave_the_commands_their_own_defaults():
    serve = _dry_run("serve")
    assert "slipway serve" in serve
    for option in ("--model-dir", "--host", "--http-port", "--grpc-port", "--metrics-port"):
        assert option not in serve, serve
    versions = _dry_run("versions")
    assert "versions list" in versions and "--store" not in versions, versions
    manifests = _dry_run("manifests")
    for option in ("--engine", "--overlay", "--autoscaling", "--namespace", "--model-dir"):
        assert option not in manifests, manifests


def test_settings_given_reach_the_commands():
    serve = _dry_run("serve", "MODEL_DIR=build/artifacts/mine", "HTTP_PORT=9000", "HOST=0.0.0.0")
    assert "--model-dir build/artifacts/mine" in serve and "--http-port 9000" in serve and "--host 0.0.0.0" in serve
    manifests = _dry_run("manifests", "OVERLAY=gpu", "NAMESPACE=prod")
    assert "--overlay gpu" in manifests and "--namespace prod" in manifests, manifests


def test_the_models_name_follows_the_artifact_or_the_name_given():
    """No recipe names the demo's model: publish keeps the artifact's own name, the store finds a reference without
    one, the cluster commands take their own default; NAME= (as `make convert` took it) or MODEL_NAME= reaches all."""
    recipes = {
        "publish": ["MODEL_DIR=build/artifacts/mine"],
        "promote": ["TAG=champion", "VERSION=2"],
        "rollback": ["TAG=champion"],
        "manifests": ["VERSION=3", "CANARY_TAG=challenger"],
        "canary": ["VERSION=3", "SLO=slo.yaml"],
        "undeploy": [],
        "canary-abort": [],
        "shadow-off": [],
        "alerts": ["SLO=slo.yaml"],
        "recommend": [],
    }
    for target, settings in recipes.items():
        commands = _dry_run(target, *settings)
        assert "digits" not in commands and "--model " not in commands and "--name " not in commands, commands
    assert "versions show :3" in _dry_run("manifests", "VERSION=3")
    assert "versions promote champion :2" in _dry_run("promote", "TAG=champion", "VERSION=2")
    for name in ("NAME=mine", "MODEL_NAME=mine"):
        publish = "versions publish build/artifacts/mine --model mine" if name == "NAME=mine" else "versions publish --model mine"
        assert publish in _dry_run("publish", name)
        assert "versions promote champion mine:2" in _dry_run("promote", "TAG=champion", "VERSION=2", name)
        assert "versions rollback champion --model mine" in _dry_run("rollback", "TAG=champion", name)
        assert "versions show mine@champion" in _dry_run("manifests", "TAG=champion", name)
        assert "--ref mine:3" in _dry_run("canary", "VERSION=3", name)
        assert "undeploy --name mine" in _dry_run("undeploy", name)
        assert "canary --abort --deployment mine" in _dry_run("canary-abort", name)
        assert "shadow --remove --deployment mine" in _dry_run("shadow-off", name)
        assert "alerts --slo slo.yaml --model mine" in _dry_run("alerts", "SLO=slo.yaml", name)
        assert "recommend --model mine" in _dry_run("recommend", name)


def test_name_picks_the_artifact_make_convert_wrote_under_it():
    """`make convert KERAS_MODEL=path/mine.keras` writes build/artifacts/mine; NAME=mine then stands for that folder
    wherever a target takes MODEL_DIR. MODEL_DIR= still names any folder, VERSION=/TAG= a published version, and
    MODEL_NAME= (a new name in the store or on the cluster) no folder."""
    from slipway.paths import artifact_dir

    assert artifact_dir("mine").parts[-3:] == ("build", "artifacts", "mine")  # where convert writes without --out
    converted = _dry_run("convert", "KERAS_MODEL=path/mine.keras")
    assert "export convert path/mine.keras" in converted and "--out" not in converted, converted
    for target in ("deploy", "manifests", "upload", "serve", "smoke", "loadtest"):
        assert "--model-dir build/artifacts/mine" in _dry_run(target, "NAME=mine"), target
    assert "--model-dir elsewhere/mine" in _dry_run("deploy", "NAME=mine", "MODEL_DIR=elsewhere/mine")
    pinned = _dry_run("deploy", "NAME=mine", "VERSION=3")
    assert "versions show mine:3" in pinned and "--version-record" in pinned and "--model-dir" not in pinned, pinned
    assert "--model-dir" not in _dry_run("deploy", "MODEL_NAME=mine")
    assert "--model-dir" not in _dry_run("deploy")  # the command's own default: the demo's artifact
