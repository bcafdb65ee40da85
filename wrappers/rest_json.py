"""The fast REST path: V2 JSON bodies parsed by simdjson instead of orjson.

A 224x224x3 image sent as V2 JSON is 150,528 numbers, about 3 MB of text. MLServer parses
each body with `orjson.loads` on its event loop, holding the GIL: for MobileNetV2 that
took more of the server's single event-loop thread than everything else it does per
request together, and that thread, not the CPUs, capped REST throughput. `fastsimdjson`
(simdjson's own Python binding) parses the same document into the same Python objects
about 1.6x faster. It is a drop-in for `json.loads`: what simdjson refuses is handed to
`json.loads`, so bodies parse exactly as before and malformed ones still fail as malformed
JSON (HTTP 422). Without `fastsimdjson` installed, bodies are parsed with orjson, as MLServer does.

It swaps MLServer's `Request.json` once, for the whole REST server: the result is the same
dict for every model, so other runtimes in the server see no difference, but for one thing:
an input that names a shared-memory region (`wrappers.shared_memory`) may come without
`data`, as the V2 extension has it, and is given an empty `data` for MLServer's schema.
"""

from __future__ import annotations

import logging
from typing import Any

import orjson
from mlserver.rest import requests

from wrappers.shared_memory import REGION

logger = logging.getLogger(__name__)

try:
    import fastsimdjson
except ImportError:  # an optional speed-up: orjson parses instead, as in MLServer
    fastsimdjson = None


def install() -> None:
    """Parse REST bodies this way from now on (with orjson, as MLServer does, where simdjson is not installed)."""
    if fastsimdjson is None:
        logger.info("fastsimdjson is not installed: REST bodies are parsed with orjson, as MLServer does")
    requests.Request.json = _json


async def _json(self: requests.Request) -> Any:
    if not hasattr(self, "_json"):
        self._json = parse(await self.body())
    return self._json


def parse(body: bytes, *, empty_data_for: tuple[str, ...] = (REGION,)) -> Any:
    """A REST body as a Python object (ValueError where it is not JSON). Inputs without `data` whose parameters
    name one of `empty_data_for` (their data lies elsewhere) get an empty `data`, which MLServer's schema needs."""
    parsed = fastsimdjson.loads(body) if fastsimdjson else orjson.loads(body)
    inputs = parsed.get("inputs") if isinstance(parsed, dict) else None
    for tensor in inputs if isinstance(inputs, list) else []:
        parameters = tensor.get("parameters") if isinstance(tensor, dict) else None
        if isinstance(parameters, dict) and "data" not in tensor and any(key in parameters for key in empty_data_for):
            tensor["data"] = []
    return parsed
