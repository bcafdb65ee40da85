"""V2 request payloads for load: real rows from a sample file, or tensors shaped from the model's metadata.

The model's own metadata (`/v2/models/{name}`) is always read first: it proves the endpoint
and model exist before any load is sent, and a sample file is checked against it, so a
wrong name or datatype is one clear error instead of a run of 400s.
"""

from __future__ import annotations

import math
import ssl
import threading
import urllib.error
import urllib.request
import zipfile
from pathlib import Path

import numpy as np
from pydantic import BaseModel, ValidationError

from loadtest.config import Endpoint, RestBody
from slipway.artifact import load_input_example
from slipway.cli import first_line, one_line
from slipway.files import FileProblem, read_json
from slipway.v2_requests import binary_rest_body, grpc_request, rest_body
from slipway.v2_wire import BINARY_HEADER, NUMPY_TO_V2, TensorError, v2_datatype

NUMERIC_DTYPES = {name: dtype for dtype, name in NUMPY_TO_V2.items()}  # V2 datatype -> dtype, BYTES aside
METADATA_TIMEOUT_S = 10
METADATA_MAX_BYTES = 4 << 20
MAX_VALUES = 1 << 27  # per input and request: 512 MiB of FP32 is past any load worth sending, short of a MemoryError


class PayloadError(ValueError):
    """No valid request can be built; the message says what the model expects."""


class TensorMetadata(BaseModel):
    name: str
    datatype: str
    shape: list[int]


class ModelMetadata(BaseModel):
    """What a payload is built from in a V2 metadata answer: checked, since any server can answer any JSON."""

    name: str = ""
    inputs: list[TensorMetadata] = []
    outputs: list[TensorMetadata] = []


def example_batch(model_dir: Path, batch_size: int = 1, offset: int = 0) -> dict[str, np.ndarray]:
    """`batch_size` rows of an artifact's input example, wrapping around when it has fewer."""
    inputs, _, _ = load_input_example(model_dir)
    return take_rows(inputs, batch_size, offset)


def take_rows(inputs: dict[str, np.ndarray], batch_size: int, offset: int = 0) -> dict[str, np.ndarray]:
    batch = {}
    for name, array in inputs.items():
        if array.ndim == 0 or len(array) == 0:
            raise PayloadError(f"sample input {name!r} has no rows to send")
        _check_values(name, (batch_size, *array.shape[1:]))
        rows = np.arange(offset, offset + batch_size) % len(array)
        batch[name] = np.ascontiguousarray(array[rows])
    return batch


def arrays_from_file(path: Path, batch_size: int) -> dict[str, np.ndarray]:
    """Rows from a sample file: an `.npz` (keys `input:<name>` as in artifacts, or plain input names)
    or a `.json` V2 request body (sent as it is, whatever the batch size)."""
    path = Path(path)
    if not path.is_file():
        missing = "is a folder" if path.is_dir() else "does not exist"
        raise PayloadError(f"sample data file {path} {missing}; send an .npz of input arrays or a V2 .json body")
    if path.suffix == ".npz":
        try:
            archive = np.load(path, allow_pickle=False)  # never unpickle a file someone handed us
        except (OSError, EOFError, ValueError, zipfile.BadZipFile) as err:
            # numpy's ValueError here means "neither zip nor .npy" and suggests unpickling it: not advice to pass on
            reason = "not a zip of arrays" if isinstance(err, ValueError) else first_line(err)
            raise PayloadError(
                f"{path} is not a readable .npz archive ({reason}); write one with numpy.savez(path, name=array)"
            ) from err
        if not isinstance(archive, np.lib.npyio.NpzFile):
            raise PayloadError(
                f"{path} is a single .npy array, not an .npz archive; write one with numpy.savez(path, name=array)"
            )
        with archive:
            keys = archive.files
            prefixed = [key for key in keys if key.startswith("input:")]
            chosen = prefixed or [key for key in keys if ":" not in key and key != "labels"]
            arrays = {}
            for key in chosen:
                try:
                    arrays[key.split(":", 1)[-1]] = archive[key]
                except (OSError, EOFError, ValueError, zipfile.BadZipFile) as err:  # object arrays need pickle: refused
                    raise PayloadError(
                        f"{path}: array {key!r} cannot be read ({first_line(err)}); save plain numeric arrays with numpy.savez"
                    ) from err
        if not arrays:
            raise PayloadError(f"{path} holds no input arrays (keys {keys}); name them after the model's inputs")
        return take_rows(arrays, batch_size)
    if path.suffix == ".json":
        try:
            body = read_json(path)
        except FileProblem as err:
            raise PayloadError(f'{err}; send a V2 request body ({{"inputs": [{{name, datatype, shape, data}}]}})') from err
        try:
            return {item["name"]: _array_from_json(item) for item in body["inputs"]}
        except (KeyError, TypeError, ValueError) as err:
            raise PayloadError(
                f'{path} is not a V2 request body ({{"inputs": [{{name, datatype, shape, data}}]}}): {err}'
            ) from err
    raise PayloadError(f"sample data file {path} must be .npz or .json, not {path.suffix or 'no suffix'!r}")


def _check_values(name: str, shape) -> None:
    count = math.prod(shape)
    if count > MAX_VALUES:
        raise PayloadError(
            f"input {name!r} would hold {count:,} values per request (shape {list(shape)}), over the "
            f"{MAX_VALUES:,} a load request may carry; lower --batch-size"
        )


def _array_from_json(item: dict) -> np.ndarray:
    datatype = item["datatype"]
    if datatype == "BYTES":
        return np.array(item["data"], dtype=object).reshape(item["shape"])
    if datatype not in NUMERIC_DTYPES:
        raise ValueError(f"unknown datatype {datatype!r}")
    return np.asarray(item["data"], dtype=NUMERIC_DTYPES[datatype]).reshape(item["shape"])


def arrays_from_metadata(inputs: list[dict], batch_size: int, seed: int = 0) -> dict[str, np.ndarray]:
    """Tensors shaped and typed as the model's metadata says: a dynamic first dimension is the
    batch; values are random but plausible (floats in [0, 1), small integers)."""
    rng = np.random.default_rng(seed)
    arrays = {}
    for tensor in inputs:
        name, datatype, shape = tensor["name"], tensor["datatype"], list(tensor["shape"])
        if datatype not in NUMERIC_DTYPES:
            raise PayloadError(f"input {name!r} has datatype {datatype}: random data would be meaningless; pass --data FILE")
        if shape and shape[0] == -1:
            shape[0] = batch_size
        if any(dim < 0 for dim in shape):
            raise PayloadError(
                f"input {name!r} has shape {tensor['shape']} with dynamic dimensions beyond the batch; "
                "pass --data FILE with real rows"
            )
        _check_values(name, shape)
        dtype = NUMERIC_DTYPES[datatype]
        array: np.ndarray
        if dtype.kind == "f":
            array = rng.random(shape).astype(dtype)
        elif dtype.kind == "b":
            array = rng.random(shape) < 0.5
        else:
            array = rng.integers(0, 10, size=shape).astype(dtype)
        arrays[name] = np.ascontiguousarray(array)
    if not arrays:
        raise PayloadError("the model's metadata lists no inputs; pass --data FILE")
    return arrays


def check_against_metadata(arrays: dict[str, np.ndarray], inputs: list[dict]) -> None:
    """Refuse a payload whose names or datatypes the model would refuse, before any load is sent."""
    expected = {tensor["name"]: tensor for tensor in inputs}
    if set(arrays) != set(expected):
        raise PayloadError(f"the sample data has inputs {sorted(arrays)}, the model takes {sorted(expected)}")
    for name, array in arrays.items():
        want = expected[name]["datatype"]
        if v2_datatype(array) != want:
            raise PayloadError(f"sample input {name!r} is {v2_datatype(array)}, the model wants {want}")


def fetch_metadata(endpoint: Endpoint, timeout_s: float = METADATA_TIMEOUT_S) -> dict:
    """The model's V2 metadata (`name`, `inputs`, `outputs`) over the endpoint's own protocol."""
    return _grpc_metadata(endpoint, timeout_s) if endpoint.protocol == "grpc" else _rest_metadata(endpoint, timeout_s)


def _rest_metadata(endpoint: Endpoint, timeout_s: float) -> dict:
    url = endpoint.base_url + endpoint.model_path
    context = ssl.create_default_context() if endpoint.tls else None
    try:
        body = _get_within(url, timeout_s, context)
    except urllib.error.HTTPError as err:
        raise PayloadError(
            f"GET {url} answered HTTP {err.code}: is model {endpoint.model!r}"
            f"{' version ' + endpoint.version if endpoint.version else ''} served there?"
        ) from err
    except (urllib.error.URLError, OSError) as err:
        raise PayloadError(f"cannot reach {url}: {getattr(err, 'reason', err)}") from err
    try:
        return ModelMetadata.model_validate_json(body).model_dump()
    except ValidationError as err:
        raise PayloadError(
            f"GET {url} did not answer V2 metadata ({{name, inputs: [{{name, datatype, shape}}]}}): {one_line(err)}"
        ) from err


def _get_within(url: str, timeout_s: float, context) -> bytes:
    """The body of GET `url`, in `timeout_s` in all and at most METADATA_MAX_BYTES.

    urllib's timeout bounds each socket read, so a server trickling bytes would hold the GET for ever:
    it runs in a daemon thread, left to the server if it overstays.
    """
    outcome: list = []

    def get() -> None:
        try:
            with urllib.request.urlopen(url, timeout=timeout_s, context=context) as response:
                outcome.append(response.read(METADATA_MAX_BYTES + 1))
        except Exception as err:  # raised again by the caller
            outcome.append(err)

    thread = threading.Thread(target=get, name="metadata-get", daemon=True)
    thread.start()
    thread.join(timeout_s)
    if not outcome:
        raise PayloadError(f"GET {url} did not answer within {timeout_s:g} s")
    if isinstance(outcome[0], Exception):
        raise outcome[0]
    if len(outcome[0]) > METADATA_MAX_BYTES:
        raise PayloadError(f"GET {url} answered over {METADATA_MAX_BYTES >> 20} MiB: not V2 metadata")
    return outcome[0]


def _grpc_metadata(endpoint: Endpoint, timeout_s: float) -> dict:
    import grpc
    from tritonclient.grpc import service_pb2, service_pb2_grpc

    channel = open_channel(endpoint)
    try:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        request = service_pb2.ModelMetadataRequest(name=endpoint.model, version=endpoint.version or "")
        reply = stub.ModelMetadata(request, metadata=endpoint.grpc_metadata, timeout=timeout_s)
    except grpc.RpcError as err:
        raise PayloadError(
            f"gRPC ModelMetadata for {endpoint.model!r} at {endpoint.base_url} failed: {err.code().name}: {err.details()}"
        ) from err
    finally:
        channel.close()
    tensors = lambda items: [{"name": t.name, "datatype": t.datatype, "shape": list(t.shape)} for t in items]  # noqa: E731
    return {"name": reply.name, "inputs": tensors(reply.inputs), "outputs": tensors(reply.outputs)}


def open_channel(endpoint: Endpoint):
    """A gRPC channel to the endpoint (TLS for grpcs:// and https:// hosts)."""
    import grpc

    if endpoint.tls:
        return grpc.secure_channel(endpoint.base_url, grpc.ssl_channel_credentials())
    return grpc.insecure_channel(endpoint.base_url)


def build_payload(
    endpoint: Endpoint, *, batch_size: int, data: Path | None, model_dir: Path | None, body_format: RestBody = "json"
) -> tuple[bytes, dict]:
    """The request to send again and again, and where its rows came from. Over REST the body is V2 JSON, or
    Triton's binary tensors (`body_format="binary"`, what `tritonclient.http` sends); the returned description's
    `headers` say which, and go with every request."""
    metadata = fetch_metadata(endpoint)
    if data is not None:
        arrays, source = arrays_from_file(data, batch_size), str(data)
    elif model_dir is not None:
        arrays, source = example_batch(model_dir, batch_size), f"{model_dir}/input-example.npz"
    else:
        arrays, source = arrays_from_metadata(metadata.get("inputs", []), batch_size), "random, from the model's metadata"
    try:
        check_against_metadata(arrays, metadata.get("inputs", []))
        body, headers = _encode(endpoint, arrays, body_format)
    except TensorError as err:  # an array no V2 datatype carries
        raise PayloadError(f"sample data from {source}: {err}") from err
    rows = len(next(iter(arrays.values())))
    return body, {
        "source": source,
        "rows_per_request": rows,
        "bytes": len(body),
        "headers": headers,
        "inputs": [{"name": n, "datatype": v2_datatype(a), "shape": list(a.shape)} for n, a in arrays.items()],
    }


def _encode(endpoint: Endpoint, arrays: dict[str, np.ndarray], body_format: RestBody) -> tuple[bytes, dict[str, str]]:
    if endpoint.protocol == "grpc":
        if body_format != "json":
            raise PayloadError(f"a {body_format} body is for REST; gRPC already carries tensors as raw bytes")
        return grpc_request(endpoint.model, arrays, endpoint.version or ""), {}
    if body_format == "binary":
        body, header_length = binary_rest_body(arrays)
        return body, {"Content-Type": "application/octet-stream", BINARY_HEADER: str(header_length)}
    return rest_body(arrays), {"Content-Type": "application/json"}
