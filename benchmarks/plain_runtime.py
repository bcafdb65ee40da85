"""The baseline: the MLServer runtime a user would write without Slipway.

It decodes with MLServer's `NumpyRequestCodec` and calls `session.run` inline, with
ONNX Runtime's default session options. It lives here, in the benchmark, and nowhere
else: it is what `make bench` compares the wrappers runtime against.
"""

from __future__ import annotations

import onnxruntime as ort
from mlserver import MLModel
from mlserver.codecs import NumpyCodec, NumpyRequestCodec
from mlserver.types import InferenceRequest, InferenceResponse
from mlserver.utils import get_model_uri


class PlainOnnxRuntime(MLModel):
    async def load(self) -> bool:
        path = await get_model_uri(self.settings, wellknown_filenames=["model.onnx"])
        extra = (self.settings.parameters.extra if self.settings.parameters else None) or {}
        self._session = ort.InferenceSession(path, providers=extra.get("providers", ["CPUExecutionProvider"]))
        self._input = self._session.get_inputs()[0].name
        self._outputs = [output.name for output in self._session.get_outputs()]
        return True

    async def predict(self, payload: InferenceRequest) -> InferenceResponse:
        array = NumpyRequestCodec.decode_request(payload)
        results = self._session.run(self._outputs, {self._input: array})
        return InferenceResponse(
            model_name=self.name,
            outputs=[NumpyCodec.encode_output(name, result) for name, result in zip(self._outputs, results)],
        )
