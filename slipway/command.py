"""`slipway`: one command in front of the packages' own (`python -m export`, `wrappers`, `loadtest`, `deployments`,
`benchmarks`).

Each subcommand hands its arguments, untouched, to the package command that does the work, so
`slipway serve --port ...` and `python -m wrappers serve --port ...` are the same program; the Make
targets stay the short way to both. `slipway SUBCOMMAND --help` shows that command's options and
defaults.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from slipway import cli

# The name on PyPI (pyproject's [project] name): `slipway` there is another project's (a dev-container CLI).
DISTRIBUTION = "slipway-serving"
WORKDIR_ENV = "SLIPWAY_WORKDIR"  # slipway.paths reads it (not imported here: it must read it after --workdir)


@dataclass(frozen=True)
class Subcommand:
    name: str
    module: str  # the package whose command line (CLI_MODULES[module].main) runs it
    first: tuple[str, ...]  # arguments put before the user's (that package's subcommand)
    help: str


# The only lazy-import table: each package's command line, imported when its subcommand is chosen, so that
# `slipway --help` imports none of them (nor TensorFlow, ONNX Runtime or MLServer behind them). Each module has
# `main(argv)`, and `register(subparsers)` adding its subcommands; its `python -m` shim (__main__.py) calls that main.
CLI_MODULES = {
    "export": "export.cli",
    "wrappers": "wrappers.cli",
    "loadtest": "loadtest.cli",
    "deployments": "deployments.cli",
    "benchmarks": "benchmarks.cli",
    "slipway": "slipway.__main__",
}

SUBCOMMANDS = (
    Subcommand(
        "export", "export", (), "train, convert, variants, import an ONNX model, profile, bench-export (python -m export)"
    ),
    Subcommand(
        "versions", "export", ("versions",), "the model store: publish, list, show, promote, rollback, diff, history, gc, verify"
    ),
    Subcommand("serve", "wrappers", ("serve",), "serve an artifact folder with MLServer in the foreground (make serve)"),
    Subcommand("smoke", "loadtest", ("smoke",), "start MLServer on an artifact, check REST and gRPC answers, stop it"),
    Subcommand("loadtest", "loadtest", ("run",), "load-test a V2 endpoint with Locust and gate it on an SLO (make loadtest)"),
    Subcommand("tune", "loadtest", ("tune",), "search serving settings by real step loads (make tune)"),
    Subcommand("tune-check", "loadtest", ("tune-check",), "measure the whole grid and check the tuner against it"),
    Subcommand("recommend", "deployments", ("recommend",), "requests, limits and HPA replicas from usage history"),
    Subcommand("render", "deployments", ("render",), "render and validate the manifests (make manifests)"),
    Subcommand("deploy", "deployments", ("deploy",), "upload, verify, apply to the current context, wait (make deploy)"),
    Subcommand("upload", "deployments", ("upload",), "upload a version to its modelUri and verify it"),
    Subcommand("secret", "deployments", ("secret",), "write the storage Secret the pods pull with"),
    Subcommand("undeploy", "deployments", ("undeploy",), "delete what deploy applied for one model"),
    Subcommand("shadow", "deployments", ("shadow",), "run a new version as a shadow beside the serving one (make shadow)"),
    Subcommand(
        "canary", "deployments", ("canary",), "SLO-gated canary: step traffic up, then promote or roll back (make canary)"
    ),
    Subcommand("canary-judge", "deployments", ("canary-judge",), "judge a canary against the stable predictor from Prometheus"),
    Subcommand("alerts", "deployments", ("alerts",), "Prometheus alerts from an SLO file (make alerts)"),
    Subcommand("image", "deployments", ("image",), "build the serving image without Docker (buildah), push it (make image)"),
    Subcommand("deployments", "deployments", (), "every deployments command (python -m deployments)"),
    Subcommand(
        "bench",
        "benchmarks",
        ("serving",),
        "serving benchmark: raw ONNX Runtime vs plain MLServer vs Slipway's runtime (make bench)",
    ),
    Subcommand("bench-peers", "benchmarks", ("peers",), "Slipway's runtime vs KServe vs PyTriton, one client (make bench-peers)"),
    Subcommand("bench-gpu", "benchmarks", ("gpu",), "CPU vs CUDA vs TensorRT on this machine's GPU (make bench-gpu)"),
    Subcommand(
        "bench-keras",
        "benchmarks",
        ("keras-corpus",),
        "every Keras corpus model: convert time, parity, size, rows/s per variant (make bench-keras)",
    ),
    Subcommand("summary", "slipway", ("summary",), "what each step of the demo produced, from reports/"),
)

# What a checkout's development packages do, which the wheel does not ship: said where they run, not "no subcommand".
CHECKOUT_ONLY = {
    "cluster": "the local cluster is a development tool of a Slipway checkout: clone the repository and run "
    "`make cluster` there (python -m localcluster)",
}

# Read by the commands (where they are read: see docs/); listed in `slipway --help`.
ENVIRONMENT = (
    (
        "SLIPWAY_WORKDIR",
        "the working folder build/, reports/ and model-store/ go in (what --workdir sets; default: "
        "the checkout Slipway runs from, else the current directory)",
    ),
    ("SLIPWAY_REPORTS_DIR", "where reports go (default: reports/ in the working folder)"),
    ("SLIPWAY_BUILD_DIR", "where build outputs go (default: build/ in the working folder)"),
    ("SLIPWAY_EXPECTED_DIGESTS", "serve: pin versions' digests, NAME:VERSION=sha256:HEX,..."),
    ("SLIPWAY_TENSORRT_CACHE_DIR", "serve: TensorRT engine and timing caches (the gpu overlay sets it)"),
    ("SLIPWAY_FRONTENDS", "serve: front ends per model folder, over its frontends setting (render --frontends sets it)"),
    ("SLIPWAY_REPOSITORY_API", "serve: MLServer's repository API, closed (default) or open"),
    ("SLIPWAY_REPOSITORY_TOKEN", "serve: the bearer token the open repository API admits"),
    ("SLIPWAY_SELDON_CRD", "render: the SeldonDeployment CRD to validate against"),
    ("SLIPWAY_CLUSTER_DIR", "deploy, undeploy: where a checkout's local cluster (make cluster) runs (default build/cluster)"),
    (
        "SLIPWAY_CLUSTER_CACHE",
        "render --engine kserve: the local cluster's build cache with KServe's CRDs (default ~/.cache/slipway/cluster)",
    ),
    (
        "KUBECONFIG",
        "deploy, undeploy, canary, shadow; alerts and recommend without --model (to find the deployed one): the "
        "cluster (else the local cluster's while it runs, else ~/.kube/config)",
    ),
    (
        "AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, AWS_REGION, AWS_ENDPOINT_URL",
        "secret, upload: S3 credentials",
    ),
    ("GOOGLE_APPLICATION_CREDENTIALS", "secret --scheme gs: GCS credentials"),
    ("DOCKER_CONFIG", "deploy --check-image: the registry credentials docker login wrote"),
    (
        "PROMETHEUS_URL, PROMETHEUS_TOKEN, PROMETHEUS_USERNAME, PROMETHEUS_PASSWORD",
        "recommend, canary-judge: the Prometheus to read",
    ),
)


def version() -> str:
    """The installed distribution's version (the checkout's pyproject.toml where it is not installed)."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed_version

    try:
        return installed_version(DISTRIBUTION)
    except PackageNotFoundError:
        return "unknown (not installed: pip install -e . in the checkout)"


def usage() -> str:
    width = max(len(sub.name) for sub in SUBCOMMANDS)
    lines = [
        "usage: slipway [--version] [--help] [--workdir DIR] SUBCOMMAND [ARGS...]",
        "",
        "Take a trained Keras or ONNX model to a load-tested, autoscaled Seldon Core deployment.",
        "`slipway SUBCOMMAND --help` lists a subcommand's options and their defaults.",
        "",
        "options:",
        "  --workdir DIR  the folder build/, reports/ and model-store/ go in (default: the checkout Slipway runs",
        "                 from, else the current directory; never site-packages). Sets SLIPWAY_WORKDIR.",
        "",
        "subcommands:",
        *(f"  {sub.name:<{width}}  {sub.help}" for sub in SUBCOMMANDS),
        "",
        "environment variables:",
        *(f"  {name}\n      {meaning}" for name, meaning in ENVIRONMENT),
        "",
        "The model store is model-store/ in the --workdir folder (else ./model-store) unless --store says otherwise.",
        "Documentation: docs/ in the repository (`make docs` builds it into build/site).",
    ]
    return "\n".join(lines)


def _take_workdir(argv: Sequence[str]) -> tuple[Path | None, list[str]]:
    """`--workdir DIR` (or `--workdir=DIR`) from the front of argv, and the rest."""
    rest = list(argv)
    if rest and rest[0].startswith("--workdir="):
        return Path(rest[0].partition("=")[2]), rest[1:]
    if rest and rest[0] == "--workdir":
        if len(rest) < 2:
            raise cli.UserError("--workdir needs a folder: `slipway --workdir DIR SUBCOMMAND ...`")
        return Path(rest[1]), rest[2:]
    return None, rest


def use_workdir(workdir: Path) -> None:
    """Export `--workdir` as SLIPWAY_WORKDIR before any package reads slipway.paths (which reads it once, at import).

    Children inherit it, so a server or exporter started in another directory writes there too.
    """
    if not workdir.is_dir():
        raise cli.UserError(f"--workdir {workdir} is not a folder: create it (mkdir -p {workdir}) or give another")
    workdir = workdir.absolute()
    loaded = sys.modules.get("slipway.paths")
    if loaded is not None and loaded.WORKDIR != workdir:
        raise RuntimeError(
            f"slipway.paths was imported (working folder {loaded.WORKDIR}) before --workdir {workdir} "
            f"was read: run `slipway --workdir` as its own process, or set SLIPWAY_WORKDIR before "
            f"importing Slipway"
        )
    os.environ[WORKDIR_ENV] = str(workdir)


def dispatch(argv: Sequence[str] | None) -> int:
    workdir, argv = _take_workdir(argv or [])
    if workdir is not None:
        use_workdir(workdir)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(usage())
        return 0
    if argv[0] == "--version":
        print(f"slipway {version()}")
        return 0
    chosen = next((sub for sub in SUBCOMMANDS if sub.name == argv[0]), None)
    if chosen is None and argv[0] in CHECKOUT_ONLY:
        raise cli.UserError(CHECKOUT_ONLY[argv[0]])
    if chosen is None:
        names = ", ".join(sub.name for sub in SUBCOMMANDS)
        raise cli.UserError(f"slipway has no subcommand {argv[0]!r}: choose one of {names} (see `slipway --help`)")
    prog_of_package = f"python -m {chosen.module}"
    # The package's parser calls itself "python -m wrappers serve"; the user typed "slipway serve".
    cli.PROG_RENAMES.clear()
    cli.PROG_RENAMES[" ".join((prog_of_package, *chosen.first))] = f"slipway {chosen.name}"
    if not chosen.first:
        cli.PROG_RENAMES[prog_of_package] = f"slipway {chosen.name}"
    package_main = importlib.import_module(CLI_MODULES[chosen.module]).main
    return int(package_main([*chosen.first, *argv[1:]]) or 0)


def main(argv: Sequence[str] | None = None) -> None:
    """The console script's entry point."""
    sys.exit(cli.run(dispatch, list(sys.argv[1:] if argv is None else argv)))


if __name__ == "__main__":
    main()
