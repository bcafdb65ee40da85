"""MLServer's adaptive batching, as a runtime sees it from inside `load`.

MLServer 1.7 turns adaptive batching on (`max_batch_size`, `max_batch_time`) by setting a private
`__adaptive_batching__` attribute on the model and replacing its `predict` with one that queues for the
batcher, both before `load` runs, and tells the model nothing. The runtime must know (merged requests lose
their raw arrays) and checks each request before it is merged (a bad one must not fail its neighbours).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from mlserver.batching import hooks

from wrappers.mlserver_compat import IncompatibleMLServer, require, require_function

_HOOKS = "mlserver.batching.hooks"
ADAPTIVE_BATCHING_ATTR = "__adaptive_batching__"


def check_adaptive_batching() -> None:
    """MLServer still marks a batched model with `__adaptive_batching__` and replaces its `predict` there."""
    if require(hooks, "_AdaptiveBatchingAttr", f"{_HOOKS}._AdaptiveBatchingAttr") != ADAPTIVE_BATCHING_ATTR:
        raise IncompatibleMLServer(f"{_HOOKS}._AdaptiveBatchingAttr", f"is no longer {ADAPTIVE_BATCHING_ATTR!r}")
    load_batching = require_function(hooks, "load_batching", f"{_HOOKS}.load_batching", ("model",), is_async=True)
    names = set(load_batching.__code__.co_names)
    if not {"_AdaptiveBatchingAttr", "adaptive_batching", "setattr"} <= names:
        raise IncompatibleMLServer(f"{_HOOKS}.load_batching", "no longer sets the marker and wraps predict")


def uses_adaptive_batching(model: object) -> bool:
    """Whether MLServer serves `model` through its adaptive batcher (known from `load` on)."""
    check_adaptive_batching()
    return getattr(model, ADAPTIVE_BATCHING_ATTR, None) is not None


def check_before_batching(model: Any, check: Callable[[Any], Any]) -> None:
    """Run `check(payload)` on each request before MLServer's batcher queues it (a model it batches); `check`
    may change the payload, and raises to refuse it alone."""
    batched_predict: Callable[[Any], Awaitable[Any]] = model.__dict__.get("predict")
    if batched_predict is None:
        raise IncompatibleMLServer(f"{_HOOKS}.load_batching", "did not replace the model's predict")

    async def predict(payload: Any) -> Any:
        check(payload)
        return await batched_predict(payload)

    model.predict = predict
