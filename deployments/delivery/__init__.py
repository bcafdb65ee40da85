"""Delivery: a new version brought in beside the serving one and watched once it serves.

`canary` runs the shadow and the SLO-gated canary (step the traffic up, judge it against the stable predictor from
Prometheus, then promote or roll back), asking the model store for versions and tag moves through `model_store`;
`alerts` renders the SLO file's PrometheusRule. It sits above the other layers: it rolls versions out through
`deployments.rollout`, reads metrics through `deployments.sizing.prometheus` and pins renderings with
`deployments.render`; none of them imports it.
"""
