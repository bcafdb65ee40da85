"""The fast REST path: V2 JSON bodies parsed by simdjson instead of orjson.

A 224x224x3 image sent as V2 JSON is 150,528 numbers, about 3 MB of text. MLServer parses
each body with `orjson.loads` on its event loop, holding the GIL: for MobileNetV2 that
took more of the server's single event-loop thread than everything else it does per
request together, and that thread, not the CPUs, capped REST throughput. `fastsimdjson`
(simdjson's own Python binding) parses the same document into the same Python objects
about 1.6x faster. It is a drop-in for `json.loads`: what simdjson refuses is handed to
`json.loads`, so bodies parse exactly as before and malformed ones still fail as malformed
JSON (HTTP 422). Without `fastsimdjson` installed, bodies are parsed with orjson, as MLServer does.
`json.loads` refuses three kinds of body with errors other than its JSONDecodeError (invalid
UTF-8, nesting deeper than Python's recursion limit, an integer over Python's 4300 digits):
those become JSONDecodeErrors too, saying what was wrong, so that every malformed body gets
the same answer (FastAPI's 422 names only JSONDecodeErrors; anything else got a bare 400,
and a RecursionError a 500).

It swaps MLServer's `Request.json` once, for the whole REST server: the result is the same
dict for every model, so other runtimes in the server see no difference, but for one thing:
an input that names a shared-memory region (`wrappers.shm.regions`) may come without
`data`, as the V2 extension has it, and is given an empty `data` for MLServer's schema.
The parsing itself is `wrappers.protocol.json_parsing`, which has no MLServer import.
"""

from __future__ import annotations

import logging

from wrappers.mlserver_compat.rest_app import replace_request_json
from wrappers.protocol.json_parsing import fastsimdjson, parse

logger = logging.getLogger(__name__)


def install() -> None:
    """Parse REST bodies this way from now on (with orjson, as MLServer does, where simdjson is not installed)."""
    if fastsimdjson is None:
        logger.info("fastsimdjson is not installed: REST bodies are parsed with orjson, as MLServer does")
    replace_request_json(parse)  # cached on the request, as MLServer's `Request.json` caches its result
