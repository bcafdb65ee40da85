"""Serving-time code: the MLServer runtime for ONNX models and what it needs at load.

Import only what you use: `wrappers.runtime` pulls in MLServer, whose gRPC protos
clash with `tritonclient.grpc` in one process. The ONNX Runtime session it serves
with is `engine`'s, shared with `export` and `benchmarks`. The artifact format the runtime reads is
`slipway.artifact`, and a server is started from outside by `slipway.local_server`
(the shared core: `export`, `loadtest` and `benchmarks` use it). Nothing here
imports `export` or `benchmarks` (tests/wrappers/test_boundaries.py).
"""
