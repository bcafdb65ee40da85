"""TensorRT's engine and timing caches, and the batch profile that lets one engine serve every padded run."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping

import onnxruntime as ort

from engine.tensor_specs import DYNAMIC, TensorSpec
from slipway.runtime_settings import TENSORRT_CACHE_ENV, RuntimeSettings, SettingsError

logger = logging.getLogger(__name__)


def with_tensorrt_cache(
    settings: RuntimeSettings, *, model: str, digest: str, environ: Mapping[str, str] = os.environ
) -> RuntimeSettings:
    """The settings with TensorRT's caches under `$SLIPWAY_TENSORRT_CACHE_DIR`, where the deployment sets it.

    The variable wins over the artifact's engine_cache_path and timing_cache_path: where a pod may write
    (the gpu overlay's volume) is the deployment's to say, and the artifact's settings are digest-pinned.
    Engines go to `engines/<model>-<digest>-ort<version>`: ONNX Runtime names a cached engine after the
    graph's structure, not its weights, so a cache shared across versions (a PersistentVolumeClaim) must
    never hand one version another's engine. The kernel timing cache (`timing/`) is per GPU and TensorRT
    version, not per model: every model shares it.
    """
    root = environ.get(TENSORRT_CACHE_ENV, "").strip()
    if not root:
        return settings
    if not os.path.isabs(root):
        raise SettingsError(f"{TENSORRT_CACHE_ENV}={root!r} must be an absolute path (the volume's mount path)")
    key = f"{model}-{digest.removeprefix('sha256:')[:16]}-ort{ort.__version__}"
    tensorrt = settings.tensorrt.model_copy(
        update={
            "engine_cache_path": os.path.join(root, "engines", key),
            "timing_cache_path": os.path.join(root, "timing"),
        }
    )
    return settings.model_copy(update={"tensorrt": tensorrt})


def prepare_tensorrt_cache(settings: RuntimeSettings) -> RuntimeSettings:
    """Create the cache folders TensorRT is pointed at (ONNX Runtime creates only the last level); one it
    cannot create is dropped with a warning: engines are then built at every start, but the model serves."""
    update: dict[str, None] = {}
    for field in ("engine_cache_path", "timing_cache_path"):
        folder = getattr(settings.tensorrt, field)
        if not folder:
            continue
        try:
            os.makedirs(folder, exist_ok=True)
        except OSError as err:
            logger.warning("TensorRT %s %s cannot be created (%s): running without it", field, folder, err)
            update[field] = None
    if not update:
        return settings
    return settings.model_copy(update={"tensorrt": settings.tensorrt.model_copy(update=update)})


def tensorrt_batch_profile(inputs: list[TensorSpec], max_rows: int) -> dict[str, str]:
    """TensorRT profile options for runs of 1 to `max_rows` rows: one engine for every padded run.

    Without a profile TensorRT builds an engine for the first batch size it meets, and builds again
    (minutes for a large model) whenever a run falls outside the sizes met so far. {} unless the batch
    dimension is every input's only dynamic one and the names fit the option's `name:1x2x3,...` format:
    other ranges are the user's to give as `tensorrt.extra_options` trt_profile_*.
    """

    def fits(spec: TensorSpec) -> bool:
        return (
            bool(spec.shape)
            and spec.shape[0] == DYNAMIC
            and DYNAMIC not in spec.shape[1:]
            and not any(mark in spec.name for mark in ",:")
        )

    if not inputs or not all(fits(spec) for spec in inputs):
        return {}

    def shapes(rows: int) -> str:
        return ",".join(f"{spec.name}:{'x'.join(str(size) for size in (rows, *spec.shape[1:]))}" for spec in inputs)

    return {
        "trt_profile_min_shapes": shapes(1),
        "trt_profile_opt_shapes": shapes(max_rows),
        "trt_profile_max_shapes": shapes(max_rows),
    }
