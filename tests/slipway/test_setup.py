"""`make setup`: the extras DESIGN.md decided on, the CPU/GPU swap, and nothing to do the second time."""

import subprocess
import tomllib

from slipway.paths import PROJECT_ROOT


def _extras() -> dict[str, list[str]]:
    return tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]


def _names(requirements: list[str]) -> set[str]:
    return {req.split("[")[0].split("=")[0].split(">")[0].split("<")[0].strip() for req in requirements}


def test_cpu_and_gpu_onnxruntime_are_alternatives():
    extras = _extras()
    assert "onnxruntime" in _names(extras["serve"]) and "onnxruntime-gpu" not in _names(extras["serve"])
    assert "onnxruntime-gpu" in _names(extras["gpu"]) and "onnxruntime" not in _names(extras["gpu"])
    for name, requirements in extras.items():
        if name not in ("serve", "gpu"):
            assert not _names(requirements) & {"onnxruntime", "onnxruntime-gpu"}, name
    for serving in ("serve", "gpu"):
        assert "uvloop==0.21.0" in extras[serving]  # 0.23 crashes MLServer 1.7.1 with parallel workers
        assert not _names(extras[serving]) & {"tensorflow", "tensorflow-cpu", "tf2onnx"}


def _make(*args: str) -> str:
    return subprocess.run(["make", "-n", *args], cwd=PROJECT_ROOT, capture_output=True, text=True, check=True).stdout


def test_gpu_setup_swaps_the_runtime_instead_of_adding_one():
    plan = _make("setup", "GPU=1", "VENV=.venv-plan-only")
    assert "pip uninstall --yes --quiet onnxruntime " in plan + " "
    assert '".[gpu,export,loadtest,deploy,dev]"' in plan and "serve" not in plan


def test_setup_is_quick_when_nothing_changed():
    # `make test` ran setup before pytest: a second setup has nothing to do.
    assert "Nothing to be done for 'setup'" in _make("setup")
