"""The process's registries have one owner (`wrappers.process_state`): a test serves with a fresh one, no resets."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from slipway.metric_names import REQUEST_SECONDS, UNKNOWN_MODEL_REQUESTS
from wrappers import process_state
from wrappers.operations.metrics import MetricSeries, ModelMetrics
from wrappers.process_state import ProcessState


def _fresh() -> ProcessState:
    return ProcessState(metrics=MetricSeries(CollectorRegistry()))


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
