"""`python -m wrappers.mlserver_compat`: check every extension point against the installed MLServer.

Nothing is patched; the exit status is 1 where any extension point has moved. Run it on a new MLServer
release before changing the pin in pyproject.toml.
"""

from __future__ import annotations

import sys

from wrappers.mlserver_compat import check_all, mlserver_version


def main() -> int:
    problems = check_all()
    print(f"MLServer {mlserver_version()}: {len(problems)} extension points")
    for name, problem in problems.items():
        print(f"  {'ok    ' if problem is None else 'BROKEN'} {name}" + (f": {problem}" if problem else ""))
    return 1 if any(problems.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
