"""Several front ends per model: N MLServer processes on the same ports feed one process that owns the session.

One Python event loop decoding every request cannot keep a GPU busy (the figures: reports/gpu.md). With
`frontends: N` in the model's settings, N serving processes (`supervisor`) decode, check and answer requests, and
hand their rows through shared memory (`ring`, `protocol`, `client`) to one session host (`host`), which merges
them across front ends into runs.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from slipway.runtime_settings import RuntimeSettings, SettingsError, parse_runtime_settings

HOST_SOCKET_ENV = "SLIPWAY_SESSION_HOST"  # where the supervisor tells a front end its host listens
# The pod's front ends, over parameters.extra.frontends: the artifact in the store is immutable, so the
# manifests set it (`python -m deployments render --frontends N`, `deployments.render.frontends`).
FRONTENDS_ENV = "SLIPWAY_FRONTENDS"


def with_pod_frontends(config: RuntimeSettings, environ: Mapping[str, str] = os.environ) -> RuntimeSettings:
    """`config` with `frontends` as $SLIPWAY_FRONTENDS says where it is set (SettingsError, one line, where it is not
    a count from 1 to 64)."""
    text = environ.get(FRONTENDS_ENV, "").strip()
    if not text:
        return config
    try:
        return config.model_copy(update={"frontends": parse_runtime_settings({"frontends": int(text)}).frontends})
    except (ValueError, SettingsError):
        raise SettingsError(
            f"${FRONTENDS_ENV} is {text!r}: set it to a whole number of front ends from 1 to 64, "
            "or unset it to use parameters.extra.frontends"
        ) from None


def supervises(folder: Path) -> bool:
    """Whether the launcher, asked to serve `folder`, should start a host and front ends instead: an artifact folder
    whose settings say `frontends` above 1, in a process that is not itself one of the front ends."""
    if HOST_SOCKET_ENV in os.environ:
        return False
    from wrappers.frontends.supervisor import frontends_of

    return frontends_of(Path(folder)) > 1


def supervise(folder: Path, failure_file: Path | None, ready_file: Path | None = None) -> int:
    """Serve `folder` with its host and front ends until stopped (`supervisor.main`); 0, or a UserError."""
    from wrappers.frontends.supervisor import main

    return main(
        [
            str(folder),
            *(["--failure-file", str(failure_file)] if failure_file else []),
            *(["--ready-file", str(ready_file)] if ready_file else []),
        ]
    )


def shares_ports() -> bool:
    """Whether this process's servers bind with SO_REUSEPORT (a front end: `wrappers.launch --front-end`)."""
    from wrappers.mlserver_compat.shared_ports import sharing

    return sharing()
