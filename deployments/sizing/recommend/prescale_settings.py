"""How `recommend` looks for a request-rate pattern and plans pre-scaling ahead of it: the settings and their flags.

Its own module so that the pattern finder (`pattern`) and the planner (`prescale`) both read it, and neither the other.
"""

from __future__ import annotations

from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import BaseModel, ConfigDict, Field, field_validator

DAY_S = 86400.0
FLAGS = {
    "lead_s": "--prescale-lead",
    "slot_s": "--prescale-slot",
    "timezone": "--prescale-timezone",
    "min_days": "--prescale-min-days",
}


class PrescaleSettings(BaseModel):
    """How `recommend` looks for a pattern and plans ahead of it (flags in FLAGS)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    lead_s: float = Field(default=900.0, description="raise the floor this long before the load rises")
    slot_s: float = Field(default=3600.0, description="scheduling slot: the profile's resolution and the windows' unit")
    timezone: str = Field(default="UTC", description="IANA zone the traffic follows (its hours and its weekdays)")
    min_days: int = Field(default=3, ge=2, description="whole days of history a pattern needs")
    min_explained: float = Field(default=0.5, gt=0, lt=1, description="share of the variance the profile must explain")
    shuffles: int = Field(default=500, ge=100, description="within-day shuffles the profile is held against")
    max_p: float = Field(default=0.01, gt=0, lt=1, description="how often a shuffle may explain as much")

    @field_validator("lead_s")
    @classmethod
    def _whole_minutes(cls, value: float) -> float:
        if value % 60 or not 0 <= value <= 6 * 3600:
            raise ValueError(f"{value:g} s is not whole minutes from 0 to 6 h (KEDA's cron schedules minutes); give e.g. 15m")
        return value

    @field_validator("slot_s")
    @classmethod
    def _divides_a_day(cls, value: float) -> float:
        if value % 60 or not 300 <= value <= 6 * 3600 or DAY_S % value:
            raise ValueError(f"{value:g} s does not split a day into whole-minute slots of 5 min to 6 h; give e.g. 30m or 1h")
        return value

    @field_validator("timezone")
    @classmethod
    def _known_zone(cls, value: str) -> str:
        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(f"{value!r} is not an IANA time zone; give e.g. UTC or Europe/Berlin") from None
        return value

    @property
    def slots(self) -> int:
        return int(DAY_S // self.slot_s)

    @property
    def slot_min(self) -> int:
        return int(self.slot_s // 60)

    @property
    def lead_min(self) -> int:
        return int(self.lead_s // 60)
