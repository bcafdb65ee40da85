module slipway.local/cluster/crds

go 1.24

require (
	github.com/kedacore/keda/v2 v2.21.0
	github.com/prometheus-operator/prometheus-operator v0.85.0
)
