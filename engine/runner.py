"""Run a session with or without IOBinding: device buffers kept per thread, or per captured CUDA graph."""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import onnxruntime as ort

from engine.providers import CUDA, device_of

_MAX_BINDINGS_PER_THREAD = 16


class SessionRunner:
    """Runs the session with or without IOBinding, so callers need not care which.

    With IOBinding on a GPU the inputs go into device buffers kept per inference thread
    while their shapes hold, and outputs stay on the device until one copy back, instead of
    ONNX Runtime staging both through its own host buffers. With CUDA graphs the buffers are
    the session's, not a thread's, and its runs take turns: a replayed graph reads and writes
    the addresses it was captured with, whichever thread replays it.
    """

    def __init__(self, session: ort.InferenceSession, *, io_binding: str = "auto"):
        self.session = session
        self.device, self.device_id = device_of(session)
        self.uses_io_binding = io_binding == "on" or (io_binding == "auto" and self.device != "cpu")
        self.fixed_outputs = session.get_provider_options().get(CUDA, {}).get("enable_cuda_graph") == "1"
        self._local = threading.local()  # device buffers per inference thread: runs may overlap
        self._graph_lock = threading.Lock() if self.fixed_outputs else None
        self._graph_bindings: dict[tuple[Any, ...], _DeviceBinding] = {}  # a captured graph's buffers, one set per session

    def run(self, output_names: list[str], feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        if not self.uses_io_binding:
            outputs: list[np.ndarray] = self.session.run(output_names, feeds)
            return outputs
        if self.device != "cpu":
            return self._run_on_device(output_names, feeds)
        binding = self.session.io_binding()
        for name, array in feeds.items():
            binding.bind_cpu_input(name, array)
        for name in output_names:
            binding.bind_output(name)
        self.session.run_with_iobinding(binding)
        copied: list[np.ndarray] = binding.copy_outputs_to_cpu()
        return copied

    def parts(self) -> tuple[SessionRunner, ...]:
        """This runner alone (a `wrappers.running.width.WidthRunner` has two): what warm-up runs on each thread."""
        return (self,)

    def _run_on_device(self, output_names: list[str], feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        if self._graph_lock is None:  # one per shape and thread: padded runs meet a few
            return self._bound_run(self._local.__dict__.setdefault("bindings", {}), output_names, feeds)
        with self._graph_lock:
            return self._bound_run(self._graph_bindings, output_names, feeds)

    def _bound_run(
        self, bindings: dict[tuple[Any, ...], _DeviceBinding], output_names: list[str], feeds: dict[str, np.ndarray]
    ) -> list[np.ndarray]:
        key = (tuple(output_names), tuple((name, array.shape, array.dtype.str) for name, array in feeds.items()))
        bound = bindings.get(key)
        if bound is None:
            if len(bindings) >= _MAX_BINDINGS_PER_THREAD:  # shapes without end (no buckets): keep memory bounded
                bindings.clear()
            bound = bindings[key] = _DeviceBinding(self, feeds, output_names)
        else:
            for name, array in feeds.items():
                bound.inputs[name].update_inplace(np.ascontiguousarray(array))
            if not self.fixed_outputs:  # outputs whose shape may depend on the data: allocated per run
                bound.binding.clear_binding_outputs()
                for name in output_names:
                    bound.binding.bind_output(name, self.device, self.device_id)
        self.session.run_with_iobinding(bound.binding)
        outputs: list[np.ndarray] = bound.binding.copy_outputs_to_cpu()
        if self.fixed_outputs and not bound.outputs_fixed:
            for name, value in zip(output_names, bound.binding.get_outputs()):
                bound.binding.bind_ortvalue_output(name, value)
            bound.outputs_fixed = True
        return outputs


class _DeviceBinding:
    """One thread's IOBinding and device input buffers for one set of input shapes."""

    def __init__(self, runner: SessionRunner, feeds: dict[str, np.ndarray], output_names: list[str]):
        self.binding = runner.session.io_binding()
        self.inputs = {
            name: ort.OrtValue.ortvalue_from_numpy(np.ascontiguousarray(array), runner.device, runner.device_id)
            for name, array in feeds.items()
        }
        for name, value in self.inputs.items():
            self.binding.bind_ortvalue_input(name, value)
        for name in output_names:
            self.binding.bind_output(name, runner.device, runner.device_id)
        self.outputs_fixed = False
