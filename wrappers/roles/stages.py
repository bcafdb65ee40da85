"""The CPU stages served on their own, for a graph split across pods (`wrappers.roles.serve`).

`ImageTransformer` answers encoded images with the pixel batch the one-pod runtime feeds its session;
`TopKTransformer` answers a graph's scores with its labels and scores; `GraphTransformer` and
`GraphOutputTransformer` run a stage that is an ONNX graph of its own (`export convert --split` cuts the
model's leading preprocessing layers and trailing softmax into them). All speak V2, so Seldon's executor
chains them around the model (outputs become the next node's inputs), and both build their stage with the
one-pod runtime's own code (`wrappers.model.interface`), so the arrays are the same. The graph's declared
inputs and outputs are read through a CPU session closed at load: these servers never run the graph.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
from mlserver import MLModel
from mlserver.errors import InferenceError
from mlserver.types import InferenceRequest, InferenceResponse, RequestInput, ResponseOutput

from engine.cpu_limits import cpu_limit
from engine.tensor_specs import DYNAMIC, TensorSpec, describe
from slipway.artifact import ArtifactError
from slipway.runtime_settings import GraphStage, RuntimeSettings, SettingsError, check_model_name, parse_runtime_settings
from slipway.v2_wire import BYTES, TensorError
from wrappers.model.artifact_checks import verify_folder
from wrappers.model.interface import Stages, configure_stages
from wrappers.model.processing import LABELS_OUTPUT, SCORES_OUTPUT, ProcessingConfigError
from wrappers.operations import refusal_logs
from wrappers.protocol.request_rules import RequestError, check_request_id
from wrappers.protocol.shared_tensors import SharedTensors
from wrappers.protocol.v2_codec import RequestDecoder, encode
from wrappers.running.planning import request_row_limit
from wrappers.runtime import WELLKNOWN_MODEL_FILES, ModelLoadError


def declared_tensors(model_path: Path) -> tuple[list[TensorSpec], list[TensorSpec]]:
    """The graph's inputs and outputs as the one-pod runtime sees them, from a CPU session dropped at once."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL  # nothing is run: build it fast
    session = ort.InferenceSession(str(model_path), options, providers=["CPUExecutionProvider"])
    try:
        return describe(session)
    finally:
        del session


class _StageServer(MLModel):
    """One CPU stage behind V2: settings and artifact checked as the one-pod runtime checks them."""

    role = ""

    async def load(self) -> bool:
        from mlserver.utils import get_model_uri

        refusal_logs.install()
        try:
            check_model_name(self.name)
            config = parse_runtime_settings(self.settings.parameters.extra if self.settings.parameters else None)
            model_path = Path(await get_model_uri(self.settings, wellknown_filenames=WELLKNOWN_MODEL_FILES))
            verify_folder(model_path.parent, self.name, self.version, config.verify_manifest)
            self._folder = model_path.parent
            graph_inputs, graph_outputs = declared_tensors(model_path)
            self._setup(
                config, configure_stages(config, graph_inputs, graph_outputs, model_path.parent), graph_inputs, graph_outputs
            )
        except (SettingsError, ArtifactError, ProcessingConfigError) as err:
            raise ModelLoadError(f"model {self.name} ({self.role}): {err}") from err
        self._pool = ThreadPoolExecutor(
            max_workers=config.cpu_workers or max(1, int(cpu_limit())), thread_name_prefix=f"cpu-{self.name}"
        )
        return True

    def _setup(
        self, config: RuntimeSettings, stages: Stages, graph_inputs: list[TensorSpec], graph_outputs: list[TensorSpec]
    ) -> None:
        raise NotImplementedError

    def _decoder(
        self, config: RuntimeSettings, inputs: list[TensorSpec], outputs: list[TensorSpec], image_input: str | None
    ) -> RequestDecoder:
        return RequestDecoder(
            self.name,
            inputs,
            outputs,
            reject_non_finite=config.reject_non_finite,
            row_limit=request_row_limit(config.max_request_rows, self.settings.max_batch_size, False),
            image_input=image_input,
            shared=SharedTensors(self.name, False),
        )

    async def unload(self) -> bool:
        if getattr(self, "_pool", None) is not None:
            self._pool.shutdown(wait=True)
        return True

    async def _on_pool(self, stage: Callable[[Any], Any], array: Any) -> Any:
        try:
            return await asyncio.get_running_loop().run_in_executor(self._pool, stage, array)
        except TensorError as err:
            raise InferenceError(str(err)) from err

    def _keep_stage(
        self, stage: Callable[[Any], Any] | None, name: str | None, specs: list[TensorSpec], refusal: str
    ) -> TensorSpec:
        """Keep a stage that reads one input, and that input's name; the graph tensor of that name, from `specs`.
        Settings that give no such stage are refused with `refusal`."""
        if stage is None or name is None:
            raise ProcessingConfigError(refusal)
        self._stage, self._stage_input = stage, name
        return next(spec for spec in specs if spec.name == name)

    async def _run_stage(self, payload: InferenceRequest, ask: str) -> tuple[Any, list[ResponseOutput]]:
        """The kept stage's answer to the request's input it reads, and the request's other inputs, handed on as
        they came; a request without that input is refused with `ask` (what to send)."""
        _check_id(payload)
        taken = next((item for item in payload.inputs if item.name == self._stage_input), None)
        if taken is None:
            raise InferenceError(f"model {self.name}: {ask}")
        answer = await self._on_pool(self._stage, self._codec.decode(taken))
        return answer, [_passed_through(item) for item in payload.inputs if item is not taken]

    def _respond(self, payload: InferenceRequest, outputs: list[ResponseOutput]) -> InferenceResponse:
        return InferenceResponse(model_name=self.name, model_version=self.version, id=payload.id, outputs=outputs)


def _passed_through(item: RequestInput) -> ResponseOutput:
    """An input the stage does not touch, handed on as it came (the next node decodes and checks it)."""
    return ResponseOutput(name=item.name, shape=item.shape, datatype=item.datatype, data=item.data)


class ImageTransformer(_StageServer):
    """Encoded images (the image input, BYTES) -> the graph's pixel batch under the same name; other inputs pass."""

    role = "transformer"

    def _setup(
        self, config: RuntimeSettings, stages: Stages, graph_inputs: list[TensorSpec], graph_outputs: list[TensorSpec]
    ) -> None:
        refusal = "the transformer decodes images: set parameters.extra.preprocess"
        pixels = self._keep_stage(stages.preprocessor, stages.image_input, graph_inputs, refusal)
        self._datatype = pixels.datatype
        inputs = [TensorSpec(self._stage_input, BYTES, (DYNAMIC,))]
        self._codec = self._decoder(
            config, inputs, [TensorSpec(pixels.name, pixels.datatype, (DYNAMIC, *pixels.shape[1:]))], self._stage_input
        )

    async def predict(self, payload: InferenceRequest) -> InferenceResponse:
        pixels, passed = await self._run_stage(payload, f"send the encoded images as input {self._stage_input!r} (BYTES)")
        return self._respond(payload, [encode(self._stage_input, pixels, self._datatype, False)] + passed)


class TopKTransformer(_StageServer):
    """The graph's scores (as an input, named like the graph output) -> labels and scores; other inputs pass."""

    role = "output-transformer"

    def _setup(
        self, config: RuntimeSettings, stages: Stages, graph_inputs: list[TensorSpec], graph_outputs: list[TensorSpec]
    ) -> None:
        refusal = "the output transformer ranks scores: set parameters.extra.postprocess"
        spec = self._keep_stage(stages.topk, stages.scores_output, graph_outputs, refusal)
        self._codec = self._decoder(config, [TensorSpec(spec.name, spec.datatype, (DYNAMIC, *spec.shape[1:]))], [], None)

    async def predict(self, payload: InferenceRequest) -> InferenceResponse:
        (labels, best), passed = await self._run_stage(payload, f"send the graph's scores as input {self._stage_input!r}")
        return self._respond(
            payload, passed + [encode(LABELS_OUTPUT, labels, BYTES, False), encode(SCORES_OUTPUT, best, "FP32", False)]
        )


class GraphTransformer(_StageServer):
    """A stage that is an ONNX graph of its own (`parameters.extra.preprocess.graph`), run on the CPU: its inputs
    from the request by name -> its outputs, named like the next node's inputs; other inputs pass."""

    role = "transformer"
    setting = "preprocess"

    def _setup(
        self, config: RuntimeSettings, stages: Stages, graph_inputs: list[TensorSpec], graph_outputs: list[TensorSpec]
    ) -> None:
        import onnxruntime as ort

        stage = getattr(config, self.setting)
        if not isinstance(stage, GraphStage):
            raise ProcessingConfigError(
                f"the {self.role} runs the graph parameters.extra.{self.setting}.graph names: export the model "
                "with `python -m export convert --split`"
            )
        path = (self._folder / stage.graph).resolve()
        if not path.is_relative_to(self._folder.resolve()) or not path.is_file():
            raise ProcessingConfigError(
                f"{self.setting}.graph {stage.graph!r} is not a file inside the model folder {self._folder}: "
                "export the model again with `python -m export convert --split`"
            )
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1  # small graphs: the pool runs requests side by side instead
        self._session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        self._inputs, self._outputs = describe(self._session)
        self._codec = self._decoder(
            config, [TensorSpec(spec.name, spec.datatype, (DYNAMIC, *spec.shape[1:])) for spec in self._inputs], [], None
        )

    def _run(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        return self._session.run([spec.name for spec in self._outputs], feeds)

    async def predict(self, payload: InferenceRequest) -> InferenceResponse:
        _check_id(payload)
        given = {item.name: item for item in payload.inputs}
        missing = [spec.name for spec in self._inputs if spec.name not in given]
        if missing:
            raise InferenceError(f"model {self.name}: send input(s) {missing}, which the {self.role}'s graph takes")
        feeds = {spec.name: self._codec.decode(given[spec.name]) for spec in self._inputs}
        answers = await self._on_pool(self._run, feeds)
        outputs = [encode(spec.name, array, spec.datatype, False) for spec, array in zip(self._outputs, answers)]
        return self._respond(payload, outputs + [_passed_through(item) for item in payload.inputs if item.name not in feeds])


class GraphOutputTransformer(GraphTransformer):
    """`GraphTransformer` for the stage after the model (`parameters.extra.postprocess.graph`)."""

    role = "output-transformer"
    setting = "postprocess"


def _check_id(payload: InferenceRequest) -> None:
    """The request id rule every model of the runtime applies (`request_rules.check_request_id`), as HTTP 400."""
    try:
        check_request_id(payload.id)
    except RequestError as err:
        raise InferenceError(str(err)) from err
