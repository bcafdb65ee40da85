"""A refused request is one WARNING line at a bounded rate, never a traceback; a server error keeps its traceback."""

from __future__ import annotations

import logging

import grpc
import numpy as np
import pytest

from tests.wrappers.v2 import GrpcClient, raw_request
from wrappers.operations.refusal_logs import BURST, RefusalLines


class ServingError(Exception):
    """MLServer's errors as the filter reads them (MLServer itself is not imported beside tritonclient here)."""

    def __init__(self, message: str, status_code: int = 400):
        super().__init__(message)
        self.status_code = status_code


class InferenceError(ServingError):
    pass


def _record(error: BaseException) -> logging.LogRecord:
    try:
        raise error
    except BaseException:
        import sys

        return logging.LogRecord("mlserver", logging.ERROR, __file__, 1, str(error), None, sys.exc_info())


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_client_error_is_one_warning_line_and_a_burst_beyond_the_rate_is_counted_not_logged():
    clock = Clock()
    lines = RefusalLines(ServingError, per_second=2, burst=3, clock=clock)
    passed = []
    for index in range(10):
        record = _record(InferenceError(f"model digits: input 'image' must have datatype FP32,\n got FP64 ({index})"))
        if lines.filter(record):
            passed.append(record)
    assert len(passed) == 3  # the burst, then nothing until time passes
    first = passed[0]
    assert first.levelno == logging.WARNING and first.exc_info is None and first.exc_text is None
    assert (
        first.getMessage()
        == "refused a request (InferenceError): model digits: input 'image' must have datatype FP32, got FP64 (0)"
    )
    clock.now = 1.0  # two more tokens at 2 per second
    later = [record for record in (_record(InferenceError("again")) for _ in range(3)) if lines.filter(record)]
    assert len(later) == 2 and later[0].getMessage().endswith("(7 more refused since, not logged)")
    assert "more refused since" not in later[1].getMessage()


def test_server_errors_and_other_records_pass_untouched():
    lines = RefusalLines(ServingError, per_second=0.001, burst=1)
    server_error = _record(ServingError("the session failed", status_code=500))
    assert lines.filter(server_error) and server_error.exc_info is not None and server_error.levelno == logging.ERROR
    plain = logging.LogRecord("mlserver", logging.INFO, __file__, 1, "loaded digits", None, None)
    assert lines.filter(plain) and plain.getMessage() == "loaded digits"
    crash = _record(RuntimeError("not a serving error"))
    assert lines.filter(crash) and crash.exc_info is not None


@pytest.mark.slow  # the shared digits server
def test_a_client_sending_malformed_grpc_requests_in_a_loop_grows_the_log_by_a_bounded_number_of_lines(digits_server):
    client = GrpcClient(digits_server.grpc_target)
    before = digits_server.log_path.stat().st_size
    bad = raw_request("digits", {"image": ("FP64", [1, 8, 8, 1], np.zeros((1, 8, 8, 1)).tobytes())})
    for _ in range(3 * BURST):
        with pytest.raises(grpc.RpcError) as caught:
            client.infer(bad)
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    with open(digits_server.log_path, "rb") as log:
        log.seek(before)
        added = log.read().decode(errors="replace")
    assert "Traceback" not in added, added[-2000:]
    refused = [line for line in added.splitlines() if "refused a request (InferenceError)" in line]
    assert 1 <= len(refused) <= BURST + 3, len(refused)  # the burst, and what the rate let through meanwhile
    assert all("must have datatype FP32" in line for line in refused)
