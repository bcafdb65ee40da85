"""MLServer's API docs (Swagger UI and the OpenAPI schemas) are off unless the server is told to serve them.

MLServer serves `/v2/docs`, `/v2/docs/dataplane.json` and the same per model on the inference port: a map of the
server for anyone who can reach it, and a page no client needs. The launcher puts `ApiDocsGate` in front of every
REST app it builds (beside the repository API guard, `wrappers.repository_api`), which answers those paths 404
saying how to turn them on; `SLIPWAY_API_DOCS=1` serves them as MLServer does (a development server).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, MutableMapping
from typing import Any

from fastapi.responses import JSONResponse

DOCS_ENV = "SLIPWAY_API_DOCS"
_DOCS_PATH = re.compile(r"^/v2(?:/models/[^/]+(?:/versions/[^/]+)?)?/docs(?:/dataplane\.json)?/?$")
REFUSAL = (
    f"the API docs (Swagger UI, OpenAPI) are off on this server; set {DOCS_ENV}=1 where it should serve them "
    "(a development server), and read the V2 protocol's own docs otherwise"
)


def served(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether the docs are served: `SLIPWAY_API_DOCS` is 1 or true."""
    return environ.get(DOCS_ENV, "").strip().lower() in ("1", "true")


def is_docs_path(path: str) -> bool:
    return bool(_DOCS_PATH.match(path))


class ApiDocsGate:
    """ASGI middleware: the docs' paths answer 404 unless `served()`."""

    def __init__(self, app) -> None:
        self.app = app
        self._served = served()

    async def __call__(self, scope: MutableMapping[str, Any], receive, send) -> None:
        if scope["type"] == "http" and not self._served and is_docs_path(route_path(scope)):
            await JSONResponse({"error": REFUSAL}, status_code=404)(scope, receive, send)
            return
        await self.app(scope, receive, send)


def route_path(scope: Mapping[str, Any]) -> str:
    """The path the router matches: without the root path MLServer may be served under (the REST guards'
    `wrappers.repository_api` and this module's)."""
    path, root = scope["path"], scope.get("root_path", "")
    return path[len(root) :] if root and path.startswith(root) else path
