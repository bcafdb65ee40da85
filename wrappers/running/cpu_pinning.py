"""Keep the event loop and gRPC's poller thread on one CPU (`pin_event_loop`).

Why: gRPC's asyncio server hands each finished operation from its poller thread to the event
loop (a byte written to a socket pair, about five per request) and the loop hands new
operations back. On different CPUs, every hand-off at low load must wake an idle CPU first (in
a VM, a halted vCPU the hypervisor has to reschedule); on one CPU the poller blocks and the
loop runs at once: for a tiny model, a share of a gRPC request's latency at low load (docs/internals.md, "The figures behind the modules").

The cost: the loop can no longer move to a less busy CPU, so only pin on CPUs the pod has to
itself (a VM's, or a Guaranteed pod's under the kubelet's static CPU manager policy); on CPUs
shared with other pods a busy neighbour would hold the loop back.
"""

from __future__ import annotations

import logging
import os
import threading

from wrappers import process_state
from wrappers.mlserver_compat.grpc_threads import GRPC_POLLER_TARGET, check_poller_thread, grpc_poller_threads
from wrappers.operations.loaded_models import LoadedModels

logger = logging.getLogger(__name__)

__all__ = ["GRPC_POLLER_TARGET", "check_poller_thread", "pinned_models"]

_before: dict[int, set[int]] = {}  # native thread id -> its CPUs before pinning


def _pin() -> None:
    """Pin the calling thread (the event loop) and gRPC's poller thread, where this process runs one, to
    the last CPU this process may use (once: later models share the pin)."""
    if _before or not hasattr(os, "sched_setaffinity"):
        return
    cpus = os.sched_getaffinity(0)
    if len(cpus) < 2:
        return  # nothing to gain on one CPU
    cpu = max(cpus)  # device interrupts favour the first CPUs
    threads = {"event loop": threading.get_native_id()}
    threads.update((f"gRPC poller ({thread.name})", thread.native_id) for thread in grpc_poller_threads() if thread.native_id)
    for tid in threads.values():
        _before[tid] = os.sched_getaffinity(tid)
        os.sched_setaffinity(tid, {cpu})
    logger.info("pinned to CPU %d: %s", cpu, ", ".join(threads))
    if len(threads) == 1:
        logger.info("no gRPC poller thread in this process: only the event loop is pinned")


def _unpin() -> None:
    """Give each pinned thread its CPUs back."""
    for tid, cpus in _before.items():
        try:
            os.sched_setaffinity(tid, cpus)
        except ProcessLookupError:  # the thread has ended
            pass
    _before.clear()


def pinned_models() -> LoadedModels:
    """The models that asked for the pin: the first pins (from the event loop), the last to leave unpins."""
    return process_state.current().switches.named("cpu_pinning.pinned", install=_pin, uninstall=_unpin)
