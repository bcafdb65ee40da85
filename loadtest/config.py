"""What a load test runs against and how load rises: typed once at the edge, shared with Locust.

The command line builds a `LoadJob`; the runner writes it to a JSON file and Locust's
process (the locustfiles and the shape) reads it back through `SLIPWAY_LOAD_JOB`, so both
sides agree on one validated description instead of re-parsing strings.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from slipway.cli import one_line
from slipway.slo import ConfigError as ConfigError  # one error type for a load test's settings and its SLO
from slipway.slo import Slo

JOB_ENV = "SLIPWAY_LOAD_JOB"
MAX_RUN_S = 4 * 3600  # the longest soak a single command may run
MIN_STAGE_S = 2.0  # Locust's shape ticks once a second: a stage needs two ticks to be measured
Protocol = Literal["rest", "grpc"]
RestBody = Literal["json", "binary"]
ShapeKind = Literal["constant", "step", "spike", "soak"]


class Endpoint(BaseModel):
    """One model behind one V2 endpoint, optionally behind Seldon's ingress."""

    model_config = ConfigDict(extra="forbid")

    protocol: Protocol
    base_url: str = Field(description="REST: scheme://host:port; gRPC: host:port")
    path_prefix: str = Field(default="", description="Seldon ingress prefix, e.g. /seldon/<namespace>/<name>")
    tls: bool = False
    model: str = Field(min_length=1)
    version: str | None = None

    @property
    def model_path(self) -> str:
        """`/v2/models/{name}[/versions/{version}]` under the ingress prefix: metadata lives here."""
        path = f"{self.path_prefix}/v2/models/{self.model}"
        return f"{path}/versions/{self.version}" if self.version else path

    @property
    def infer_path(self) -> str:
        return f"{self.model_path}/infer"

    @property
    def grpc_metadata(self) -> list[tuple[str, str]]:
        """Seldon Core routes gRPC by the `seldon` and `namespace` headers instead of a path."""
        parts = [part for part in self.path_prefix.split("/") if part]
        if len(parts) == 3 and parts[0] == "seldon":
            return [("seldon", parts[2]), ("namespace", parts[1])]
        return []

    def describe(self) -> str:
        where = f"{'grpcs' if self.tls else 'grpc'}://{self.base_url}" if self.protocol == "grpc" else self.base_url
        version = f" version {self.version}" if self.version else ""
        return f"{self.protocol} {where}{self.path_prefix} model {self.model}{version}"


def parse_host(host: str, *, protocol: Protocol, model: str, version: str | None = None) -> Endpoint:
    """An `Endpoint` from a user's host: `http://h:p`, `https://h/seldon/ns/name`, `grpc://h:p`, or `h:p`.

    A path is only accepted when it is Seldon's ingress prefix, so a typo in the URL is
    caught here instead of showing up as 100% 404s under load.
    """
    text = host.strip()
    if "://" not in text:
        text = ("grpc://" if protocol == "grpc" else "http://") + text
    parts = urlsplit(text)
    scheme = parts.scheme.lower()
    rest_schemes, grpc_schemes = {"http", "https"}, {"grpc", "grpcs", "http", "https"}
    if protocol == "rest" and scheme not in rest_schemes or protocol == "grpc" and scheme not in grpc_schemes:
        raise ConfigError(
            f"host {host!r} has scheme {scheme!r}; for {protocol} send http(s)://HOST:PORT"
            + ("" if protocol == "rest" else " or grpc(s)://HOST:PORT")
        )
    if not parts.hostname:
        raise ConfigError(f"host {host!r} names no machine; send e.g. http://127.0.0.1:8080")
    try:
        port = parts.port
    except ValueError as err:
        raise ConfigError(f"host {host!r} has an invalid port: {err}") from err
    prefix = parts.path.rstrip("/")
    segments = [segment for segment in prefix.split("/") if segment]
    if segments and not (len(segments) == 3 and segments[0] == "seldon"):
        raise ConfigError(
            f"host {host!r} has path {prefix!r}; the only path accepted is Seldon's ingress prefix "
            "/seldon/<namespace>/<deployment>"
        )
    tls = scheme in {"https", "grpcs"}
    if protocol == "rest":
        base = f"{scheme}://{parts.netloc}"
    else:
        base = f"{parts.hostname}:{port or (443 if tls else 80)}"
    return Endpoint(protocol=protocol, base_url=base, path_prefix=prefix, tls=tls, model=model, version=version)


class Stage(BaseModel):
    """One stretch of constant load, measured as one step of the report."""

    name: str
    users: int = Field(ge=1)
    duration_s: float = Field(gt=0)


class ShapeSpec(BaseModel):
    """How load rises and falls. Every shape is bounded in users and in time."""

    model_config = ConfigDict(extra="forbid")

    kind: ShapeKind = "constant"
    users: int = Field(default=4, ge=1, le=10_000, description="constant/soak users, the step's first, the spike's base")
    duration_s: float = Field(default=15, gt=0, le=MAX_RUN_S, description="constant/soak/spike length")
    step_s: float = Field(default=5, gt=0, le=600, description="length of each step")
    step_factor: float = Field(default=2.0, gt=1, le=10, description="users grow by this factor each step")
    max_users: int = Field(default=64, ge=1, le=10_000)
    min_gain: float = Field(default=0.05, ge=0, le=1, description="saturated when throughput grows less than this")
    gain_window: int = Field(default=3, ge=2, le=10, description="...over this many steps")
    spike_users: int | None = Field(default=None, ge=1, le=10_000, description="users during the spike (default 4x)")
    spike_s: float | None = Field(default=None, gt=0, description="spike length (default a third of the run)")
    window_s: float | None = Field(default=None, gt=0, description="soak: report one step per window")
    stop_slo: Slo | None = Field(default=None, description="step: stop rising once a step breaks these latency limits")

    @model_validator(mode="after")
    def _check(self) -> ShapeSpec:
        if self.kind == "step" and self.users > self.max_users:
            raise ValueError(f"step load starts at {self.users} users, above max_users {self.max_users}")
        if self.kind == "spike" and self.spike_length_s >= self.duration_s:
            raise ValueError(f"the spike ({self.spike_length_s:g} s) must be shorter than the run ({self.duration_s:g} s)")
        shortest = self.step_s if self.kind == "step" else min(stage.duration_s for stage in self.fixed_stages())
        if shortest < MIN_STAGE_S:
            raise ValueError(
                f"a {self.kind} stage of {shortest:g} s is too short to measure (Locust's shape ticks once a second); "
                f"make every step, window or spike phase at least {MIN_STAGE_S:g} s"
            )
        return self

    @property
    def spike_length_s(self) -> float:
        return self.spike_s if self.spike_s is not None else self.duration_s / 3

    def fixed_stages(self) -> list[Stage]:
        """The stages of the shapes that do not depend on what is measured (all but step)."""
        if self.kind == "constant":
            return [Stage(name="constant", users=self.users, duration_s=self.duration_s)]
        if self.kind == "spike":
            spike = self.spike_length_s
            before = (self.duration_s - spike) / 2
            peak = self.spike_users or 4 * self.users
            return [
                Stage(name="baseline", users=self.users, duration_s=before),
                Stage(name="spike", users=peak, duration_s=spike),
                Stage(name="recovery", users=self.users, duration_s=self.duration_s - spike - before),
            ]
        if self.kind == "soak":
            window = self.window_s or max(5.0, self.duration_s / 10)
            count = max(1, math.ceil(self.duration_s / window - 1e-9))
            last = self.duration_s - window * (count - 1)
            return [
                Stage(name=f"window {i + 1}", users=self.users, duration_s=window if i < count - 1 else last)
                for i in range(count)
            ]
        raise ValueError("step stages depend on the measurements; use step_users()")

    def step_users(self) -> list[int]:
        """The users of each step, from `users` growing by `step_factor`, up to `max_users`."""
        levels = [self.users]
        while levels[-1] < self.max_users:
            levels.append(min(self.max_users, max(levels[-1] + 1, math.ceil(levels[-1] * self.step_factor))))
        return levels

    def planned_max_s(self) -> float:
        """The longest this shape can run (the step shape usually stops sooner, at saturation)."""
        if self.kind == "step":
            return self.step_s * len(self.step_users())
        return sum(stage.duration_s for stage in self.fixed_stages())


def build_shape(**settings) -> ShapeSpec:
    """A `ShapeSpec` from command-line values (None means the default), with one-line errors."""
    try:
        return ShapeSpec(**{key: value for key, value in settings.items() if value is not None})
    except ValidationError as err:
        raise ConfigError(f"invalid load shape: {one_line(err)}") from err


class LoadJob(BaseModel):
    """Everything the Locust process needs, written to one JSON file by the runner."""

    model_config = ConfigDict(extra="forbid")

    endpoint: Endpoint
    shape: ShapeSpec
    payload_file: Path
    request_headers: dict[str, str] = Field(default_factory=dict, description="REST: what every request says of its body")
    steps_file: Path
    request_timeout_s: float = Field(default=30, gt=0)
    watch_pid: int | None = Field(default=None, description="a local server's PID: its CPU use is measured per step")

    def payload_bytes(self) -> bytes:
        return Path(self.payload_file).read_bytes()


def current_job() -> LoadJob:
    """The job the runner handed to this Locust process (see `loadtest.run`)."""
    path = os.environ.get(JOB_ENV)
    if not path:
        raise RuntimeError(
            f"{JOB_ENV} is not set: start load tests with `python -m loadtest run` (or `make loadtest`), "
            "which prepares the payload and the job file for Locust"
        )
    return LoadJob.model_validate_json(Path(path).read_text())
