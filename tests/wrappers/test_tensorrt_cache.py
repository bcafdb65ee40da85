"""TensorRT's engine and timing caches where the pod says ($SLIPWAY_TENSORRT_CACHE_DIR): no GPU needed to check it."""

import json
import subprocess
import sys

import onnxruntime as ort
import pytest

from engine.providers import CPU, TENSORRT, provider_entries
from engine.tensorrt import prepare_tensorrt_cache, with_tensorrt_cache
from slipway.artifact import SETTINGS_FILE, read_manifest
from slipway.paths import PROJECT_ROOT
from slipway.runtime_settings import TENSORRT_CACHE_ENV, RuntimeSettings, SettingsError
from tests.graphs import matmul_graph
from tests.wrappers.folders import model_folder

DIGEST = "sha256:" + "ab" * 32


def test_the_cache_variable_turns_both_caches_on_under_it_keyed_by_model_and_content():
    settings = with_tensorrt_cache(
        RuntimeSettings(tensorrt={"fp16": True}),
        model="digits",
        digest=DIGEST,
        environ={TENSORRT_CACHE_ENV: "/var/cache/slipway/tensorrt"},
    )
    options = dict(provider_entries([TENSORRT, CPU], settings))[TENSORRT]
    engines = f"/var/cache/slipway/tensorrt/engines/digits-{'ab' * 8}-ort{ort.__version__}"
    assert options == {
        "device_id": "0",
        "trt_fp16_enable": "1",
        "trt_int8_enable": "0",
        "trt_engine_cache_enable": "1",
        "trt_engine_cache_path": engines,
        "trt_timing_cache_enable": "1",
        "trt_timing_cache_path": "/var/cache/slipway/tensorrt/timing",
    }
    other = with_tensorrt_cache(
        RuntimeSettings(), model="digits", digest="cd" * 32, environ={TENSORRT_CACHE_ENV: "/var/cache/slipway/tensorrt"}
    )
    assert other.tensorrt.engine_cache_path != engines  # another version never meets this one's engines
    assert other.tensorrt.timing_cache_path == settings.tensorrt.timing_cache_path  # kernel timings are shared


def test_the_variable_wins_over_the_artifact_s_paths_and_without_it_they_stay():
    artifact = RuntimeSettings(tensorrt={"engine_cache_path": "/tmp/engines", "timing_cache_path": "/tmp/timing"})
    assert with_tensorrt_cache(artifact, model="m", digest=DIGEST, environ={}) == artifact
    assert with_tensorrt_cache(artifact, model="m", digest=DIGEST, environ={TENSORRT_CACHE_ENV: " "}) == artifact
    moved = with_tensorrt_cache(artifact, model="m", digest=DIGEST, environ={TENSORRT_CACHE_ENV: "/cache"})
    assert (
        moved.tensorrt.engine_cache_path.startswith("/cache/engines/m-") and moved.tensorrt.timing_cache_path == "/cache/timing"
    )
    with pytest.raises(SettingsError, match="must be an absolute path"):
        with_tensorrt_cache(artifact, model="m", digest=DIGEST, environ={TENSORRT_CACHE_ENV: "cache/trt"})


def test_cache_folders_are_created_and_one_that_cannot_be_is_dropped_with_a_warning(tmp_path, caplog):
    engines, timing = tmp_path / "cache" / "engines" / "m-1", tmp_path / "cache" / "timing"
    ready = prepare_tensorrt_cache(
        RuntimeSettings(tensorrt={"engine_cache_path": str(engines), "timing_cache_path": str(timing)})
    )
    assert engines.is_dir() and timing.is_dir() and ready.tensorrt.engine_cache_path == str(engines)
    (tmp_path / "file").write_text("not a folder")
    blocked = prepare_tensorrt_cache(
        RuntimeSettings(tensorrt={"engine_cache_path": str(tmp_path / "file" / "engines"), "timing_cache_path": str(timing)})
    )
    assert blocked.tensorrt.engine_cache_path is None and blocked.tensorrt.timing_cache_path == str(timing)
    assert "trt_engine_cache_enable" not in dict(provider_entries([TENSORRT], blocked))[TENSORRT]
    assert "cannot be created" in caplog.text


# In its own process, as MLServer runs the runtime (its V2 protobufs must not meet tritonclient's here).
LOAD = """
import asyncio, json, sys
from mlserver.settings import ModelSettings
from wrappers.runtime import OnnxRuntime

async def main(path):
    settings = ModelSettings.parse_file(path)
    settings._source = path
    model = OnnxRuntime(settings)
    await model.load()
    print(json.dumps(model._config.tensorrt.model_dump()))

asyncio.run(main(sys.argv[1]))
"""


def test_the_runtime_points_tensorrt_at_the_pod_s_cache_keyed_by_the_verified_digest(tmp_path):
    folder = model_folder(tmp_path, "m", matmul_graph(tmp_path / "m.onnx"))
    env = {"PATH": "/usr/bin:/bin", TENSORRT_CACHE_ENV: str(tmp_path / "trt")}
    done = subprocess.run(
        [sys.executable, "-c", LOAD, str(folder / SETTINGS_FILE)],
        cwd=PROJECT_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    tensorrt = json.loads(done.stdout.strip().splitlines()[-1])
    digest = read_manifest(folder).digest
    assert tensorrt["engine_cache_path"] == str(tmp_path / "trt" / "engines" / f"m-{digest[:16]}-ort{ort.__version__}")
    assert tensorrt["timing_cache_path"] == str(tmp_path / "trt" / "timing")
