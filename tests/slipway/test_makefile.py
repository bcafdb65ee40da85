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
    return " ".join(line for line in done.stdout.splitlines() if "/nonexistent-venv/bin/slipway" in line)


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
