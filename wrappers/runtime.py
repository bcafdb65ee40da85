"""`OnnxRuntime`: an MLServer runtime that serves an ONNX model with ONNX Runtime.

Point a `model-settings.json` at it with
`"implementation": "wrappers.runtime.OnnxRuntime"` and `"parameters": {"uri": "./model.onnx"}`.
The inputs and outputs it advertises come from the graph itself; requests are checked
against them and refused with HTTP 400 (gRPC INVALID_ARGUMENT) naming what was expected.
"""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
from mlserver import MLModel
from mlserver.codecs import NumpyCodec
from mlserver.errors import InferenceError, MLServerError
from mlserver.types import InferenceRequest, InferenceResponse, MetadataTensor, RequestInput
from mlserver.utils import get_model_uri

from wrappers.artifact import MANIFEST_NAME, ArtifactError, pinned_digest, verify_artifact
from wrappers.session import V2_TO_NUMPY, TensorSpec, create_session, describe
from wrappers.settings import SettingsError, parse_runtime_settings

logger = logging.getLogger(__name__)

WELLKNOWN_MODEL_FILES = ["model.onnx"]


class ModelLoadError(MLServerError):
    """The artifact cannot be served; the message says which file or setting is wrong."""

    def __init__(self, msg: str):
        super().__init__(msg, status_code=500)


class OnnxRuntime(MLModel):
    """Serve one ONNX graph; inference runs on a worker thread so the event loop keeps serving."""

    async def load(self) -> bool:
        extra = self.settings.parameters.extra if self.settings.parameters else None
        try:
            self._runtime_settings = parse_runtime_settings(extra)
        except SettingsError as err:
            raise ModelLoadError(f"model {self.name}: {err}") from err
        model_path = Path(await get_model_uri(self.settings, wellknown_filenames=WELLKNOWN_MODEL_FILES))
        folder = model_path.parent
        try:
            pinned = pinned_digest(self.name, self.version)
        except ArtifactError as err:
            raise ModelLoadError(f"model {self.name}: {err}") from err
        if self._runtime_settings.verify_manifest or pinned:
            if not (folder / MANIFEST_NAME).is_file():
                raise ModelLoadError(
                    f"model {self.name}: {folder} has no {MANIFEST_NAME}; publish it with `python -m export` "
                    "or set parameters.extra.verify_manifest=false to serve an unverified model"
                )
            try:
                verify_artifact(folder, expected_digest=pinned)
            except ArtifactError as err:
                raise ModelLoadError(f"model {self.name}: refusing to load: {err}") from err
        self._session = create_session(model_path, self._runtime_settings)
        self._input_specs, self._output_specs = describe(self._session)
        self._inputs_by_name = {spec.name: spec for spec in self._input_specs}
        self._output_names = [spec.name for spec in self._output_specs]
        self.inputs = [_metadata(spec) for spec in self._input_specs]
        self.outputs = [_metadata(spec) for spec in self._output_specs]
        # One inference at a time per session: ONNX Runtime parallelises inside the call,
        # and a second concurrent run would only fight the first for the same cores.
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"ort-{self.name}")
        logger.info(
            "loaded %s (version %s): inputs %s, outputs %s",
            self.name,
            self.version,
            [(s.name, s.datatype, s.shape) for s in self._input_specs],
            [(s.name, s.datatype, s.shape) for s in self._output_specs],
        )
        return True

    async def unload(self) -> bool:
        executor = getattr(self, "_executor", None)  # MLServer also unloads a model whose load failed
        if executor is not None:
            executor.shutdown(wait=True)
        return True

    async def predict(self, payload: InferenceRequest) -> InferenceResponse:
        feeds = self._feeds(payload)
        wanted = self._requested_outputs(payload)
        loop = asyncio.get_running_loop()
        results = await loop.run_in_executor(self._executor, self._session.run, wanted, feeds)
        return InferenceResponse(
            model_name=self.name,
            model_version=self.version,
            id=payload.id,
            outputs=[NumpyCodec.encode_output(name, result) for name, result in zip(wanted, results)],
        )

    def _feeds(self, payload: InferenceRequest) -> dict[str, np.ndarray]:
        names = [request_input.name for request_input in payload.inputs]
        expected = sorted(self._inputs_by_name)
        unknown = sorted(set(names) - set(expected))
        missing = sorted(set(expected) - set(names))
        if unknown or missing or len(names) != len(set(names)):
            raise InferenceError(
                f"model {self.name} takes inputs {expected}, got {names}: "
                f"send each of {expected} exactly once" + (f" (unknown: {unknown})" if unknown else "")
            )
        return {request_input.name: self._decode(request_input) for request_input in payload.inputs}

    def _decode(self, request_input: RequestInput) -> np.ndarray:
        spec = self._inputs_by_name[request_input.name]
        if request_input.datatype != spec.datatype:
            raise InferenceError(
                f"input {spec.name!r} must have datatype {spec.datatype}, got {request_input.datatype}"
            )
        shape = tuple(request_input.shape)
        if not spec.accepts_shape(shape):
            raise InferenceError(f"input {spec.name!r} must have shape {_shape_text(spec.shape)}, got {list(shape)}")
        try:
            array = NumpyCodec.decode_input(request_input)
        except (ValueError, TypeError) as err:
            raise InferenceError(
                f"input {spec.name!r}: its data does not fill shape {list(shape)} "
                f"({int(np.prod(shape))} {spec.datatype} values expected): {err}"
            ) from err
        return np.ascontiguousarray(array, dtype=V2_TO_NUMPY[spec.datatype])

    def _requested_outputs(self, payload: InferenceRequest) -> list[str]:
        if not payload.outputs:
            return self._output_names
        wanted = [output.name for output in payload.outputs]
        unknown = sorted(set(wanted) - set(self._output_names))
        if unknown:
            raise InferenceError(f"model {self.name} has outputs {self._output_names}; unknown outputs requested: {unknown}")
        return wanted


def _metadata(spec: TensorSpec) -> MetadataTensor:
    return MetadataTensor(name=spec.name, datatype=spec.datatype, shape=list(spec.shape))


def _shape_text(shape: tuple[int, ...]) -> str:
    text = "[" + ", ".join("N" if dim == -1 else str(dim) for dim in shape) + "]"
    return text + " (N: any size)" if -1 in shape else text
