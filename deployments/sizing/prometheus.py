"""The Prometheus HTTP API reader `make recommend` and the canary judge share: PROMETHEUS_URL, with a bearer
token (PROMETHEUS_TOKEN) or basic auth (PROMETHEUS_USERNAME, PROMETHEUS_PASSWORD) from the environment.

Any server that speaks Prometheus' `/api/v1/query` and `/api/v1/query_range` will do (Prometheus itself,
Thanos, Mimir, VictoriaMetrics); every refusal or non-answer is one line naming the server and what to fix.

Plain http:// is refused unless the host is this machine (localhost, 127.0.0.0/8, ::1) or PROMETHEUS_ALLOW_HTTP=1
says so: the token or password, and the queries naming namespaces and models, would cross the network in clear
text, and a `kubectl port-forward` (loopback) or an https:// ingress is the usual way in anyway.
"""

from __future__ import annotations

import base64
import ipaddress
import json
import math
import os
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field

URL_ENV = "PROMETHEUS_URL"
TOKEN_ENV = "PROMETHEUS_TOKEN"
USERNAME_ENV = "PROMETHEUS_USERNAME"
PASSWORD_ENV = "PROMETHEUS_PASSWORD"
ALLOW_HTTP_ENV = "PROMETHEUS_ALLOW_HTTP"
AUTH_HINT = f"set {TOKEN_ENV} (a bearer token) or {USERNAME_ENV} and {PASSWORD_ENV} (basic auth)"


class PrometheusError(ValueError):
    """The server refused, did not answer, or answered something that is not a Prometheus API response."""


@dataclass(frozen=True)
class Prometheus:
    """One Prometheus-compatible HTTP API and the credentials to send it."""

    url: str
    token: str | None = field(default=None, repr=False)
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    timeout_s: float = 30.0
    allow_http: bool = False  # plain http:// to another host; loopback is always allowed

    def __post_init__(self) -> None:
        if urllib.parse.urlsplit(self.url).scheme not in ("http", "https"):
            raise PrometheusError(f"Prometheus URL {self.url!r} must start with http:// or https://")
        if self.token and (self.username or self.password):
            raise PrometheusError(f"both a bearer token and basic auth are set for {self.url}: {AUTH_HINT}, not both")
        if bool(self.username) != bool(self.password):
            raise PrometheusError(f"basic auth for {self.url} needs both {USERNAME_ENV} and {PASSWORD_ENV}")

    @classmethod
    def from_env(cls, url: str | None = None, env: Mapping[str, str] | None = None, *, timeout_s: float = 30.0) -> Prometheus:
        """`url` (else $PROMETHEUS_URL) with the credentials the environment holds."""
        env = os.environ if env is None else env
        url = url or env.get(URL_ENV)
        if not url:
            raise PrometheusError(f"no Prometheus to ask: set {URL_ENV} (e.g. https://prometheus.example.com)")
        allow = env.get(ALLOW_HTTP_ENV, "").strip()
        if allow not in ("", "0", "1"):
            raise PrometheusError(
                f"{ALLOW_HTTP_ENV}={allow!r} is neither 1 nor 0: set {ALLOW_HTTP_ENV}=1 to allow "
                "plain http:// to a non-loopback Prometheus, or unset it"
            )
        server = cls(
            url,
            token=env.get(TOKEN_ENV) or None,
            username=env.get(USERNAME_ENV) or None,
            password=env.get(PASSWORD_ENV) or None,
            timeout_s=timeout_s,
            allow_http=allow == "1",
        )
        server.check_transport()  # at start, not at the first query minutes into a canary
        return server

    def check_transport(self) -> None:
        """Refuse plain HTTP to a host other than this machine unless `allow_http` (PROMETHEUS_ALLOW_HTTP=1)."""
        parts = urllib.parse.urlsplit(self.url)
        if parts.scheme == "http" and not self.allow_http and not _is_loopback(parts.hostname):
            raise PrometheusError(
                f"refusing plain HTTP to Prometheus at {self.url} (credentials and queries would cross the network "
                f"unencrypted): use https://, a `kubectl port-forward` to 127.0.0.1, or set {ALLOW_HTTP_ENV}=1"
            )

    def headers(self) -> dict[str, str]:
        if self.token:
            return {"Authorization": f"Bearer {self.token}"}
        if self.username:
            pair = base64.b64encode(f"{self.username}:{self.password}".encode()).decode()
            return {"Authorization": f"Basic {pair}"}
        return {}

    def get(self, path: str, params: Mapping[str, str]) -> dict:
        """GET `path` (e.g. /api/v1/query) and return the response's `data`; any failure is a PrometheusError."""
        self.check_transport()  # before anything is sent
        address = f"{self.url.rstrip('/')}{path}?{urllib.parse.urlencode(params)}"
        request = urllib.request.Request(address, headers={"Accept": "application/json", **self.headers()})
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                answer = json.loads(response.read())
        except urllib.error.HTTPError as err:
            body = err.read().decode(errors="replace").strip()[:300]
            if err.code in (401, 403):
                sent = "the credentials sent" if self.headers() else "no credentials"
                raise PrometheusError(f"Prometheus at {self.url} refused {sent} ({err.code}): {AUTH_HINT}") from err
            raise PrometheusError(f"Prometheus at {self.url} refused the query ({err.code}): {body}") from err
        except (urllib.error.URLError, OSError) as err:
            raise PrometheusError(f"Prometheus at {self.url} does not answer: {getattr(err, 'reason', err)}") from err
        except json.JSONDecodeError as err:
            raise PrometheusError(f"Prometheus at {self.url} did not answer JSON: {err}") from err
        if not isinstance(answer, dict) or answer.get("status") != "success" or not isinstance(answer.get("data"), dict):
            error = answer.get("error", "no error text") if isinstance(answer, dict) else "not a JSON object"
            raise PrometheusError(f"Prometheus at {self.url} answered an error for {params.get('query', path)!r}: {error}")
        return answer["data"]

    def query_range(self, query: str, *, start: float, end: float, step_s: float) -> dict:
        """The whole `query_range` answer (status and data), as `deployments.sizing.usage.parse_query_range` reads it."""
        data = self.get(
            "/api/v1/query_range", {"query": query, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step_s:g}"}
        )
        return {"status": "success", "data": data}

    def vector(self, query: str, *, at: float) -> list[tuple[dict[str, str], float]]:
        """An instant query at `at`: (labels, value) per series; NaN values are kept (the caller decides)."""
        data = self.get("/api/v1/query", {"query": query, "time": f"{at:.3f}"})
        if data.get("resultType") == "scalar":
            return [({}, _number(data["result"][1], query, self.url))]
        if data.get("resultType") != "vector" or not isinstance(data.get("result"), list):
            raise PrometheusError(
                f"Prometheus at {self.url} answered a {data.get('resultType')} for {query!r}, not an instant vector"
            )
        return [(item.get("metric", {}), _number(item["value"][1], query, self.url)) for item in data["result"]]

    def scalar(self, query: str, *, at: float) -> float | None:
        """The single value of an aggregated instant query; None when it matched nothing or is NaN."""
        result = self.vector(query, at=at)
        if len(result) > 1:
            raise PrometheusError(f"{query!r} gave {len(result)} series at {self.url}; aggregate it to one (sum(...))")
        value = result[0][1] if result else math.nan
        return None if math.isnan(value) else value


def _is_loopback(host: str | None) -> bool:
    """Whether `host` is this machine by name or address: traffic to it never leaves the host."""
    if not host:
        return False
    if host.lower() == "localhost" or host.lower().endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a name other than localhost: it may resolve anywhere
        return False


def _number(text: object, query: str, url: str) -> float:
    try:
        if isinstance(text, (str, int, float)):
            return float(text)  # Prometheus sends "NaN", "+Inf" as strings, which float() reads
    except ValueError:
        pass
    raise PrometheusError(f"Prometheus at {url} sent {text!r} as a value for {query!r}")
