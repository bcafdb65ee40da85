"""One front end: Slipway's launcher (`wrappers.launch`) serving on ports its sibling front ends share.

Before the launcher builds MLServer's servers, its REST and metrics servers are made to bind with
SO_REUSEPORT (gRPC's does by default) and the metrics endpoint to sum every front end's multi-process files
(`wrappers.mlserver_compat.shared_ports`). The model's runtime then finds `$SLIPWAY_SESSION_HOST`
(`client`) and sends its runs there. Started by `wrappers.frontends.supervisor`, never by hand.
"""

from __future__ import annotations

from collections.abc import Sequence

from slipway.cli import exit_with


def main(argv: Sequence[str] | None = None) -> int:
    from wrappers import launch
    from wrappers.mlserver_compat import shared_ports

    shared_ports.share_uvicorn_ports()
    shared_ports.serve_metrics_of_all_processes()
    return launch.main(argv)


if __name__ == "__main__":
    exit_with(main)
