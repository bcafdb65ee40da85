"""Locust user for V2 gRPC: send one prepared `ModelInferRequest` (raw contents), time it, report it.

Locust has no gRPC client, so the user times each call and fires Locust's request event
itself. Locust monkey-patches the standard library for gevent; gRPC has its own I/O and
must be told to cooperate (`init_gevent`) before any channel exists, or every call would
block all other users.
"""

import time

import grpc
from grpc.experimental import gevent as grpc_gevent
from locust import User, constant, task
from tritonclient.grpc import service_pb2, service_pb2_grpc

from loadtest.config import current_job
from loadtest.payloads import open_channel
from loadtest.shapes import PlannedShape  # noqa: F401  (Locust picks the shape up from this module)

grpc_gevent.init_gevent()

JOB = current_job()
REQUEST = service_pb2.ModelInferRequest.FromString(JOB.payload_bytes())
METADATA = JOB.endpoint.grpc_metadata


class V2GrpcUser(User):
    wait_time = constant(0)

    def on_start(self):
        self.channel = open_channel(JOB.endpoint)
        self.stub = service_pb2_grpc.GRPCInferenceServiceStub(self.channel)

    def on_stop(self):
        self.channel.close()

    @task
    def infer(self):
        started = time.perf_counter()
        error, size = None, 0
        try:
            reply = self.stub.ModelInfer(REQUEST, metadata=METADATA, timeout=JOB.request_timeout_s)
            size = reply.ByteSize()
            if not reply.outputs:  # every V2 answer describes its outputs: without, nothing was inferred
                error = RuntimeError("answered without V2 outputs")
        except grpc.RpcError as err:
            error = RuntimeError(f"{err.code().name}: {err.details()}")
        self.environment.events.request.fire(
            request_type="grpc",
            name="infer",
            response_time=(time.perf_counter() - started) * 1000,
            response_length=size,
            exception=error,
            context={},
        )
