"""Where a loaded model meets MLServer: its logs, its process, its fast paths and guards, its adaptive batching.

Everything here goes through MLServer's public names or `wrappers.mlserver_compat`, the only code that
touches MLServer's internals. A model loaded in a worker process (parallel_workers > 0) cannot reach the
server's REST app and gRPC server, so it is served by MLServer's own routes (shared memory, which needs the
server's regions, is refused there); a fast path whose target is missing fails the load, or with
`fast_path_fallback` is left off (`wrappers.transport.fast_paths`).
"""

from __future__ import annotations

import logging
import multiprocessing
from functools import partial

from mlserver import MLModel
from mlserver.errors import InferenceError
from mlserver.types import InferenceRequest, TensorData

from slipway.runtime_settings import RuntimeSettings
from wrappers import repository_api
from wrappers.mlserver_compat import model as mlserver_model
from wrappers.operations import refusal_logs
from wrappers.protocol.shared_tensors import SharedTensors
from wrappers.protocol.v2_codec import RequestDecoder
from wrappers.running import cpu_pinning
from wrappers.shm.regions import location
from wrappers.transport import body_layer as rest_bodies
from wrappers.transport import fast_paths, grpc_raw, rest_infer, rest_json, shm_endpoints

logger = logging.getLogger(__name__)


class ProcessError(ValueError):
    """The model cannot be served from the process MLServer loads it in; the message says what to set."""


def log_through_mlserver() -> None:
    """Send `wrappers.*` and `engine.*` logs (providers chosen, fallbacks, warm-up) to MLServer's handlers and format,
    and MLServer's logs of refused requests as one rate-limited line each (`wrappers.operations.refusal_logs`)."""
    refusal_logs.install()
    theirs = logging.getLogger(refusal_logs.MLSERVER_LOGGER)
    for ours in (logging.getLogger("wrappers"), logging.getLogger("engine")):
        for handler in theirs.handlers:
            if handler not in ours.handlers:
                ours.addHandler(handler)
        ours.setLevel(theirs.level or logging.INFO)


def check_process(name: str, shared_memory: bool) -> None:
    """Refuse what a worker process cannot serve (RepositoryApiError, ProcessError); warn what it serves without."""
    in_worker_process = multiprocessing.parent_process() is not None
    repository_api.check_guarded(in_worker_process)
    if shared_memory and in_worker_process:
        raise ProcessError(
            "shared_memory needs the model in the server's own process, where regions are "
            "registered; set MLServer's parallel_workers to 0 (MLSERVER_PARALLEL_WORKERS=0)"
        )
    if in_worker_process:
        logger.warning(
            "%s is loaded in an MLServer worker process (parallel_workers > 0): the raw gRPC path, the typed "
            "contents checks, the fast REST route and the request body limit work in the server's own process, "
            "so MLServer's own converters and routes serve this model; set parallel_workers to 0 "
            "(MLSERVER_PARALLEL_WORKERS=0) to have them",
            name,
        )


def extend_mlserver(model: MLModel, config: RuntimeSettings) -> bool:
    """This model's fast paths and guards in MLServer (`wrappers.mlserver_compat` checks each target first);
    True where the event loop is to be pinned at the first request (by then gRPC's poller runs).

    Shared memory needs the raw gRPC path and the REST parser, so never falls back."""
    fallback = config.fast_path_fallback and not config.shared_memory
    if not model.settings.cache_enabled:  # MLServer's response cache serialises requests to JSON: lists only
        fast_paths.turn_on(fast_paths.GRPC_RAW, partial(grpc_raw.fast_models().add, model), fallback=fallback)
        rest_infer.array_models().add(model)
    fast_paths.turn_on(fast_paths.REST_JSON, rest_json.install, fallback=fallback)
    rest_bodies.install()  # every route's body within a limit, inflated off the event loop
    if config.fast_rest_route:
        fast_paths.turn_on(fast_paths.REST_INFER, partial(rest_infer.fast_models().add, model), fallback=fallback)
    if config.shared_memory:
        shm_endpoints.enable(model)
        grpc_raw.shared_memory_models().add(model)
    return config.pin_event_loop and fast_paths.turn_on(
        fast_paths.PIN_EVENT_LOOP, cpu_pinning.check_poller_thread, fallback=fallback
    )


def withdraw(model: MLModel) -> None:
    """Take the model off every fast path and guard it was added to (unload)."""
    grpc_raw.fast_models().discard(model)
    grpc_raw.shared_memory_models().discard(model)
    rest_infer.fast_models().discard(model)
    rest_infer.array_models().discard(model)
    shm_endpoints.disable(model)
    cpu_pinning.pinned_models().discard(model)


def check_before_mlserver_batching(model: MLModel, decoder: RequestDecoder, shared: SharedTensors) -> None:
    """Check each request before MLServer merges it: a bad one must not fail its neighbours."""

    def check(payload: InferenceRequest) -> None:
        if shared.outputs(payload):
            raise InferenceError(
                f"model {model.name} is served with MLServer's adaptive batching, which cannot write outputs "
                "into shared memory; request the outputs in the response"
            )
        for request_input in decoder.checked_inputs(payload):
            array = decoder.decode(request_input)
            if location(request_input.parameters, request_input.name):
                request_input.parameters = None  # read already: MLServer merges the data, not the location
            request_input.data = TensorData.model_construct(root=array.reshape(-1))

    mlserver_model.check_before_batching(model, check)
