"""Where things live: one place that knows the project's folders."""

from __future__ import annotations

import os
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent
REPORTS_DIR = Path(os.environ.get("SLIPWAY_REPORTS_DIR", PROJECT_ROOT / "reports"))
BUILD_DIR = Path(os.environ.get("SLIPWAY_BUILD_DIR", PROJECT_ROOT / "build"))
DEMO_MODEL_NAME = "digits"
DEMO_ARTIFACT_DIR = BUILD_DIR / "artifacts" / DEMO_MODEL_NAME
SHARED_DIR = Path(os.environ.get("SLIPWAY_SHARED_DIR", PROJECT_ROOT.parent / "shared"))
SELDON_CRD_SCHEMA = (
    SHARED_DIR / "schemas" / "seldon-core-v1.17.1" / "seldondeployments.machinelearning.seldon.io.yaml"
)
