"""The process's registries have one owner (`wrappers.process_state`): a test serves with a fresh one, no resets."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from prometheus_client import CollectorRegistry

from slipway.metric_names import CLASS_LABEL, PREDICTED_CLASS, REQUEST_SECONDS, SETTING, UNKNOWN_MODEL_REQUESTS
from slipway.v2_wire import Location
from wrappers import process_state
from wrappers.limits.body_budget import DEFAULT_BODY_BYTES, MIB
from wrappers.operations.metrics import MetricSeries, ModelMetrics, PredictedClasses
from wrappers.process_state import ProcessState
from wrappers.shm.regions import Regions, SharedMemoryError


def _fresh(shared_memory: Path = Path("/nonexistent")) -> ProcessState:
    return ProcessState(metrics=MetricSeries(CollectorRegistry()), regions=Regions(shared_memory))


def test_the_process_keeps_one_state_and_a_replaced_one_lasts_only_its_block():
    first = process_state.current()
    assert process_state.current() is first and process_state.begin() is first, "begun twice: two owners"
    with process_state.replaced(_fresh()) as fresh:
        assert process_state.current() is fresh is not first
    assert process_state.current() is first


def test_a_fresh_state_counts_in_its_own_registry_from_zero():
    for _ in range(2):  # the same series created again in a new state: no duplicate, no count carried over
        with process_state.replaced(_fresh()) as state:
            series = state.metrics
            series.count_unknown_model()
            series.observe_request("digits", None, "rest", 0.001)
            series.observe_request("digits", None, "rest", 0.002)
            ModelMetrics.for_model(series, "digits", "1").inference_seconds.observe(0.0001)
            value = series.registry.get_sample_value
            assert value(f"{UNKNOWN_MODEL_REQUESTS}_total") == 1
            assert value(f"{REQUEST_SECONDS}_count", {"model_name": "digits", "model_version": "", "protocol": "rest"}) == 2


def test_the_regions_clients_register_are_the_state_s_the_requests_read_through(tmp_path):
    """The request paths (`wrappers.transport.shm_endpoints`, `wrappers.protocol.shared_tensors`, which import MLServer and so are served, not
    imported, here) read the regions as `process_state.current().regions`: a fresh state has none of another's."""
    values = np.arange(4, dtype=np.float32)
    (tmp_path / "block").write_bytes(values.tobytes())
    where = Location("in", 0, values.nbytes)
    with process_state.replaced(_fresh(tmp_path)) as state:
        state.regions.register("in", "/block", 0, values.nbytes)
        np.testing.assert_array_equal(process_state.current().regions.read(where, "FP32", [1, 4], "image"), values)
        with process_state.replaced(_fresh(tmp_path)):
            with pytest.raises(SharedMemoryError, match="no shared-memory region named 'in'"):
                process_state.current().regions.read(where, "FP32", [1, 4], "image")
        assert [region["name"] for region in process_state.current().regions.status()] == ["in"]


def test_a_fresh_state_admits_the_default_body_until_a_load_sizes_it():
    with process_state.replaced(_fresh()) as state:
        assert (state.body_limit.bytes, state.body_limit.large) == (DEFAULT_BODY_BYTES, None)
        state.body_limit.bytes = MIB  # as `body_layer.install` sizes it at a load
        with process_state.replaced(_fresh()):
            assert process_state.current().body_limit.bytes == DEFAULT_BODY_BYTES
        assert process_state.current().body_limit.bytes == MIB


def test_the_payload_logs_and_fast_paths_series_are_the_state_s_too():
    with process_state.replaced(_fresh()) as state:
        series = state.metrics
        first = series.counter("slipway_payload_events_sent", "sent", ("model_name", "model_version", "type"))
        assert series.counter("slipway_payload_events_sent", "sent", ("model_name", "model_version", "type")) is first
        series.gauge("slipway_fast_path_enabled", "on", ("path",), multiprocess_mode="max").labels(path="grpc_raw").set(1)
        assert series.registry.get_sample_value("slipway_fast_path_enabled", {"path": "grpc_raw"}) == 1


def test_a_switch_is_one_per_name_in_a_state_and_a_fresh_state_has_every_switch_off():
    installed: list[str] = []
    model = SimpleNamespace(name="digits")
    with process_state.replaced(_fresh()) as state:
        switch = state.switches.named("rest_infer.fast", install=lambda: installed.append("on"))
        switch.add(model)
        assert state.switches.named("rest_infer.fast") is switch and "digits" in switch
        with process_state.replaced(_fresh()):
            assert "digits" not in process_state.current().switches.named("rest_infer.fast")
        switch.discard(model)
        assert not switch and installed == ["on"]


def test_a_fresh_state_publishes_settings_and_class_tallies_in_its_own_registry():
    outputs = [SimpleNamespace(name="probabilities", datatype="FP32", shape=(-1, 10))]
    with process_state.replaced(_fresh()) as state:
        series = state.metrics
        series.publish_settings("digits", "1", {"intra_op_threads": (2, "measured")})
        tally = PredictedClasses.for_outputs(series, "digits", "1", outputs)
        assert tally is not None and PredictedClasses.for_outputs(series, "digits", "1", outputs) is tally
        tally.count([np.eye(10, dtype=np.float32)[[3, 3]]])
        value = series.registry.get_sample_value
        assert (
            value(SETTING, {"model_name": "digits", "model_version": "1", "setting": "intra_op_threads", "source": "measured"})
            == 2
        )
        assert value(f"{PREDICTED_CLASS}_total", {"model_name": "digits", "model_version": "1", CLASS_LABEL: "3"}) == 2


def test_first_uses_on_many_threads_at_once_make_one_state(monkeypatch):
    made: list[ProcessState] = []

    def make() -> ProcessState:  # each in a registry of its own, counted
        made.append(_fresh())
        return made[-1]

    monkeypatch.setattr(process_state, "ProcessState", make)
    with process_state.replaced(_fresh()):
        process_state._current.clear()  # as in a process no launcher began: the first use makes it
        barrier = threading.Barrier(8)

        def first_use() -> ProcessState:
            barrier.wait()
            return process_state.current()

        with ThreadPoolExecutor(8) as pool:
            states = list(pool.map(lambda _: first_use(), range(8)))
        assert len(made) == 1 and all(state is made[0] for state in states), "two made: every series registered twice"
