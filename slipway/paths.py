"""Where things live: one place that knows the project's folders."""

from __future__ import annotations

import os
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent
REPORTS_DIR = Path(os.environ.get("SLIPWAY_REPORTS_DIR", PROJECT_ROOT / "reports"))
BUILD_DIR = Path(os.environ.get("SLIPWAY_BUILD_DIR", PROJECT_ROOT / "build"))
DEMO_MODEL_NAME = "digits"
DEMO_ARTIFACT_DIR = BUILD_DIR / "artifacts" / DEMO_MODEL_NAME
# The SeldonDeployment CRD (with its openAPIV3Schema) from the vendored Seldon Core 1.17.1 operator module,
# the same file the local cluster installs (deployments/cluster); SLIPWAY_SELDON_CRD points elsewhere.
SELDON_CRD_SCHEMA = Path(os.environ.get("SLIPWAY_SELDON_CRD", PROJECT_ROOT / "third_party" / "seldon-core-operator"
                                        / "config" / "crd" / "bases" / "machinelearning.seldon.io_seldondeployments.yaml"))
