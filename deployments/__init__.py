"""SeldonDeployment + autoscaling manifests for one model version, by lifecycle.

`render` builds and validates the manifests without a cluster; `rollout` puts them onto one (preflight, model bytes,
apply, wait) and builds the serving image; `sizing` sizes a served model from its Prometheus history; `delivery`
brings a new version in beside the serving one (shadow, SLO-gated canary, alerts). Each imports only those before it
(render <- rollout, sizing <- delivery; rollout and sizing never each other), `kserve` and `cluster` stand beside
them, and `__main__` (`python -m deployments`) is the command line over all of them, imported by none
(`pyproject.toml`'s import contracts).
"""
