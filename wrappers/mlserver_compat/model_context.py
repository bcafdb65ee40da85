"""MLServer's model context: which model the current task loads or answers, for `wrappers.operations.json_logs`.

MLServer 1.7 sets two context variables (`mlserver.context.model_name_var`, `model_version_var`) around each
model's load and inference, and offers no exported way to ask which model a log line belongs to. Only
`mlserver.context` is imported here (and with it MLServer's package, as any MLServer import does).
"""

from __future__ import annotations

from contextvars import ContextVar

from mlserver import context

from wrappers.mlserver_compat import IncompatibleMLServer, require

_CONTEXT = "mlserver.context"
_VARIABLES = ("model_name_var", "model_version_var")


def check_model_context() -> None:
    """MLServer still keeps the current model's name and version in context variables of those names."""
    for name in _VARIABLES:
        if not isinstance(require(context, name, f"{_CONTEXT}.{name}"), ContextVar):
            raise IncompatibleMLServer(f"{_CONTEXT}.{name}", "is not a ContextVar")


def current_model() -> tuple[str, str | None] | None:
    """The (name, version or None) of the model MLServer loads or answers in this task; None outside one.

    Called for every log line: run `check_model_context` once before (`wrappers.operations.json_logs` does, as its formatter
    is built)."""
    name = context.model_name_var.get("")
    if not name:
        return None
    return name, context.model_version_var.get("") or None
