"""The hostile-load tier, small (issue 47): `benchmarks.hostile_load`'s probes against a real server started as the pod
starts it, checking what each must leave behind, never how fast (`python -m benchmarks hostile-load` measures that,
beside plain MLServer's, in reports/hostile-load.json). Each probe is bounded in count and time."""

from __future__ import annotations

import pytest

from benchmarks.body_memory import json_body, peak_growth
from benchmarks.hostile_load import (
    BYTES_MODEL,
    INT_MODEL,
    MIB,
    Tier,
    limits_env,
    malformed,
    served,
    sigterm,
    trickling,
    unknown_names,
)
from wrappers.limits.body_budget import JSON_AMPLIFICATION
from wrappers.operations.refusal_logs import BURST

pytestmark = pytest.mark.slow
TIER = Tier(body_mib=8, trickling=20, header_timeout_s=2, unknown_names=40, malformed=3 * BURST, clients=8, drain_s=10)
LINE_BYTES = 256  # at most, one refusal's WARNING line


@pytest.fixture(scope="module")
def env():
    body, _ = json_body(TIER.body_mib * MIB)
    return limits_env(TIER, len(body))


@pytest.fixture(scope="module")
def server(tmp_path_factory, env):
    with served(tmp_path_factory.mktemp("hostile"), "slipway", env) as running:
        yield running


@pytest.mark.parametrize(("datatype", "model"), [("FP32", "echo"), ("INT64", INT_MODEL), ("BYTES", BYTES_MODEL)])
def test_an_admitted_body_grows_the_server_by_less_than_the_budget_assumes(server, datatype, model):
    body, count = json_body(TIER.body_mib * MIB, datatype)
    grown = peak_growth(server, body, count, model, echoed=datatype != "BYTES")  # BYTES_MODEL answers the count
    assert grown["bytes_held_per_byte_sent"] < JSON_AMPLIFICATION, grown  # the body limit is sized by this factor


def test_no_trickling_connection_is_held_after_the_header_timeout(server):
    held = trickling(server, TIER.trickling, hold_s=TIER.header_timeout_s + 60)  # it ends once all are closed
    assert held["held_by_the_server"] == 0 and held["open_at_the_clients"] == 0, held
    assert held["serving_after_s"] is not None, held


def test_unknown_model_names_add_no_series_past_the_first(server):
    figures = unknown_names(server, TIER.unknown_names)
    assert figures["rest_statuses_of_the_second_half"] == {"404": TIER.unknown_names // 2}, figures
    assert figures["grpc_codes_of_the_second_half"] == {"NOT_FOUND": TIER.unknown_names // 2}, figures
    assert figures["series_after"] == figures["series_after_half"], figures  # the second half added none


def test_malformed_requests_log_a_bounded_number_of_lines_and_no_traceback(server):
    figures = malformed(server, TIER.malformed)
    assert figures["rest_statuses"] == {"400": TIER.malformed} and figures["grpc_codes"] == {"INVALID_ARGUMENT": TIER.malformed}
    assert figures["tracebacks"] == 0, figures
    # the burst, and what the rate lets through meanwhile: a few lines, not one per request
    assert figures["rest_log_bytes"] + figures["grpc_log_bytes"] <= (BURST + 10) * LINE_BYTES, figures
    assert figures["serving_after_s"] is not None, figures


def test_sigterm_under_8_clients_per_protocol_loses_none_and_the_server_exits_0(tmp_path, env):
    with served(tmp_path, "slipway", env) as running:
        figures = sigterm(running, TIER.clients, TIER.drain_s)
    assert figures["exit_code"] == 0, figures
    for protocol in ("rest", "grpc"):
        requests = figures["requests"][protocol]
        assert requests["answered"] > 0 and requests["refused"] == TIER.clients, figures  # each client stops at one refusal
        # every request sent was answered, or refused before it was taken (a refused connection, 503, UNAVAILABLE)
        assert requests["lost"] == 0, figures["lost_as"]


def test_sigterm_under_grpc_clients_that_send_again_on_every_refusal_loses_none_over_several_runs(tmp_path, env):
    """Clients that take no refusal as an answer leave the server never quiet: stopping grpc under them cancelled a
    call or more a run (CANCELLED). The gate holds their calls instead, then answers them once grpc's stop has sent
    its GOAWAY; every call is answered or refused UNAVAILABLE, however long they go on."""
    for run in range(3):
        with served(tmp_path / str(run), "slipway", env) as running:
            figures = sigterm(running, TIER.clients, TIER.drain_s, protocols=("grpc-retrying",))
            log = running.log_path.read_text()
        assert figures["exit_code"] == 0, figures
        requests = figures["requests"]["grpc-retrying"]
        assert requests["answered"] > 0 and requests["refused"] > TIER.clients, figures
        assert "holding each new call until gRPC stops" in log, figures  # they sent through all of the refusals
        assert requests["lost"] == 0, (run, figures["lost_as"])
