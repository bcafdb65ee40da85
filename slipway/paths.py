"""Where things live: one place that knows the project's folders.

Two kinds of place. What Slipway ships (deployments/base, the overlays, loadtest/slo.example.yaml) sits beside its
code under PACKAGE_ROOT, the folder holding the import packages. What Slipway writes (build/, reports/,
model-store/) goes under a working folder:

- run from a checkout (pyproject.toml beside the packages: the Makefile, the tests), the checkout itself, whatever
  the current directory, as it always was; the model store stays ./model-store;
- installed (the packages under site-packages, no checkout), the current directory: beside the code would be
  inside site-packages, which is shared, often read-only, and gone at the next upgrade;
- either way SLIPWAY_WORKDIR, when set (`slipway --workdir DIR` sets it), names that folder instead.

Installed, the folder chosen at import is exported as SLIPWAY_WORKDIR (when it was not already set), so a child
started in another directory (a server, a benchmark's exporter run from the package's folder) still writes where
its parent does, not under its own current directory.
"""

from __future__ import annotations

import os
from pathlib import Path

PACKAGE_ROOT = Path(__file__).resolve().parent.parent  # the checkout, or site-packages when installed
IN_CHECKOUT = (PACKAGE_ROOT / "pyproject.toml").is_file()
# The checkout's root; where installed, the folder holding the packages (its data files, not a place to write).
PROJECT_ROOT = PACKAGE_ROOT

WORKDIR_ENV = "SLIPWAY_WORKDIR"
_GIVEN_WORKDIR = os.environ.get(WORKDIR_ENV)
WORKDIR = Path(_GIVEN_WORKDIR).absolute() if _GIVEN_WORKDIR else PACKAGE_ROOT if IN_CHECKOUT else Path.cwd()
if not IN_CHECKOUT:
    os.environ.setdefault(WORKDIR_ENV, str(WORKDIR))

REPORTS_DIR = Path(os.environ.get("SLIPWAY_REPORTS_DIR", WORKDIR / "reports"))
BUILD_DIR = Path(os.environ.get("SLIPWAY_BUILD_DIR", WORKDIR / "build"))
# Relative to the current directory unless a working folder is given (the store's documented default, ./model-store).
MODEL_STORE_DIR = WORKDIR / "model-store" if _GIVEN_WORKDIR else Path("model-store")
DEMO_MODEL_NAME = "digits"  # the one default model name: the demo's, wherever no artifact or MODEL_NAME says another


def artifact_dir(name: str) -> Path:
    """Where `export convert` writes the artifact of the model called `name` (build/artifacts/NAME)."""
    return BUILD_DIR / "artifacts" / name


DEMO_ARTIFACT_DIR = artifact_dir(DEMO_MODEL_NAME)

# Shipped with the packages (pyproject.toml's [tool.setuptools.package-data]).
EXAMPLE_SLO = PACKAGE_ROOT / "loadtest" / "slo.example.yaml"
# The SeldonDeployment CRD (with its openAPIV3Schema) from the vendored Seldon Core 1.17.1 operator module,
# the same file the local cluster installs (localcluster); SLIPWAY_SELDON_CRD points elsewhere. Only a
# checkout holds localcluster/third_party/: installed, validation skips the CRD schema unless SLIPWAY_SELDON_CRD names one.
SELDON_CRD_SCHEMA = Path(
    os.environ.get(
        "SLIPWAY_SELDON_CRD",
        PROJECT_ROOT
        / "localcluster"
        / "third_party"
        / "seldon-core-operator"
        / "config"
        / "crd"
        / "bases"
        / "machinelearning.seldon.io_seldondeployments.yaml",
    )
)
