"""A real Prometheus serving recorded series of a stable and a canary predictor (series.py), for this folder's tests."""

from tests.deployments.canary.series import prometheus_tools, prometheus_url, recorded  # noqa: F401 (fixtures)
