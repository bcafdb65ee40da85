"""Where a canary stands, kept on the SeldonDeployment itself (annotation `slipway.io/canary`).

The cluster is the one place every run of the controller sees, so the state lives there and not in a file on
whoever's laptop started it: a second run reads it and continues at the step the first one reached. The state
also holds a lease (who drives the canary, renewed while it runs): a second controller is refused while the
lease is fresh, and takes over at once where the first one was on this machine and its process is gone.
Every change is a JSON patch that first tests the annotation still holds what its writer last saw.
"""

from __future__ import annotations

import json
import os
import socket
import time
import uuid
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

STATE_ANNOTATION = "slipway.io/canary"
LAST_ANNOTATION = "slipway.io/canary-last"  # how the last canary ended: version, outcome, reason, time
SHADOW_ANNOTATION = "slipway.io/shadow"  # the shadow's version and since when it runs

Phase = Literal["stepping", "promoting", "rolling-back"]


class StateError(ValueError):
    """The annotation is not a state this controller wrote; the message says how to clear it."""


class Holder(BaseModel):
    """The controller process driving the canary."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    host: str
    pid: int
    run: str

    @classmethod
    def this_process(cls) -> Holder:
        return cls(host=socket.gethostname(), pid=os.getpid(), run=uuid.uuid4().hex[:12])

    def gone(self) -> bool:
        """True only when this holder ran on this machine and its process no longer exists."""
        if self.host != socket.gethostname():
            return False
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            return False
        return False

    def describe(self) -> str:
        return f"pid {self.pid} on {self.host}"


class CanaryState(BaseModel):
    """One canary: the version it brings, the stable one it replaces, the steps and where it is."""

    model_config = ConfigDict(extra="forbid")

    version: str
    digest: str
    uri: str
    stable_version: str
    stable_digest: str
    steps: list[int] = Field(min_length=1)
    step: int = Field(ge=0, description="index in steps of the canary's current weight")
    phase: Phase = "stepping"
    waits: int = Field(default=0, ge=0, description="judgements in a row that had too few samples")
    reason: str | None = None  # why it rolls back
    holder: Holder
    lease_s: float = Field(gt=0)
    renewed_at: float
    started_at: float
    step_started_at: float

    @property
    def weight(self) -> int:
        return self.steps[self.step]

    def encode(self) -> str:
        return json.dumps(self.model_dump(), separators=(",", ":"), sort_keys=True)

    @classmethod
    def decode(cls, text: str, *, where: str) -> CanaryState:
        try:
            return cls.model_validate_json(text)
        except ValidationError as err:
            raise StateError(
                f"annotation {STATE_ANNOTATION} on {where} is not a canary state this version of Slipway "
                f"reads ({err.error_count()} problems): remove it with `kubectl annotate sdep ... "
                f"{STATE_ANNOTATION}-` once no canary predictor is left"
            ) from err

    def held_elsewhere(self, me: Holder, now: float | None = None) -> str | None:
        """Why another controller still holds this canary (None: it is ours, or free to take over)."""
        if self.holder.run == me.run:
            return None
        now = time.time() if now is None else now
        if self.holder.gone():
            return None
        age = now - self.renewed_at
        if age >= self.lease_s:
            return None
        return (
            f"driven by {self.holder.describe()}, renewed {age:.0f} s ago (its lease lasts {self.lease_s:.0f} s without renewal)"
        )

    def position(self) -> str:
        return f"step {self.step + 1}/{len(self.steps)} at {self.weight}%"
