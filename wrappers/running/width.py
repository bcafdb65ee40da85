"""How many threads a run gets: all of the lone width while it runs alone, one (the busy width) once others run.

An operator split over N intra-op threads does less than N times the work, so under load runs side by side on
one thread each serve more rows per CPU second, while a lone request is fastest on every core. ONNX Runtime fixes
a session's intra-op threads when it is built, so a model with `busy_intra_op_threads` set gets two sessions:
`WidthRunner` sends a run to the wide one when no other run is in flight, else to the narrow one.
"""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np

from engine.runner import SessionRunner
from engine.session import create_session, session_options
from slipway.runtime_settings import RuntimeSettings


class WidthRunner:
    """Two runners of one model: `wide` for a run that starts alone, `narrow` for one that starts beside others.
    Reads like a `SessionRunner` (the wide one's session, device and options) to the rest of the runtime."""

    def __init__(self, wide: SessionRunner, narrow: SessionRunner):
        self.wide, self.narrow = wide, narrow
        self.session, self.device = wide.session, wide.device
        self.uses_io_binding, self.fixed_outputs = wide.uses_io_binding, wide.fixed_outputs
        self._lock = threading.Lock()
        self._running = 0

    def run(self, output_names: list[str], feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        with self._lock:
            alone = self._running == 0
            self._running += 1
        try:
            return (self.wide if alone else self.narrow).run(output_names, feeds)
        finally:
            with self._lock:
                self._running -= 1

    def parts(self) -> tuple[SessionRunner, ...]:
        """Both runners: warm-up runs each on every run slot's thread."""
        return self.wide, self.narrow


def runner(model_path: Path, config: RuntimeSettings, *, wide: SessionRunner | None = None) -> SessionRunner | WidthRunner:
    """The session(s) for `config`: a second, narrower one on the CPU where `busy_intra_op_threads` asks for fewer
    threads than a lone run gets (on a GPU the intra-op threads only feed the device: one session). `wide`: a
    session already built as `config` would build it, kept instead of built again."""
    wide = wide or SessionRunner(create_session(model_path, config), io_binding=config.io_binding)
    busy = config.busy_intra_op_threads
    if not busy or wide.device != "cpu" or busy >= session_options(config).intra_op_num_threads:
        return wide
    narrow = SessionRunner(
        create_session(model_path, config.model_copy(update={"intra_op_threads": busy})), io_binding=config.io_binding
    )
    return WidthRunner(wide, narrow)


def rebuilt(
    model_path: Path, config: RuntimeSettings, previous: SessionRunner | WidthRunner, *, keep_lone_session: bool
) -> SessionRunner | WidthRunner:
    """The session(s) for `config` in place of `previous`, keeping its lone session where that already is what
    `config` builds (`keep_lone_session`, as `wrappers.defaults.resolve` says)."""
    return runner(model_path, config, wide=previous.parts()[0] if keep_lone_session else None)
