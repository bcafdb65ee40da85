"""A model's tensors in shared memory: inputs read from the regions a request names, outputs written into them.

`wrappers.shm.regions` opens, checks, reads and writes regions and knows nothing of requests; this is the
request side: a model that does not use shared memory refuses a tensor that names a region, an input names
a region or carries data (never both), and requested output regions are checked before the run, so a bad
one fails the request before any work, not after it.
"""

from __future__ import annotations

import numpy as np
from mlserver.errors import InferenceError
from mlserver.types import InferenceRequest, Parameters, ResponseOutput, TensorData

from engine.tensor_specs import TensorSpec
from slipway.v2_wire import BYTE_SIZE, OFFSET, REGION, Location
from wrappers import process_state
from wrappers.shm.regions import SharedMemoryError, location


def carries_data(data: object) -> bool:
    """Whether a request input brought values of its own (an array or a list with any)."""
    return bool((isinstance(data, np.ndarray) and data.size) or (isinstance(data, list) and data))


class SharedTensors:
    """One model's reads and writes of shared-memory tensors; `enabled` is its `shared_memory` setting."""

    def __init__(self, model: str, enabled: bool):
        self._model, self._enabled = model, enabled

    def check_on(self) -> None:
        if not self._enabled:
            raise SharedMemoryError(
                f"model {self._model} does not use shared memory; send the tensors' data in the request "
                "(or set parameters.extra.shared_memory=true)"
            )

    def read(self, where: Location, data: object, spec: TensorSpec, shape: tuple[int, ...]) -> np.ndarray:
        """An input's values from its region, as a flat array."""
        self.check_on()
        if carries_data(data):
            raise SharedMemoryError(
                f"input {spec.name!r} names a shared-memory region and carries data too; send one or the other"
            )
        return process_state.current().regions.read(where, spec.datatype, list(shape), spec.name)

    def outputs(self, payload: InferenceRequest) -> dict[str, Location]:
        """The requested outputs to write into shared memory, checked before the run."""
        try:
            wanted = {output.name: location(output.parameters, output.name) for output in payload.outputs or []}
            shared = {name: where for name, where in wanted.items() if where is not None}
            if shared:
                self.check_on()
                for name, where in shared.items():
                    process_state.current().regions.region(where.region).start(where, name)
        except SharedMemoryError as err:
            raise InferenceError(str(err)) from err
        return shared

    def write(self, name: str, array: np.ndarray, datatype: str, where: Location) -> ResponseOutput:
        """Write an output into its region; the response says where, and carries no data."""
        try:
            written = process_state.current().regions.write(where, array, datatype, name)
        except SharedMemoryError as err:
            raise InferenceError(str(err)) from err
        parameters = Parameters(**{REGION: where.region, OFFSET: where.offset, BYTE_SIZE: written})
        return ResponseOutput.model_construct(
            name=name,
            shape=list(array.shape),
            datatype=datatype,
            parameters=parameters,
            data=TensorData.model_construct(root=[]),
        )
