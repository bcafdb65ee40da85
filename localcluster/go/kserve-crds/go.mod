module slipway.local/cluster/kserve-crds

go 1.24

require github.com/kserve/kserve v0.15.2
