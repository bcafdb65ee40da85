"""A local Kubernetes control plane for Slipway's deployment path, made of real components.

etcd, kube-apiserver, kube-controller-manager and kube-scheduler, kwok for nodes and pods,
metrics-server, and the Seldon Core 1.17.1 operator with its admission webhooks: built from
their Go modules (`build`), started on loopback as processes (`control_plane`), and stopped by
their PIDs. No container runs: kwok marks the pods Running and Ready that the real scheduler
placed on its fake nodes, so Deployments, ReplicaSets, HPAs and budgets behave as on a cluster.
"""
