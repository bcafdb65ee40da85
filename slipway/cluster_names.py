"""The names a deployed model's objects go by on a cluster, shared by the packages that write and read them.

`deployments` renders and applies into DEFAULT_NAMESPACE unless told otherwise (`--namespace`, make's NAMESPACE=), the
local cluster (`localcluster`) makes that namespace at start, and the sizing and delivery commands look there; render
sets the model pod's NAMESPACE_ENV, which the runtime's payload events (`wrappers`) read. Likewise STORAGE_BUCKET:
`deploy` uploads a version without a URI of its own under s3://STORAGE_BUCKET, and the local cluster makes that bucket
in its object store at start. Named once, here.
"""

from __future__ import annotations

DEFAULT_NAMESPACE = "slipway"
NAMESPACE_ENV = "SLIPWAY_NAMESPACE"  # the namespace a model pod runs in, as render pins it into the pod's environment
STORAGE_BUCKET = "slipway-models"  # deploy's default storage root is s3://STORAGE_BUCKET; the local cluster makes it
