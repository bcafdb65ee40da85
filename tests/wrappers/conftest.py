import pytest

from tests.wrappers.v2 import GrpcClient


@pytest.fixture(scope="module")
def client(server):
    """A gRPC client of the test module's `server`, closed with the module."""
    grpc_client = GrpcClient(server.grpc_target)
    yield grpc_client
    grpc_client.close()
