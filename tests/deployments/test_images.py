"""The serving images, checked as far as a machine without Docker allows: what goes in, who runs it."""

from __future__ import annotations

import re
from importlib import metadata

import pytest
import yaml
from packaging.requirements import Requirement

from deployments.render.overlay import DEPLOYMENTS_DIR
from slipway.command import DISTRIBUTION

IMAGES = {"cpu": DEPLOYMENTS_DIR / "images" / "cpu.Dockerfile", "gpu": DEPLOYMENTS_DIR / "images" / "gpu.Dockerfile"}


def _final_stage(text: str) -> str:
    return text[text.rindex("\nFROM ") :]


def _manifest_user() -> int:
    sdep = yaml.safe_load((DEPLOYMENTS_DIR / "base" / "seldondeployment.yaml").read_text())
    return sdep["spec"]["predictors"][0]["componentSpecs"][0]["spec"]["securityContext"]["runAsUser"]


@pytest.mark.parametrize("image", IMAGES)
def test_images_run_as_the_manifests_non_root_user(image):
    final = _final_stage(IMAGES[image].read_text())
    users = re.findall(r"^USER\s+(\S+)", final, re.MULTILINE)
    assert users == [f"{_manifest_user()}:{_manifest_user()}"]
    assert re.search(r"^CMD \[\"python\", \"-m\", \"wrappers.launch\", \"/mnt/models\"\]", final, re.MULTILINE)


def test_the_images_and_the_manifests_run_slipways_launcher_on_the_storage_initializers_folder():
    """Seldon runs a custom graph container with the manifest's args (the image's CMD where there are none): both
    start the launcher, never `mlserver start`, which hands the runtime neither of MLServer's servers."""
    sdep = yaml.safe_load((DEPLOYMENTS_DIR / "base" / "seldondeployment.yaml").read_text())
    container = sdep["spec"]["predictors"][0]["componentSpecs"][0]["spec"]["containers"][0]
    assert container["args"] == ["python", "-m", "wrappers.launch", "/mnt/models"]
    assert "command" not in container
    for dockerfile in IMAGES.values():
        assert 'CMD ["python", "-m", "wrappers.launch", "/mnt/models"]' in dockerfile.read_text()


@pytest.mark.parametrize("image, extra", [("cpu", "serve"), ("gpu", "gpu")])
def test_images_install_only_the_serving_code_and_extra(image, extra):
    text = IMAGES[image].read_text()
    instructions = "\n".join(line for line in text.splitlines() if not line.startswith("#"))
    assert "tensorflow" not in instructions.lower()
    copied = {line.split()[1] for line in text.splitlines() if line.startswith("COPY ") and "--from" not in line}
    assert copied == {"pyproject.toml", "slipway", "engine", "wrappers"}
    assert f'".[{extra}]"' in text
    assert not re.search(r"^FROM \S+:latest", text, re.MULTILINE)


def test_gpu_image_has_cuda_13_cudnn_9_and_tensorrt_10():
    text = IMAGES["gpu"].read_text()
    assert re.search(r"^FROM nvidia/cuda:13\.\d+\.\d+-cudnn-runtime", text, re.MULTILINE)  # cuDNN 9 ships with CUDA 13
    assert '"tensorrt-cu13-libs==10.' in text and "tensorrt_libs" in text


def _closure(requirements: list[Requirement], extras: set[str]) -> set[str]:
    """Every distribution a requirement list pulls in, from the installed packages' own metadata."""
    seen: set[str] = set()
    pending = [r for r in requirements if r.marker is None or any(r.marker.evaluate({"extra": e}) for e in extras)]
    while pending:
        requirement = pending.pop()
        name = requirement.name.lower().replace("_", "-")
        if name in seen:
            continue
        seen.add(name)
        try:
            distribution = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        for text in distribution.requires or []:
            child = Requirement(text)
            if (
                child.marker is None
                or child.marker.evaluate({"extra": ""})
                or any(child.marker.evaluate({"extra": e}) for e in requirement.extras)
            ):
                pending.append(child)
    return seen


def test_the_serving_extra_pulls_in_no_tensorflow():
    requirements = [Requirement(text) for text in metadata.distribution(DISTRIBUTION).requires]
    serving = _closure(requirements, {"serve"})
    assert {"mlserver", "onnxruntime", "numpy", "pydantic"} <= serving
    assert not {name for name in serving if name.startswith(("tensorflow", "tf-", "keras", "tf2onnx"))}, serving
    gpu = {r.name for r in requirements if r.marker and r.marker.evaluate({"extra": "gpu"})}
    serve = {r.name for r in requirements if r.marker and r.marker.evaluate({"extra": "serve"})}
    assert gpu == serve - {"onnxruntime"} | {"onnxruntime-gpu"}
