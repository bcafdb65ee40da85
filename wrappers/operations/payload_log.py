"""Payload logging off the request path: a bounded queue, one sender thread, and counters of what it did.

Seldon's executor logged requests and responses; the `seldon.io/no-engine` predictors Slipway renders have
no executor, so the runtime does it (`parameters.extra.payload_log`, `slipway.runtime_settings.PayloadLogging`).
A logged request costs the event loop a sampling draw and one `put_nowait` of references to the request
and its response (about a microsecond or two): no copying, no JSON, no I/O. One daemon thread per model
builds the events (`wrappers.operations.payload_events`) and POSTs them over one kept-alive connection.

Why a thread and not an asyncio task: a task would send on the event loop that answers requests, and a
collector that answers slowly or sends large errors would cost it time; the thread only shares the GIL,
while it waits on the network it holds nothing. Why no retries: a collector that is down would otherwise
take every retry's timeout from every later event, and a collector that recovers would be met by a burst.
A failed event is dropped and what comes for `backoff_s` is dropped at the door (reason `collector_down`,
without waking the thread), so a dead collector costs one timeout per backoff period; a full queue drops
at the door too (`queue_full`), never holding the request. What it costs a request with the collector slow
or down: docs/internals.md, "The figures behind the modules".

Counters (the default registry, served on MLServer's metrics port with parallel_workers 0):
slipway_payload_events_sent_total{model_name, model_version, type} and
slipway_payload_events_dropped_total{model_name, model_version, reason}.
"""

from __future__ import annotations

import http.client
import logging
import queue
import random
import threading
import time
import urllib.parse
from collections.abc import Awaitable, Callable
from typing import Any

from slipway.runtime_settings import PayloadLogging
from wrappers.operations.metrics import MetricSeries
from wrappers.operations.payload_events import Kind, Origin, Redaction, build

logger = logging.getLogger(__name__)

SENT = "slipway_payload_events_sent"  # exported with _total
DROPPED = "slipway_payload_events_dropped"
# Why an event was dropped: the queue was full; the collector timed out, could not be reached, or answered
# other than 2xx; sending was paused after such a failure; the event could not be built; the model unloaded.
REASONS = ("queue_full", "timeout", "unreachable", "rejected", "collector_down", "build_failed", "shutdown")
SHUTDOWN_GRACE_S = 2.0  # after unload, what is queued is still sent for this long, at most

# How a kept-alive connection that the collector closed while idle fails, before any answer.
_STALE = (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError, ConnectionAbortedError)


class _Failed(Exception):
    """An event the collector did not take; `reason` is one of REASONS."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason


class PayloadLog:
    """One model version's payload logging: `wrap` its predict, `close` it at unload."""

    def __init__(self, settings: PayloadLogging, origin: Origin, series: MetricSeries) -> None:
        self._settings = settings
        self._origin = origin
        self._redaction = Redaction(settings.redact)
        self._queue: queue.Queue = queue.Queue(maxsize=settings.queue_size)
        self._closing = threading.Event()
        address = urllib.parse.urlsplit(settings.url)
        self._https = address.scheme == "https"
        self._host, self._port = address.hostname or "", address.port  # the settings require a host
        self._path = (address.path or "/") + (f"?{address.query}" if address.query else "")
        self._connection: http.client.HTTPConnection | None = None
        self._paused_until = 0.0
        labels = (origin.model, origin.version)
        # The process's counters (its state's series), created by the first model that logs: models share them by label.
        sent = series.counter(SENT, "Payload-log events the collector took (2xx)", ("model_name", "model_version", "type"))
        dropped = series.counter(
            DROPPED, "Payload-log events dropped, never sent or not taken, by reason", ("model_name", "model_version", "reason")
        )
        self._sent = {kind: sent.labels(*labels, kind) for kind in ("request", "response")}
        self._dropped = {reason: dropped.labels(*labels, reason) for reason in REASONS}
        self._thread = threading.Thread(target=self._drain, name=f"payload-log-{origin.model}", daemon=True)
        self._thread.start()

    def wrap(self, predict: Callable[[Any], Awaitable[Any]]) -> Callable[[Any], Awaitable[Any]]:
        """`predict`, logging each request and its response (only the request where predict raised)."""

        async def logged(payload: Any) -> Any:
            started = time.time()
            try:
                response = await predict(payload)
            except Exception:
                self.record(payload, None, started, time.time())
                raise
            self.record(payload, response, started, time.time())
            return response

        return logged

    def record(self, request: Any, response: Any, started: float, ended: float) -> None:
        """Hand one request (and its response, or None) to the sender; on the event loop, so it never waits."""
        if self._closing.is_set() or (self._settings.sample < 1 and random.random() >= self._settings.sample):
            return
        if time.monotonic() < self._paused_until:  # dropped here: waking the sender only to drop costs the loop more
            self._dropped["collector_down"].inc(1 if response is None else 2)
            return
        try:
            self._queue.put_nowait((request, response, started, ended))
        except queue.Full:
            self._dropped["queue_full"].inc(1 if response is None else 2)

    def close(self) -> None:
        """Stop taking events; the thread sends what is queued for SHUTDOWN_GRACE_S more, drops the rest and ends."""
        self._closing.set()
        try:
            self._queue.put_nowait(None)  # wakes the thread; where the queue is full it sees _closing after an item
        except queue.Full:
            pass

    # -- the sender thread -------------------------------------------------------------------

    def _drain(self) -> None:
        deadline = None
        while True:
            item = self._queue.get()
            if self._closing.is_set() and deadline is None:
                deadline = time.monotonic() + SHUTDOWN_GRACE_S
            if item is None:
                if self._closing.is_set() and self._queue.empty():
                    break
                continue
            request, response, started, ended = item
            events: list[tuple[Kind, Any, float]] = [("request", request, started)]
            if response is not None:
                events.append(("response", response, ended))
            for kind, message, at in events:
                if deadline is not None and time.monotonic() > deadline:
                    self._dropped["shutdown"].inc()
                else:
                    self._send_one(kind, message, request.id or "", at)
            if deadline is not None and self._queue.empty():
                break
        self._disconnect()

    def _send_one(self, kind: Kind, message: Any, request_id: str, at: float) -> None:
        if time.monotonic() < self._paused_until:
            self._dropped["collector_down"].inc()
            return
        try:
            event = build(kind, message, request_id, at, self._origin, self._redaction, self._settings.max_bytes)
        except Exception:  # noqa: BLE001 - whatever a body holds, the thread must go on
            logger.warning(
                "payload log: could not build the %s event of %s request %s", kind, self._origin.model, request_id, exc_info=True
            )
            self._dropped["build_failed"].inc()
            return
        try:
            self._post(event.headers, event.body)
        except _Failed as failed:
            self._dropped[failed.reason].inc()
            self._paused_until = time.monotonic() + self._settings.backoff_s
            logger.warning(
                "payload log: the collector at %s did not take an event (%s); events are dropped for %g s",
                self._settings.url,
                failed,
                self._settings.backoff_s,
            )
            return
        self._sent[kind].inc()

    def _post(self, headers: dict[str, str], body: bytes) -> None:
        """One POST on the kept-alive connection; any failure closes it and raises _Failed.

        The one repeat: a kept-alive connection the collector closed while idle (its keep-alive timeout) fails
        before any answer, and that event goes again once on a new connection; nothing else is ever repeated."""
        reused = self._connection is not None
        try:
            try:
                answer = self._exchange(headers, body)
            except _STALE:
                if not reused:
                    raise
                self._disconnect()
                answer = self._exchange(headers, body)
        except TimeoutError as err:
            self._disconnect()
            raise _Failed("timeout", f"no answer within {self._settings.timeout_s:g} s") from err
        except (OSError, http.client.HTTPException) as err:
            self._disconnect()
            raise _Failed("unreachable", f"{type(err).__name__}: {err}") from err
        if not 200 <= answer.status < 300:
            raise _Failed("rejected", f"HTTP {answer.status}")
        if answer.will_close:
            self._disconnect()

    def _exchange(self, headers: dict[str, str], body: bytes) -> http.client.HTTPResponse:
        if self._connection is None:
            kind = http.client.HTTPSConnection if self._https else http.client.HTTPConnection
            self._connection = kind(self._host, self._port, timeout=self._settings.timeout_s)
        self._connection.request("POST", self._path, body=body, headers=headers)
        answer = self._connection.getresponse()
        answer.read()
        return answer

    def _disconnect(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None


def start(settings: PayloadLogging | None, model: str, version: str | None, series: MetricSeries) -> PayloadLog | None:
    """The model's payload log where its settings ask for one, counting in `series` (the process state's); None where
    they do not."""
    if settings is None:
        return None
    origin = Origin.for_model(model, version, settings)
    logger.info(
        "%s: payload log to %s (sample %g, queue %d), ce-source %s",
        model,
        settings.url,
        settings.sample,
        settings.queue_size,
        origin.source,
    )
    return PayloadLog(settings, origin, series)
