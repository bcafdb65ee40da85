"""Rendering: the manifests for one model version, built and checked without a cluster.

`overlay` kustomizes an overlay (`kustomize`) and pins it to the version (`records`): sizing and placement
(`autoscaling`, `gpu`, `frontends`, `quantities`, `split`), the Grafana dashboard (`dashboard`), the repository
API's setting (`repository_api`), all as Seldon Core reads them (`seldon`); `validate` checks the result offline.
The lowest layer of `deployments`: it imports none of rollout, delivery or sizing, which all read it.
"""
