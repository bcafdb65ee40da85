"""Typed runtime settings, read once from `model-settings.json` `parameters.extra`.

Unknown keys are refused at load, so a typo in a manifest fails loudly instead of
silently serving with defaults.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

GraphOptimizationLevel = Literal["disable", "basic", "extended", "all"]


class SettingsError(ValueError):
    """`parameters.extra` does not describe valid runtime settings."""


class RuntimeSettings(BaseModel):
    """How the ONNX Runtime session is built and how requests are checked."""

    model_config = ConfigDict(extra="forbid")

    providers: list[str] | None = Field(
        default=None,
        description="Execution providers in order of preference; None picks the best installed.",
    )
    intra_op_threads: int | None = Field(
        default=None, ge=0, description="Threads inside one operator; None derives it from the CPU limit."
    )
    inter_op_threads: int = Field(default=1, ge=0)
    allow_spinning: bool = Field(
        default=True,
        description="Let idle intra-op threads spin: faster for big models, burns CPU the server needs for tiny ones.",
    )
    graph_optimization_level: GraphOptimizationLevel = "all"
    verify_manifest: bool = Field(default=True, description="Check every file against manifest.json at load.")


def parse_runtime_settings(extra: dict[str, Any] | None) -> RuntimeSettings:
    """Validate `parameters.extra`, turning pydantic's report into one readable message."""
    try:
        return RuntimeSettings.model_validate(extra or {})
    except ValidationError as err:
        problems = "; ".join(
            f"{'.'.join(str(part) for part in issue['loc']) or 'extra'}: {issue['msg']}" for issue in err.errors()
        )
        raise SettingsError(f"invalid parameters.extra in model-settings.json: {problems}") from err
