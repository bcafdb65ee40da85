"""The payload-log settings and redaction rules, without a server (the server tests: test_payload_log.py)."""

from __future__ import annotations

import pytest

from slipway.runtime_settings import SettingsError, parse_runtime_settings
from wrappers.operations.payload_events import REDACTED, Origin, Redaction


def test_payload_logging_is_off_unless_asked_and_strict_when_asked():
    assert parse_runtime_settings({}).payload_log is None
    logged = parse_runtime_settings({"payload_log": {"url": "https://collector.example/events"}}).payload_log
    assert (logged.sample, logged.queue_size, logged.event_types) == (1.0, 1000, "seldon")


@pytest.mark.parametrize(
    "payload_log, message",
    [
        ({"url": "ftp://collector"}, "payload_log.url"),
        ({"url": "http://c", "sample": 1.5}, "payload_log.sample"),
        ({"url": "http://c", "max_bytes": 10}, "payload_log.max_bytes"),
        ({"url": "http://c", "queue": 5}, "payload_log.queue"),
        ({"url": "http://c", "event_types": "knative"}, "payload_log.event_types"),
        ({"sample": 0.5}, "payload_log.url"),
    ],
)
def test_a_wrong_payload_log_setting_is_refused_in_one_line_naming_it(payload_log, message):
    with pytest.raises(SettingsError) as refused:
        parse_runtime_settings({"payload_log": payload_log})
    assert message in str(refused.value) and "\n" not in str(refused.value)


def test_redaction_matches_names_anywhere_and_paths_exactly_ignoring_case():
    redaction = Redaction(["Image", "parameters/headers/x-user"])
    assert redaction.hides(("inputs", "image")) and redaction.hides(("outputs", "IMAGE"))
    assert redaction.hides(("parameters", "headers", "X-User"))
    assert not redaction.hides(("parameters", "x-user"))  # a path matches only where it points
    assert redaction.hides(("parameters", "headers", "Authorization"))  # credentials always
    parameters = {
        "headers": {"authorization": "Bearer t", "x-user": "bob", "cookie": "c", "accept": "*/*"},
        "image": {"nested": 1},
        "x-user": "kept",
    }
    assert redaction.mapping(parameters, ("parameters",)) == {
        "headers": {"authorization": REDACTED, "x-user": REDACTED, "cookie": REDACTED, "accept": "*/*"},
        "image": REDACTED,
        "x-user": "kept",
    }


def test_the_event_source_names_the_pod_seldon_describes():
    settings = parse_runtime_settings({"payload_log": {"url": "http://c", "event_types": "kserve"}}).payload_log
    env = {"SLIPWAY_NAMESPACE": "ml", "SELDON_DEPLOYMENT_ID": "digits", "PREDICTOR_ID": "canary"}
    origin = Origin.for_model("digits", "4", settings, env)
    assert origin.source == "/namespaces/ml/seldondeployments/digits/predictors/canary"
    assert origin.event_type("response") == "org.kubeflow.serving.inference.response"
    assert (
        Origin.for_model("digits", None, settings, {}).source == "/namespaces/unknown/seldondeployments/digits/predictors/unknown"
    )
