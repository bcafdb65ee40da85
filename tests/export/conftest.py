"""Fixtures for the export suites."""

import pytest


@pytest.fixture(scope="module")
def module_reports_env(reports_env, tmp_path_factory) -> dict:
    """A reports folder of the module's own: its `export.json` must not surprise other suites reading the session's."""
    return {**reports_env, "SLIPWAY_REPORTS_DIR": str(tmp_path_factory.mktemp("reports"))}
