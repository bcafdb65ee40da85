"""Sizing: what a served model should ask for, from what it did.

`prometheus` reads the Prometheus HTTP API, `usage` turns its answers into checked per-pod usage history, and
`recommend` sizes requests, limits, replicas and pre-scaling from that history (`make recommend`). It reads
`deployments.render` (the metric names, the overlays it writes beside) and nothing of rollout or delivery; the
canary's judge reads its `prometheus` client.
"""
