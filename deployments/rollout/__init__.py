"""Rollout: a rendered model version onto a cluster, and the pieces it needs there.

`sequence` is the order (`roll_out`): the preflight checks (`preflight`, the images through `image_check`), the
model's bytes where the pods pull them (`placement`, `upload`, with the Secret of `storage_secret`), the server-side
apply and the wait (`apply`, through the client of `kube_api`). `image_build` makes the serving image the pods run;
`deployed` finds the model Slipway deployed in a namespace, for the commands that act on it unnamed. It reads
`deployments.render` and nothing of delivery or sizing; delivery (the canary) rolls out through it, and sizing's
`recommend` is handed `deployed` by deployments.cli.
"""
