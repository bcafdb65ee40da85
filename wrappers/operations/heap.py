"""Heap freezing: what a load leaves alive is kept out of Python's full collections, and let back in at unload.

Full collections run on the event loop: before freezing, each one walked the modules, MLServer, ONNX
Runtime's bindings and the models, all of which live as long as the server, with no request answered meanwhile
(the pause, before and after: docs/internals.md). An unload must thaw the
heap, or the unloaded model, alive in its own reference cycles, would never be freed.
"""

from __future__ import annotations

import asyncio
import gc
import logging

logger = logging.getLogger(__name__)

REFREEZE_AFTER_UNLOAD_S = 1.0


def freeze_loaded_heap() -> None:
    """Freeze everything alive now, having collected first so that no cyclic garbage is frozen with it
    (reference counting still frees frozen objects)."""
    gc.collect()
    gc.freeze()
    logger.info("%d objects alive after loading frozen out of the garbage collector's passes", gc.get_freeze_count())


def thaw_heap_after_unload() -> None:
    """Let the collector reach what the last load froze, then freeze the rest again a moment later.

    An unloaded model is kept alive by its own reference cycles (the run slots' bound methods, say):
    frozen, it and its ONNX Runtime session would never be freed. By the time the heap is frozen
    again, MLServer has let go of the model, and the collection before the freeze frees it.
    """
    gc.unfreeze()
    asyncio.get_running_loop().call_later(REFREEZE_AFTER_UNLOAD_S, freeze_loaded_heap)
