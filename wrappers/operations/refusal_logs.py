"""A refused request is one WARNING line, at a bounded rate: never a traceback per bad request.

MLServer's gRPC servicer logs every error it answers with `logger.exception`, so each malformed request (a client's
mistake, answered INVALID_ARGUMENT) wrote an ERROR line with a whole traceback: a client sending garbage in a loop
grew the pod's log as fast as it could send. `RefusalLines` is a logging filter on MLServer's loggers that turns the
record of a client error (an `MLServerError` whose status is under 500) into one WARNING line naming it, and lets
at most `burst` such lines through at once and `per_second` after that; those it holds back are counted, and the
next line that passes says how many. Server errors (500 and up) keep their tracebacks: they are the pod's own.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

MLSERVER_LOGGER = "mlserver"
# The loggers MLServer's servers log refused requests on (a filter on a logger sees its own records only).
REFUSING_LOGGERS = (MLSERVER_LOGGER, "mlserver.grpc", "mlserver.rest")
PER_SECOND = 5.0
BURST = 20
_MESSAGE_CHARS = 300


class RefusalLines(logging.Filter):
    """One WARNING line per refused request (an `error_type` with a `status_code` under 500), `burst` at once and
    `per_second` after that; the rest counted."""

    def __init__(
        self,
        error_type: type[Exception],
        per_second: float = PER_SECOND,
        burst: int = BURST,
        clock: Callable[[], float] = time.monotonic,
    ):
        super().__init__()
        self._error_type = error_type
        self._rate, self._burst, self._clock = per_second, burst, clock
        self._tokens, self._at = float(burst), clock()
        self._held_back = 0
        self._lock = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        if not isinstance(error, self._error_type) or getattr(error, "status_code", 500) >= 500:
            return True
        with self._lock:
            now = self._clock()
            self._tokens = min(float(self._burst), self._tokens + (now - self._at) * self._rate)
            self._at = now
            if self._tokens < 1:
                self._held_back += 1
                return False
            self._tokens -= 1
            held_back, self._held_back = self._held_back, 0
        record.levelno, record.levelname = logging.WARNING, logging.getLevelName(logging.WARNING)
        record.msg = "refused a request (%s): %s" + (" (%d more refused since, not logged)" if held_back else "")
        record.args = (type(error).__name__, " ".join(str(error).split())[:_MESSAGE_CHARS], *((held_back,) if held_back else ()))
        record.exc_info, record.exc_text, record.stack_info = None, None, None
        return True


_installed: RefusalLines | None = None


def install() -> RefusalLines:
    """The filter on MLServer's loggers, once per process (every model's load asks); one rate for all of them."""
    global _installed
    if _installed is None:
        from mlserver.errors import MLServerError  # not at import: the tests' tritonclient protobufs must not meet MLServer's

        _installed = RefusalLines(MLServerError)
        for name in REFUSING_LOGGERS:
            logging.getLogger(name).addFilter(_installed)
    return _installed
