"""`make lock`: constraints.txt, the versions `make setup` and both images install (`pip install -c constraints.txt`).

Why not one `uv pip compile --universal`: a universal resolution picks versions by their metadata, not by the
wheels each platform has, and pinned gevent 26.9.0 (Linux wheels only) for macOS, where `serve` then cannot
install without a compiler. So each platform Slipway installs on is resolved on its own, wheels only, by
`uv pip compile --python-platform`, and the answers are merged: a package at one version everywhere is one line,
one that differs gets a line per version with the markers of the environments that take it.

Pins already in constraints.txt are kept unless the extras no longer allow them (uv reads an output file's pins
as preferences); `--upgrade` (`make lock UPGRADE=1`) moves every pin to the newest version allowed.
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from slipway import atomic
from slipway.cli import ArgumentParser, UserError, exit_with
from slipway.paths import IN_CHECKOUT, PROJECT_ROOT

LOCK_FILE = PROJECT_ROOT / "constraints.txt"
# Every extra but `torch` (a CUDA build of several GB that no default set-up installs).
EXTRAS = ("serve", "gpu", "export", "cloud", "loadtest", "deploy", "dev")
PYTHONS = ("3.11", "3.12")  # pyproject's requires-python: >=3.11,<3.13
# onnxruntime 1.31's macOS wheels are for macOS 14 (Sonoma) and newer.
MACOS_TARGET = "14.0"


@dataclass(frozen=True, eq=False)  # compared and hashed by identity: PLATFORMS holds each once
class Platform:
    name: str
    uv_platform: str  # uv pip compile --python-platform
    marker: str  # the PEP 508 marker that selects it
    environment: dict[str, str]  # marker variables, for evaluating requirements as this platform would
    extras: tuple[str, ...]


PLATFORMS = (
    Platform(
        "linux-x86_64",
        "x86_64-manylinux_2_28",
        "sys_platform == 'linux'",
        {"sys_platform": "linux", "platform_system": "Linux", "platform_machine": "x86_64", "os_name": "posix"},
        EXTRAS,
    ),
    # No `gpu` extra: onnxruntime-gpu has no macOS wheels (the GPU image is Linux).
    Platform(
        "macos-arm64",
        "aarch64-apple-darwin",
        "sys_platform == 'darwin'",
        {"sys_platform": "darwin", "platform_system": "Darwin", "platform_machine": "arm64", "os_name": "posix"},
        tuple(extra for extra in EXTRAS if extra != "gpu"),
    ),
)


@dataclass(frozen=True)
class Environment:
    platform: Platform
    python: str

    @property
    def marker(self) -> str:
        return f"{self.platform.marker} and python_version == '{self.python}'"

    @property
    def variables(self) -> dict[str, str]:
        return {**self.platform.environment, "python_version": self.python, "python_full_version": f"{self.python}.0"}


ENVIRONMENTS = tuple(Environment(platform, python) for platform in PLATFORMS for python in PYTHONS)
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;]+)\s*(?:;\s*(.+))?$")


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def read_pins(text: str) -> list[tuple[str, str, str | None]]:
    """(name, version, marker or None) of each `name==version [; marker]` line; comments and blank lines skipped."""
    pins = []
    for line in text.splitlines():
        line = line.split(" #")[0].strip()
        if not line or line.startswith("#"):
            continue
        found = _PIN.match(line)
        if found is None:
            raise ValueError(f"not a pin: {line!r} (constraints.txt holds `name==version [; marker]` lines: `make lock`)")
        pins.append((found[1], found[2], found[3]))
    return pins


def pins_for(text: str, environment: Environment) -> list[str]:
    """The `name==version` lines of a lock that apply in `environment`: uv's preferences for resolving it again."""
    from packaging.markers import Marker

    return [
        f"{name}=={version}"
        for name, version, marker in read_pins(text)
        if marker is None or Marker(marker).evaluate(environment.variables)
    ]


def resolve(environment: Environment, *, previous: str, upgrade: bool) -> dict[str, str]:
    """Every package the extras bring on one platform and Python, wheels only: canonical name -> version."""
    from uv import find_uv_bin

    with tempfile.TemporaryDirectory() as scratch:
        output = Path(scratch) / "pins.txt"
        output.write_text("" if upgrade else "\n".join(pins_for(previous, environment)) + "\n")
        command = [
            find_uv_bin(),
            "pip",
            "compile",
            str(PROJECT_ROOT / "pyproject.toml"),
            "--quiet",
            "--no-header",
            "--no-annotate",
            "--only-binary",
            ":all:",
            "--python-platform",
            environment.platform.uv_platform,
            "--python-version",
            environment.python,
            "--output-file",
            str(output),
            *(option for extra in environment.platform.extras for option in ("--extra", extra)),
            *(["--upgrade"] if upgrade else []),
        ]
        result = subprocess.run(
            command,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
            env={**os.environ, "MACOSX_DEPLOYMENT_TARGET": MACOS_TARGET},
        )
        if result.returncode != 0:
            raise UserError(
                f"the extras do not resolve with wheels only on {environment.platform.name}, Python "
                f"{environment.python}: {result.stderr.strip()[-1500:]} -- loosen or pin the requirement "
                f"it names in pyproject.toml, then `make lock` again"
            )
        return {canonical(name): version for name, version, _ in read_pins(output.read_text())}


def merge(resolved: dict[Environment, dict[str, str]]) -> list[str]:
    """One line per package and version: no marker where every environment agrees, else the environments' markers
    (a platform's own marker where all its Pythons agree)."""
    lines = []
    for name in sorted({name for pins in resolved.values() for name in pins}):
        versions = {environment: pins[name] for environment, pins in resolved.items() if name in pins}
        if len(versions) == len(resolved) and len(set(versions.values())) == 1:
            lines.append(f"{name}=={next(iter(versions.values()))}")
            continue
        for version in sorted(set(versions.values())):
            taking = [environment for environment, chosen in versions.items() if chosen == version]
            markers = []
            for platform in PLATFORMS:
                of_platform = [environment for environment in taking if environment.platform == platform]
                if len(of_platform) == len(PYTHONS):
                    markers.append(platform.marker)
                else:
                    markers += [environment.marker for environment in of_platform]
            joined = markers[0] if len(markers) == 1 else " or ".join(f"({marker})" for marker in markers)
            lines.append(f"{name}=={version} ; {joined}")
    return lines


HEADER = """\
# Pinned versions of every package Slipway's extras bring ({extras}; not `torch`), resolved per platform with
# wheels only ({platforms}; Python {pythons}). `make setup` and both images install with `-c constraints.txt`.
# Generated by `make lock` (slipway/lock.py); `make lock UPGRADE=1` moves the pins to the newest allowed versions.
"""


def main(argv: Sequence[str] | None = None) -> int:
    parser = ArgumentParser(prog="python -m slipway.lock", description=__doc__.splitlines()[0])
    parser.add_argument("--upgrade", action="store_true", help="the newest versions the extras allow, not the current pins")
    parser.add_argument("--output", type=Path, default=LOCK_FILE, help=f"default {LOCK_FILE.name} in the checkout")
    args = parser.parse_args(argv)
    if not IN_CHECKOUT:
        raise UserError("the lock is made from a checkout's pyproject.toml: clone Slipway's repository and run `make lock` there")
    previous = args.output.read_text() if args.output.is_file() else ""
    resolved = {environment: resolve(environment, previous=previous, upgrade=args.upgrade) for environment in ENVIRONMENTS}
    header = HEADER.format(
        extras=", ".join(EXTRAS), platforms=", ".join(platform.name for platform in PLATFORMS), pythons=", ".join(PYTHONS)
    )
    atomic.write_text(args.output, header + "\n".join(merge(resolved)) + "\n")
    print(
        f"{args.output}: {len(resolved[ENVIRONMENTS[0]])} packages on {ENVIRONMENTS[0].platform.name}, "
        f"Python {ENVIRONMENTS[0].python}; {len(ENVIRONMENTS)} platform and Python pairs resolved"
    )
    return 0


if __name__ == "__main__":
    exit_with(main)
