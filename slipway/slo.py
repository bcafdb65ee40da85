"""The SLO: its schema (with the canary's policy), and the gate that judges measured figures against it.

Shared by the load tests (`loadtest`), the canary's judge and the alert rules (`deployments`): one schema in the core.

A release can be gated on a load test only if a broken limit says which one and by how
much; `Verdict.lines()` does, and the command exits non-zero with them.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from slipway.cli import one_line
from slipway.files import FileProblem, read_yaml


class ConfigError(ValueError):
    """An SLO, or a host, model or shape that cannot describe a load test; the message says what to send."""


class CanaryPolicy(BaseModel):
    """How a canary is judged against its stable predictor, beyond the SLO's own limits (`canary:` in the SLO file)."""

    model_config = ConfigDict(extra="forbid")

    min_requests: int = Field(
        default=200, ge=1, description="requests each predictor must have served in the window before it is judged; fewer: wait"
    )
    latency_tolerance: float = Field(
        default=0.2, ge=0, description="the canary's p50/p95/p99 may exceed the stable's by this fraction..."
    )
    latency_slack_ms: float = Field(default=1.0, ge=0, description="...or by this many ms, whichever allows more")
    error_rate_tolerance: float = Field(
        default=0.001,
        ge=0,
        le=1,
        description="the canary's error rate may exceed the stable's by this much (0.001 = 0.1 percentage points)",
    )
    max_output_drift: float = Field(
        default=0.05,
        ge=0,
        le=1,
        description="where a shadow ran first: how far the "
        "share of rows each class wins may move from the stable's on the same mirrored "
        "requests (total variation distance, 0 = identical, 1 = disjoint)",
    )


class Slo(BaseModel):
    """Service-level objective a run is gated on; a limit left out is not checked."""

    model_config = ConfigDict(extra="forbid")

    p50_ms: float | None = Field(default=None, gt=0)
    p95_ms: float | None = Field(default=None, gt=0)
    p99_ms: float | None = Field(default=None, gt=0)
    max_error_rate: float | None = Field(default=None, ge=0, le=1)
    min_rps: float | None = Field(default=None, ge=0)
    canary: CanaryPolicy | None = None  # read by the canary judge (deployments/delivery/canary); a load test ignores it

    def is_empty(self) -> bool:
        """No limit to check (the canary policy is not a limit)."""
        return all(value is None for value in self.model_dump(exclude={"canary"}).values())


LATENCY_LIMITS = ("p50_ms", "p95_ms", "p99_ms")


@dataclass(frozen=True)
class Breach:
    """One broken limit: what it allows, what was measured and by how much it missed."""

    limit: str
    allowed: float
    measured: float | None

    @property
    def by(self) -> float | None:
        if self.measured is None:
            return None
        return self.allowed - self.measured if self.limit == "min_rps" else self.measured - self.allowed

    def message(self) -> str:
        if self.measured is None:
            return f"{self.limit}: nothing was measured (limit {self.allowed:g})"
        by = self.by if self.by is not None else 0.0  # measured, so `by` is a number
        relative = f", {by / self.allowed:+.0%}" if self.allowed else ""
        if self.limit == "min_rps":
            return f"throughput {self.measured:.1f} req/s < min_rps {self.allowed:g} (short by {self.by:.1f} req/s{relative.replace('+', '-')})"
        if self.limit == "max_error_rate":
            return f"error rate {self.measured:.2%} > max_error_rate {self.allowed:.2%} (over by {self.by:.2%})"
        name = self.limit.removesuffix("_ms")
        return f"{name} latency {self.measured:.1f} ms > {self.limit} {self.allowed:g} (over by {self.by:.1f} ms{relative})"

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "by": self.by, "message": self.message()}


@dataclass(frozen=True)
class Verdict:
    """The gate's answer, with the figures it judged and where they came from."""

    slo: Slo
    judged_on: str
    figures: dict[str, Any]
    breaches: list[Breach]

    @property
    def passed(self) -> bool:
        return not self.breaches

    def lines(self) -> list[str]:
        return [breach.message() for breach in self.breaches]

    def as_dict(self) -> dict[str, Any]:
        return {
            "limits": self.slo.model_dump(exclude_none=True),
            "passed": self.passed,
            "judged_on": self.judged_on,
            "figures": self.figures,
            "breaches": [breach.as_dict() for breach in self.breaches],
        }


def load_slo(path: Path | None = None, **overrides: float | None) -> Slo:
    """Limits from a YAML file (keys p50_ms, p95_ms, p99_ms, max_error_rate, min_rps), flags winning."""
    data: dict[str, Any] = {}
    if path is not None:
        try:
            loaded = read_yaml(path, f"SLO file {path}")
        except FileProblem as err:
            raise ConfigError(f"{err}; write a UTF-8 YAML mapping with keys {', '.join(Slo.model_fields)}") from err
        if loaded is not None and not isinstance(loaded, dict):
            raise ConfigError(f"SLO file {path} must be a mapping of limits, e.g. `p95_ms: 50`")
        data.update(loaded or {})
    data.update({key: value for key, value in overrides.items() if value is not None})
    try:
        return Slo.model_validate(data)
    except ValidationError as err:
        raise ConfigError(
            f"invalid SLO{f' in {path}' if path else ''}: {one_line(err)} (keys: {', '.join(Slo.model_fields)})"
        ) from err


def breaches(slo: Slo, figures: dict[str, Any], *, latency_only: bool = False) -> list[Breach]:
    """Every limit of `slo` that `figures` (rps, error_rate, p50_ms, ...) breaks."""
    found = []
    for limit in LATENCY_LIMITS:
        allowed = getattr(slo, limit)
        if allowed is not None:
            measured = figures.get(limit)
            if measured is None or measured > allowed:
                found.append(Breach(limit, allowed, measured))
    if latency_only:
        return found
    if slo.max_error_rate is not None and figures.get("error_rate", 0.0) > slo.max_error_rate:
        found.append(Breach("max_error_rate", slo.max_error_rate, figures.get("error_rate")))
    if slo.min_rps is not None and (figures.get("rps") or 0.0) < slo.min_rps:
        found.append(Breach("min_rps", slo.min_rps, figures.get("rps")))
    return found


def holds_latency(slo: Slo, figures: dict[str, Any]) -> bool:
    """True when latency and errors are within limits (throughput aside)."""
    return not breaches(slo, figures, latency_only=True) and not (
        slo.max_error_rate is not None and figures.get("error_rate", 0.0) > slo.max_error_rate
    )


def capacity_step(slo: Slo, steps: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The step with the most throughput whose latency and errors hold the SLO, or None."""
    holding = [step for step in steps if step.get("requests") and holds_latency(slo, step)]
    return max(holding, key=lambda step: step["rps"]) if holding else None


def judge(slo: Slo, *, shape: str, steps: list[dict[str, Any]], aggregate: dict[str, Any]) -> Verdict:
    """Judge a run. A step load is judged on its capacity at the SLO: the best step that holds
    latency and errors must reach min_rps (or, when none holds, the lightest step shows why).
    A constant load is judged on its steady state; spike and soak on the whole run."""
    if shape == "step":
        best = capacity_step(slo, steps)
        if best is None and steps:
            best = steps[0]
            where = f"step {best['index'] + 1} ({best['users']} users): even the lightest load breaks the SLO"
        else:
            where = f"step {best['index'] + 1} ({best['users']} users): the most throughput within the SLO" if best else "no step"
        figures = best or {}
    elif shape == "constant" and steps and steps[0].get("requests"):
        figures, where = steps[0], "the steady state (ramp-up excluded)"
    else:
        figures, where = aggregate, "the whole run"
    keep = ("rps", "error_rate", "requests", "failures", *LATENCY_LIMITS)
    return Verdict(slo, where, {key: figures.get(key) for key in keep}, breaches(slo, figures))
