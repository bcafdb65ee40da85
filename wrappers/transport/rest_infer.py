"""The fast REST infer route: V2 infer requests for this runtime's models, without FastAPI's per-request work.

Measured on digits (2 CPUs, REST, concurrency 8, four alternating rounds): MLServer's REST
server spent 0.45 ms of its one event-loop thread per request, and that thread capped
throughput with a third of the machine idle. About 0.12 ms of it was FastAPI's own work
around the endpoint: solving its dependencies, then dumping, re-validating and serializing
the response through pydantic. Answered by this route, the same server spent 0.33 ms and
served 36% more requests per second.

The route sits where MLServer's own infer routes are, inside every HTTP middleware MLServer
installs (its Prometheus HTTP metrics, gzip, CORS, tracing, error handlers), and calls
MLServer's data plane as MLServer's endpoint does: model metrics, CloudEvents headers, the
response cache and versions all stay as they were. Only two steps change: the body becomes an
`InferenceRequest` by one pydantic validation, and the response becomes JSON by one dump,
with MLServer's own JSON encoder. Anything the route does not take as it is (another
runtime's model; a JSON body that is not JSON or does not validate; another content type)
goes to MLServer's own route, with the body as read: malformed requests get exactly MLServer's
answers (HTTP 422 naming the field).

It also serves what MLServer cannot: Triton's binary tensor extension (`wrappers.protocol.binary_data`),
`tritonclient.http`'s default, where tensors travel as bytes after a JSON header. A request
that breaks that extension's rules gets HTTP 400 saying how.

Bodies arrive here within the server's limit and uncompressed: `wrappers.transport.body_layer` reads them
first, for every route. A JSON body over `INLINE_BODY_BYTES` is parsed, and an answer of over
`INLINE_ANSWER_VALUES` values written, on a worker thread, their long lists of numbers (and a body's of strings)
a piece at a time (`wrappers.transport.json_tensors`): a parser or encoder holds the GIL until it returns, wherever
it runs, but between pieces the event loop takes it back, so requests on other connections are answered while a
large body is parsed instead of after it. Smaller bodies and answers stay on the loop, without the hop. A list of
strings that does not fit its input is answered HTTP 400 here, saying what to send.
"""

from __future__ import annotations

import asyncio
import logging
import math

import numpy as np
from mlserver.errors import InferenceError
from mlserver.types import InferenceRequest, InferenceResponse, TensorData

from slipway.v2_wire import TensorError
from wrappers import process_state
from wrappers.mlserver_compat import rest_app as mlserver_rest
from wrappers.operations.loaded_models import LoadedModels
from wrappers.protocol import binary_data, json_parsing
from wrappers.transport import json_tensors
from wrappers.transport.body_layer import headers_of, limit, read_body, replaying
from wrappers.transport.json_tensors import INLINE_BODY_BYTES

logger = logging.getLogger(__name__)

OCTET_STREAM = "application/octet-stream"
JSON = "application/json"
INLINE_ANSWER_VALUES = 1 << 15  # an answer of up to this many values is written as JSON on the event loop
# Larger ones on the process state's json_threads, two at a time (as bodies inflate in `body_layer`); others wait.


def _install() -> None:
    """The route ahead of MLServer's infer routes, in each MLServer REST app in this process (once per app)."""
    mlserver_rest.check_responses()
    for app in mlserver_rest.mlserver_rest_apps():
        if mlserver_rest.insert_infer_routes(app, FastInferRoute):
            logger.info("REST infer requests for wrappers.runtime models are answered without FastAPI's per-request work")


def fast_models() -> LoadedModels:
    """The models whose REST infer requests this route answers; adding one installs the route (once per REST app)."""
    return process_state.current().switches.named("rest_infer.fast", install=_install)


def array_models() -> LoadedModels:
    """Those whose requests may carry arrays, as the raw gRPC path's do: not where MLServer's response cache is on
    (it writes each request as JSON, lists only). A large body's lists of floats come to them as arrays."""
    return process_state.current().switches.named("rest_infer.arrays")


class FastInferRoute:
    """The ASGI app behind one infer path; MLServer's route for that path answers what it does not take."""

    def __init__(self, mlserver_route, data_plane) -> None:
        self._mlserver_route = mlserver_route
        self._plane = data_plane  # the data plane MLServer's endpoint calls

    async def __call__(self, scope: dict, receive, send) -> None:
        name, version = scope["path_params"]["model_name"], scope["path_params"].get("model_version")
        headers = headers_of(scope)
        binary = binary_data.HEADER in headers
        if name not in fast_models() or not (binary or _is_json(headers)):
            await self._mlserver_route.handle(scope, receive, send)
            return
        body = await read_body(receive, headers, limit())  # what the layer hands on: one message, within the limit
        if binary or len(body) <= INLINE_BODY_BYTES:  # binary tensors are sliced, not parsed: cheap at any size
            payload = _payload(body, headers, binary)
        else:
            as_arrays = name in array_models()
            payload = await asyncio.get_running_loop().run_in_executor(
                process_state.current().json_threads, _large_payload, body, as_arrays
            )
        if payload is None:
            await self._mlserver_route.handle(scope, replaying(body, receive), send)
            return
        del body  # parsed: held to the answer's end, a body's bytes would add its size to the peak of encoding it
        binary_outputs = binary_data.binary_outputs(payload)
        mlserver_rest.insert_headers(payload, headers)
        result = await self._plane.infer(payload, name, version)
        response_headers = mlserver_rest.extract_headers(result) or {}
        if sum(math.prod(output.shape) for output in result.outputs) <= INLINE_ANSWER_VALUES:
            answer = _answer(result, binary_outputs, response_headers, None)
        else:
            long = None if binary_outputs else _long_arrays(result)
            loop = asyncio.get_running_loop()
            answer = await loop.run_in_executor(
                process_state.current().json_threads, _answer, result, binary_outputs, response_headers, long
            )
        await answer(scope, receive, send)


def _answer(
    result: InferenceResponse, binary_outputs: set[str] | bool, headers: dict[str, str], arrays: dict[str, np.ndarray] | None
):
    """The response, its body already encoded: binary parts after a JSON header, or JSON (`arrays`, taken out of the
    outputs by `_long_arrays`, a piece at a time: the same bytes as MLServer's encoder writes for them as lists)."""
    parts = binary_data.split_outputs(result, binary_outputs)  # the arrays left become lists
    content = result.model_dump(mode="json", by_alias=True, exclude_unset=True, exclude_none=True)
    if parts:
        header = mlserver_rest.encode_json(content)
        headers[binary_data.HEADER] = str(len(header))
        return mlserver_rest.BinaryResponse(b"".join([header, *parts]), headers=headers, media_type=OCTET_STREAM)
    if not arrays:
        return mlserver_rest.JsonResponse(content, headers=headers)
    body = json_tensors.encode_large(content, arrays, mlserver_rest.encode_json)
    return mlserver_rest.BinaryResponse(body, headers=headers, media_type=JSON)


def _long_arrays(result: InferenceResponse) -> dict[str, np.ndarray]:
    """The outputs' numeric arrays longer than a piece, each output's data a marker standing for its array."""
    arrays: dict[str, np.ndarray] = {}
    for output in result.outputs:
        data = output.data.root if output.data is not None else None
        if isinstance(data, np.ndarray) and data.dtype.kind in "biuf" and data.size > json_tensors.PIECE_VALUES:
            name = json_tensors.marker(len(arrays))
            arrays[name] = data
            output.data = TensorData.model_construct(root=name)
    return arrays


def _large_payload(body: bytes, arrays: bool) -> InferenceRequest | None:
    """`_payload` for a large JSON body, on a worker thread: its long lists of floats parsed a piece at a time into
    arrays where the model takes `arrays`; None for what MLServer's route should answer."""
    if not arrays:
        return _payload(body, {}, False)
    try:
        document, parsed = json_tensors.parse_large(body, json_parsing.parse)
        request = InferenceRequest.model_validate(document)
    except TensorError as err:  # a list of strings that does not fit its input: what to send instead
        raise InferenceError(str(err)) from None  # HTTP 400, by MLServer's error handler
    except ValueError:  # not JSON, or not a V2 request (pydantic's ValidationError is a ValueError)
        return None
    for index, array in parsed.items():  # put in after validating: validated as a list, an array would be walked
        # strings as the list whole parsing gave (the same str objects): an array would mark the raw gRPC path, whose
        # BYTES answers are bytes, held beside the str a JSON answer is written from
        data = array.tolist() if array.dtype == object else array
        request.inputs[index].data = TensorData.model_construct(root=data)
    return request


def _payload(body: bytes, headers: dict[str, str], binary: bool) -> InferenceRequest | None:
    """The request the body holds; None for a JSON body MLServer's route should answer (not JSON, not V2)."""
    if binary:
        try:
            return binary_data.request_from_body(body, headers[binary_data.HEADER])
        except binary_data.BinaryDataError as err:
            raise InferenceError(str(err)) from None  # HTTP 400, by MLServer's error handler
    try:
        return InferenceRequest.model_validate(json_parsing.parse(body))
    except ValueError:  # not JSON, or not a V2 request (pydantic's ValidationError is a ValueError)
        return None


def _is_json(headers: dict[str, str]) -> bool:
    """A body FastAPI would read as JSON: no content type, or application/json or application/*+json."""
    content_type = headers.get("content-type")
    if content_type is None:
        return True
    kind = content_type.split(";", 1)[0].strip().lower()
    return kind.startswith("application/") and (kind == "application/json" or kind.endswith("+json"))
