"""KServe 0.21 serving one ONNX file through onnxruntime, as a user would write it: a `kserve.Model`
subclass run by KServe's `ModelServer` at its defaults (V2 REST and V2 gRPC, one worker).

Runs in KServe's own virtualenv (build/peers/kserve/venv; `benchmarks.peers.envs`), as a script:
it imports nothing from this checkout. KServe binds 0.0.0.0 and [::] with no option to change it;
the bench serves on loopback only, so the two listen calls are pointed at 127.0.0.1 before it starts.
"""

from __future__ import annotations

import argparse
import sys

LOOPBACK = "127.0.0.1"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--onnx-file", required=True)
    parser.add_argument("--served-name", required=True)
    parser.add_argument("--http-port", type=int, required=True)
    parser.add_argument("--grpc-port", type=int, required=True)
    args = parser.parse_args()
    # KServe parses sys.argv when it is imported: it sees its own two options and nothing of ours.
    sys.argv = [sys.argv[0], "--http_port", str(args.http_port), "--grpc_port", str(args.grpc_port)]

    import numpy as np
    import onnxruntime as ort
    import uvicorn
    from kserve import InferOutput, InferRequest, InferResponse, Model, ModelServer
    from kserve.utils.numpy_codec import from_np_dtype

    _bind_loopback(uvicorn)

    class OnnxModel(Model):
        """The ONNX graph's inputs by name from the request, every output in the answer."""

        def __init__(self, name: str, path: str):
            super().__init__(name)
            self.session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
            self.outputs = [output.name for output in self.session.get_outputs()]
            self.ready = True

        def predict(self, payload: InferRequest, headers=None, response_headers=None) -> InferResponse:
            feeds = {tensor.name: tensor.as_numpy() for tensor in payload.inputs}
            answers = []
            for name, result in zip(self.outputs, self.session.run(self.outputs, feeds)):
                result = np.ascontiguousarray(result)
                output = InferOutput(name=name, shape=list(result.shape), datatype=from_np_dtype(result.dtype))
                output.set_data_from_numpy(result, binary_data=payload.use_binary_outputs)
                answers.append(output)
            return InferResponse(
                response_id=payload.id or "",
                model_name=self.name,
                infer_outputs=answers,
                use_binary_outputs=payload.use_binary_outputs,
            )

    ModelServer().start([OnnxModel(args.served_name, args.onnx_file)])


def _bind_loopback(uvicorn) -> None:
    """Make KServe's REST server (uvicorn, host "0.0.0.0") and gRPC server ("[::]:PORT") listen on loopback."""
    config_init = uvicorn.Config.__init__

    def loopback_config(self, *args, **kwargs):
        kwargs["host"] = LOOPBACK
        config_init(self, *args, **kwargs)

    uvicorn.Config.__init__ = loopback_config
    from grpc.aio._server import Server as server_class  # what grpc.aio.server() returns

    add_port = server_class.add_insecure_port

    def loopback_port(self, address: str) -> int:
        return add_port(self, f"{LOOPBACK}:{address.rsplit(':', 1)[1]}")

    server_class.add_insecure_port = loopback_port


if __name__ == "__main__":
    main()
