"""Prove a served model answers like the exported one, over REST and gRPC, with tritonclient.

tritonclient is a V2 client we did not write: if it agrees with our server, other V2
clients will too. Never import MLServer in this process: its gRPC protos and
tritonclient's share names and cannot be loaded together.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from slipway.artifact import load_input_example
from slipway.cli import first_line

ATOL = 1e-5
TIMEOUT_S = 60  # per call: a wedged server fails the check instead of holding it


class SmokeError(AssertionError):
    """The server did not answer, or not what the exported model answers."""


@dataclass
class SmokeResult:
    protocol: str
    rows: int
    max_abs_diff: float
    predictions_match: bool
    latency_ms: float
    metadata: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        return self.__dict__.copy()


def _check(protocol: str, got: dict[str, np.ndarray], expected: dict[str, np.ndarray], seconds: float, rows: int) -> SmokeResult:
    diffs = []
    match = True
    for name, want in expected.items():
        if name not in got:
            raise SmokeError(f"{protocol}: the server returned {sorted(got)}, not output {name!r}")
        have = got[name]
        if have.shape != want.shape:
            raise SmokeError(f"{protocol}: output {name!r} has shape {have.shape}, expected {want.shape}")
        diffs.append(float(np.abs(have.astype(np.float64) - want).max()))
        if want.ndim == 2:
            match &= bool((have.argmax(axis=1) == want.argmax(axis=1)).all())
    max_diff = max(diffs)
    if max_diff > ATOL or not match:
        raise SmokeError(f"{protocol}: answers differ from the exported model's (max abs diff {max_diff:.2e})")
    return SmokeResult(protocol, rows, max_diff, match, round(seconds * 1000, 3))


@contextlib.contextmanager
def _answering(protocol: str, timeout_s: float):
    """tritonclient's errors (refused, timed out, an error status, a body it cannot read) as one SmokeError line."""
    from tritonclient.utils import InferenceServerException

    try:
        yield
    except (InferenceServerException, OSError, ValueError, KeyError, TypeError) as err:
        raise SmokeError(
            f"{protocol}: the server did not answer tritonclient's V2 request: {first_line(err)} (timeout {timeout_s:g} s)"
        ) from err


def check_http(url: str, model: str, model_dir: Path, timeout_s: float = TIMEOUT_S) -> SmokeResult:
    """Send the input example over V2 REST and compare outputs."""
    import tritonclient.http as httpclient

    inputs, expected, _ = load_input_example(model_dir)
    client = httpclient.InferenceServerClient(
        url.removeprefix("http://"), connection_timeout=timeout_s, network_timeout=timeout_s
    )
    with _answering("rest", timeout_s), contextlib.closing(client):
        metadata = client.get_model_metadata(model)
        described = {"inputs": metadata["inputs"], "outputs": metadata["outputs"]}
        request = []
        for name, array in inputs.items():
            tensor = httpclient.InferInput(name, list(array.shape), _datatype(metadata["inputs"], name))
            tensor.set_data_from_numpy(array, binary_data=False)
            request.append(tensor)
        started = time.perf_counter()
        response = client.infer(model, request)
        seconds = time.perf_counter() - started
        got = {output["name"]: response.as_numpy(output["name"]) for output in response.get_response()["outputs"]}
    result = _check("rest", got, expected, seconds, len(next(iter(inputs.values()))))
    result.metadata = described
    return result


def check_grpc(target: str, model: str, model_dir: Path, timeout_s: float = TIMEOUT_S) -> SmokeResult:
    """Send the input example over V2 gRPC (raw_input_contents) and compare outputs."""
    import tritonclient.grpc as grpcclient

    inputs, expected, _ = load_input_example(model_dir)
    client = grpcclient.InferenceServerClient(target)
    with _answering("grpc", timeout_s), contextlib.closing(client):
        metadata = client.get_model_metadata(model, as_json=True, client_timeout=timeout_s)
        request = []
        for name, array in inputs.items():
            tensor = grpcclient.InferInput(name, list(array.shape), _datatype(metadata["inputs"], name))
            tensor.set_data_from_numpy(array)
            request.append(tensor)
        started = time.perf_counter()
        response = client.infer(model, request, client_timeout=timeout_s)
        seconds = time.perf_counter() - started
        got = {output["name"]: response.as_numpy(output["name"]) for output in response.get_response(as_json=True)["outputs"]}
    return _check("grpc", got, expected, seconds, len(next(iter(inputs.values()))))


def _datatype(described: list[dict], name: str) -> str:
    for tensor in described:
        if tensor["name"] == name:
            return tensor["datatype"]
    raise SmokeError(f"the server's metadata lists inputs {[t['name'] for t in described]}, not {name!r}")
