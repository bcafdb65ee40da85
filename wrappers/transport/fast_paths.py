"""Turning on a fast path that extends MLServer where it has no extension point (`wrappers.mlserver_compat`).

Where the installed MLServer lacks what a path patches, the model's load fails, naming the symbol and the
MLServer version; a model with `fast_path_fallback: true` is served without that one path instead, which an
ERROR log and the `slipway_fast_path_enabled{path=...}` gauge (0) make visible. Never silently either way.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from prometheus_client import Gauge

from wrappers import process_state
from wrappers.mlserver_compat import IncompatibleMLServer

logger = logging.getLogger(__name__)

FAST_PATH_ENABLED = "slipway_fast_path_enabled"
GRPC_RAW, REST_JSON, REST_INFER, PIN_EVENT_LOOP = "grpc_raw", "rest_json", "rest_infer", "pin_event_loop"


def enabled_gauge() -> Gauge:
    """1 while the path serves in this process, 0 once it was turned off for want of its extension point."""
    return process_state.current().metrics.gauge(
        FAST_PATH_ENABLED,
        "Whether a fast path that extends MLServer is on (0: this MLServer lacks what it extends; see the log)",
        labelnames=("path",),
        multiprocess_mode="max",
    )


def turn_on(path: str, install: Callable[[], None], *, fallback: bool) -> bool:
    """Run `install` (which raises IncompatibleMLServer where MLServer lacks what it patches); True where the path
    is on. Where it cannot be: raise, or with `fallback` log an ERROR, set the gauge to 0 and return False."""
    try:
        install()
    except IncompatibleMLServer as err:
        if not fallback:
            raise
        logger.error("fast path %s is off (fast_path_fallback): %s", path, err)
        enabled_gauge().labels(path=path).set(0)
        return False
    enabled_gauge().labels(path=path).set(1)
    return True
