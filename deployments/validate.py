"""Validate rendered manifests before any cluster sees them.

Three layers: the SeldonDeployment CRD's own `v1` OpenAPI schema (jsonschema), the
Kubernetes schemas for core kinds (`kubernetes-validate --strict`, several versions),
and Seldon's rules that no schema states (protocol v2, the container named as the
graph node, traffic adding up to 100, requests where an HPA scales).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from slipway.paths import SELDON_CRD_SCHEMA

KUBERNETES_VERSIONS = ("1.29.0", "1.33.0")
SELDON_API = "machinelearning.seldon.io/v1"


@dataclass
class ValidationReport:
    checked: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.errors

    def as_dict(self) -> dict:
        return {"ok": self.ok, "checked": self.checked, "errors": self.errors, "skipped": self.skipped}


def load_crd_schema(path: Path = SELDON_CRD_SCHEMA) -> dict[str, Any] | None:
    """The `v1` openAPIV3Schema of the SeldonDeployment CRD, or None when the file is absent."""
    if not Path(path).is_file():
        return None
    crd = yaml.safe_load(Path(path).read_text())
    for version in crd["spec"]["versions"]:
        if version["name"] == "v1":
            return version["schema"]["openAPIV3Schema"]
    raise ValueError(f"{path} has no v1 version")


def seldon_rule_errors(doc: dict[str, Any]) -> list[str]:
    """Seldon Core's own rules for a SeldonDeployment that serves through MLServer."""
    name = doc.get("metadata", {}).get("name", "?")
    spec = doc.get("spec", {})
    errors = []
    if spec.get("protocol") != "v2":
        errors.append(f"{name}: spec.protocol must be v2 (Open Inference Protocol), got {spec.get('protocol')!r}")
    predictors = spec.get("predictors", [])
    if not predictors:
        errors.append(f"{name}: spec.predictors is empty")
    traffic = [p.get("traffic") for p in predictors]
    if len(predictors) > 1 or any(t is not None for t in traffic):
        if sum(t or 0 for t in traffic) != 100:
            errors.append(f"{name}: predictor traffic must add up to 100, got {traffic}")
    for predictor in predictors:
        where = f"{name}/{predictor.get('name')}"
        graph_name = predictor.get("graph", {}).get("name")
        containers = [c for component in predictor.get("componentSpecs", []) for c in component.get("spec", {}).get("containers", [])]
        if graph_name not in {c.get("name") for c in containers}:
            errors.append(f"{where}: no container is named {graph_name!r} like graph.name, so Seldon would not run our image")
        for component in predictor.get("componentSpecs", []):
            if component.get("hpaSpec") or component.get("kedaSpec"):
                for container in component.get("spec", {}).get("containers", []):
                    requests = container.get("resources", {}).get("requests", {})
                    missing = [r for r in ("cpu", "memory") if r not in requests]
                    if missing:
                        errors.append(
                            f"{where}: container {container.get('name')!r} has no {'/'.join(missing)} request; "
                            "an autoscaler cannot compute utilization without it"
                        )
    return errors


def validate_documents(docs: list[dict[str, Any]], *, crd_schema: dict | None = None, crd_path: Path = SELDON_CRD_SCHEMA) -> ValidationReport:
    """Validate every rendered resource; errors name the resource and the field."""
    import jsonschema
    import kubernetes_validate

    report = ValidationReport()
    schema = crd_schema if crd_schema is not None else load_crd_schema(crd_path)
    for doc in docs:
        label = f"{doc.get('kind')}/{doc.get('metadata', {}).get('name')}"
        if doc.get("apiVersion") == SELDON_API:
            if schema is None:
                report.skipped.append(f"{label}: CRD schema not found at {crd_path}; set SLIPWAY_SHARED_DIR")
            else:
                for error in jsonschema.Draft7Validator(schema).iter_errors(doc):
                    report.errors.append(f"{label}: {'.'.join(map(str, error.absolute_path)) or '<root>'}: {error.message}")
            report.errors.extend(seldon_rule_errors(doc))
            report.checked.append(f"{label} (CRD v1 schema, Seldon rules)")
            continue
        for version in KUBERNETES_VERSIONS:
            try:
                kubernetes_validate.validate(doc, version, strict=True)
            except kubernetes_validate.ValidationError as err:
                path = ".".join(map(str, err.path)) or "<root>"
                report.errors.append(f"{label}: Kubernetes {version}: {path}: {err.message}")
            except kubernetes_validate.SchemaNotFoundError:
                report.errors.append(f"{label}: Kubernetes {version} has no schema for {doc.get('apiVersion')} {doc.get('kind')}")
        report.checked.append(f"{label} (Kubernetes {', '.join(KUBERNETES_VERSIONS)} strict)")
    return report

