"""What one HTTP connection may cost the server before its request is whole: the size and count of its headers, and
how long its headers and its body may take to arrive (no server here: `wrappers.mlserver_compat.connections` applies
them to uvicorn's connections).

uvicorn (with httptools) reads headers of any size and waits for them forever: 8 requests of 128 MiB of headers
took a server from 283 MiB to 1.27 GiB, and 500 connections trickling a header byte at a time were all still held
40 s later, up to the file-descriptor limit (issue 47). Here headers past `max_header_bytes` (the request line
included) or `max_headers` lines get 431, headers not whole within `header_timeout_s` of the connection or of the
request's first byte get 408, and so does a body that sends nothing for `body_idle_timeout_s`; each answer names
the limit and the variable that sets it, and closes the connection. `max_connections` caps the connections (and
requests) one server holds at once: past it, uvicorn answers 503.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass

from slipway.runtime_settings import SettingsError

# Each limit, the variable that sets it, and its default: like common servers' (nginx reads 4 x 8 KiB of headers,
# Go's net/http 1 MiB; both give up on headers within a minute).
_SETTINGS = {
    "max_header_bytes": ("SLIPWAY_MAX_HEADER_BYTES", 64 << 10),
    "max_headers": ("SLIPWAY_MAX_HEADERS", 100),
    "header_timeout_s": ("SLIPWAY_HEADER_TIMEOUT_S", 20),
    "body_idle_timeout_s": ("SLIPWAY_BODY_IDLE_TIMEOUT_S", 60),
    "max_connections": ("SLIPWAY_MAX_CONNECTIONS", 2048),
}


class ConnectionLimitError(SettingsError):
    """A connection limit's variable is not a whole number of at least 1; the message says what to set."""


@dataclass(frozen=True)
class ConnectionLimits:
    max_header_bytes: int = _SETTINGS["max_header_bytes"][1]
    max_headers: int = _SETTINGS["max_headers"][1]
    header_timeout_s: float = _SETTINGS["header_timeout_s"][1]
    body_idle_timeout_s: float = _SETTINGS["body_idle_timeout_s"][1]
    max_connections: int = _SETTINGS["max_connections"][1]

    @classmethod
    def from_env(cls, env: Mapping[str, str] = os.environ) -> ConnectionLimits:
        """The defaults, each replaced by its variable where set; ConnectionLimitError for one that is not a count."""
        values = {}
        for field, (variable, default) in _SETTINGS.items():
            text = env.get(variable, "").strip()
            if not text:
                continue
            if not text.isdigit() or int(text) < 1:
                raise ConnectionLimitError(f"{variable}={text!r} is not a whole number of at least 1; unset it for {default}")
            values[field] = int(text)
        return cls(**values)

    def headers_refusal(self, header_bytes: int, headers: int) -> str | None:
        """Why headers received so far (not yet whole) are refused, or None while they are within the limits."""
        if header_bytes > self.max_header_bytes:
            return (
                f"the request line and headers are over {self.max_header_bytes} bytes, the most this server reads "
                f"({_SETTINGS['max_header_bytes'][0]}); send fewer or smaller headers"
            )
        if headers > self.max_headers:
            return f"the request has over {self.max_headers} headers ({_SETTINGS['max_headers'][0]}); send fewer"
        return None

    def headers_late(self) -> str:
        return (
            f"the request's headers were not whole within {self.header_timeout_s:g} s "
            f"({_SETTINGS['header_timeout_s'][0]}); send the request line and headers at once"
        )

    def body_idle(self) -> str:
        return (
            f"the request's body sent nothing for {self.body_idle_timeout_s:g} s "
            f"({_SETTINGS['body_idle_timeout_s'][0]}); send the body without pausing"
        )


def answer(status: int, reason: str, message: str) -> bytes:
    """A whole HTTP/1.1 answer that closes the connection, its body MLServer's error shape: {"error": message}."""
    body = json.dumps({"error": message}).encode()
    head = (
        f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n"
        "connection: close\r\n\r\n"
    )
    return head.encode("ascii") + body
