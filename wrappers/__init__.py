"""Serving-time code: the MLServer runtime for ONNX models and what it needs at load.

Import only what you use: `wrappers.runtime` pulls in MLServer, whose gRPC protos
clash with `tritonclient.grpc` in one process, while `wrappers.artifact`,
`wrappers.session` and `wrappers.server` need neither MLServer nor TensorFlow.
"""
