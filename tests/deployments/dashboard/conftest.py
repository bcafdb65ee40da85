"""promtool, built from Prometheus' Go module (as for the canary judge's tests), for this folder's tests."""

from tests.deployments.canary.series import prometheus_tools  # noqa: F401 (fixture)
