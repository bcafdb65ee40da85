"""SLO-gated canary: measure a canary predictor against its stable one from the pods' Prometheus series (queries),
and decide whether its weight may step up, must wait for more traffic, or has failed (judge)."""
