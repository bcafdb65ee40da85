"""The one owner of the serving process's registries: made once by the launcher, reached by models through `current()`.

What a process serves with beyond one model (the metric series it created, the shared-memory regions clients
registered, the REST body limit sized at each load, the switches models turn on, the body threads) lives in one
`ProcessState`, not in module globals: the launcher (`wrappers.launch`) begins it before MLServer builds anything,
the runtimes and the request paths reach it through `current()`, and a test makes a fresh one (`replaced`) instead
of resetting globals by hand. A process the launcher did not start (an MLServer worker, a front end) gets one at
first use.
It imports nothing of MLServer: the pure modules whose state it holds stay importable without a server.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field

from wrappers.limits.body_budget import BodyLimit
from wrappers.operations.loaded_models import Switches
from wrappers.operations.metrics import MetricSeries
from wrappers.shm.regions import Regions


def _two_threads(prefix: str) -> ThreadPoolExecutor:
    return field(default_factory=lambda: ThreadPoolExecutor(max_workers=2, thread_name_prefix=prefix))


@dataclass(frozen=True)
class ProcessState:
    """The process-wide registries, each an object of its own module's kind; the fields never change, what they
    hold does."""

    metrics: MetricSeries = field(default_factory=MetricSeries)
    regions: Regions = field(default_factory=Regions)  # the shared-memory regions clients registered
    body_limit: BodyLimit = field(default_factory=BodyLimit)  # the REST bodies admitted, sized at each load
    switches: Switches = field(default_factory=Switches)  # which loaded models turned each fast path or pin on
    # Bounds on what request bodies make the process hold: two inflate at a time (`body_layer`), two large JSON
    # bodies are parsed or answers written at a time (`rest_infer`); others wait their turn. Threads start at use.
    inflaters: ThreadPoolExecutor = _two_threads("slipway-inflate")
    json_threads: ThreadPoolExecutor = _two_threads("slipway-json")


_current: list[ProcessState] = []  # the one state of this process, once begun (a list: set without `global`)
_beginning = threading.Lock()  # two threads' first use must not make two: the second would register every series again


def begin(state: ProcessState | None = None) -> ProcessState:
    """This process's state, made now (the launcher's call, before any model loads) unless one was begun already."""
    with _beginning:
        if not _current:
            _current.append(state if state is not None else ProcessState())
        return _current[0]


def current() -> ProcessState:
    """This process's state: the launcher's, or one made at first use where no launcher began one."""
    return _current[0] if _current else begin()


@contextmanager
def replaced(state: ProcessState) -> Iterator[ProcessState]:
    """Serve with `state` (a fresh one, in a test) until the block ends, then with the previous one again."""
    previous = list(_current)
    _current[:] = [state]
    try:
        yield state
    finally:
        _current[:] = previous
