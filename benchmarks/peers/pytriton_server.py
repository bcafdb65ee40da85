"""PyTriton 0.7 serving one ONNX file through onnxruntime, as a user would write it: `Triton().bind` with an
`@batch` function, inputs and outputs read from the ONNX graph, PyTriton's model defaults (batching on,
its dynamic batcher with a queue delay of 0), and Triton's V2 HTTP and gRPC on loopback ports.

Runs in PyTriton's own virtualenv (build/peers/pytriton/venv; `benchmarks.peers.envs`), as a script: it
imports nothing from this checkout. PyTriton starts the bundled tritonserver as a child process, which
starts a Python backend stub in turn: the bench counts the CPU of the whole process tree.
"""

from __future__ import annotations

import argparse
import os
import sysconfig

LOOPBACK = "127.0.0.1"
# ONNX Runtime's type names -> numpy's, for the tensors these models have.
NUMPY_TYPES = {
    "tensor(float)": "float32",
    "tensor(float16)": "float16",
    "tensor(double)": "float64",
    "tensor(int64)": "int64",
    "tensor(int32)": "int32",
    "tensor(int8)": "int8",
    "tensor(uint8)": "uint8",
    "tensor(bool)": "bool",
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--onnx-file", required=True)
    parser.add_argument("--served-name", required=True)
    parser.add_argument("--http-port", type=int, required=True)
    parser.add_argument("--grpc-port", type=int, required=True)
    parser.add_argument("--metrics-port", type=int, required=True)
    parser.add_argument("--workspace", required=True, help="PyTriton's working folder (the caller removes it)")
    args = parser.parse_args()
    _use_this_libpython()

    import numpy as np
    import onnxruntime as ort
    from pytriton.decorators import batch
    from pytriton.model_config import DynamicBatcher, ModelConfig, Tensor
    from pytriton.triton import Triton, TritonConfig

    session = ort.InferenceSession(args.onnx_file, providers=["CPUExecutionProvider"])
    outputs = [output.name for output in session.get_outputs()]

    def tensors(graph_tensors) -> list[Tensor]:  # the batch axis is Triton's: each tensor's shape without it
        return [
            Tensor(
                name=tensor.name,
                dtype=np.dtype(NUMPY_TYPES[tensor.type]),
                shape=tuple(size if isinstance(size, int) else -1 for size in tensor.shape[1:]),
            )
            for tensor in graph_tensors
        ]

    @batch
    def infer(**inputs: np.ndarray) -> dict[str, np.ndarray]:
        return dict(zip(outputs, session.run(outputs, inputs)))

    config = TritonConfig(
        http_address=LOOPBACK,
        http_port=args.http_port,
        grpc_address=LOOPBACK,
        grpc_port=args.grpc_port,
        metrics_address=LOOPBACK,
        metrics_port=args.metrics_port,
    )
    with Triton(config=config, workspace=args.workspace) as triton:
        triton.bind(
            model_name=args.served_name,
            infer_func=infer,
            inputs=tensors(session.get_inputs()),
            outputs=tensors(session.get_outputs()),
            config=ModelConfig(batching=True, batcher=DynamicBatcher(max_queue_delay_microseconds=0)),
        )
        triton.serve()


def _use_this_libpython() -> None:
    """Triton's Python backend stub links libpython3.X by name: the system's where it has one (Debian's 3.11.2),
    which then runs this interpreter's standard library (3.11.7, say) and fails on what changed between them.
    The stub inherits our environment through tritonserver, so this interpreter's own libpython goes first."""
    libdir = sysconfig.get_config_var("LIBDIR")
    if sysconfig.get_config_var("Py_ENABLE_SHARED") and libdir:
        os.environ["LD_LIBRARY_PATH"] = os.pathsep.join(filter(None, [libdir, os.environ.get("LD_LIBRARY_PATH")]))


if __name__ == "__main__":
    main()
