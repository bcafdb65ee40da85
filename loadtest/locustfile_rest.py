"""Locust user for V2 REST: POST one prepared inference body (V2 JSON, or Triton's binary tensors), again and again.

Started by `python -m loadtest run`, which writes the job (endpoint, shape, payload) that
`current_job()` reads; the shape comes from `loadtest.shapes`.
"""

from locust import FastHttpUser, constant, task

from loadtest.config import current_job
from loadtest.shapes import PlannedShape  # noqa: F401  (Locust picks the shape up from this module)
from slipway.v2_wire import BINARY_HEADER

JOB = current_job()
BODY = JOB.payload_bytes()
HEADERS = JOB.request_headers


def answers_v2(content: bytes | None, headers) -> bool:
    """Whether a 2xx body is a V2 inference answer: a JSON object (or binary answer's JSON header) naming outputs.

    A proxy's or a wrong server's HTML page would otherwise count as served. A substring, not a JSON parse,
    so checking stays cheap beside the request.
    """
    content = content or b""
    try:
        header = content[: int(headers.get(BINARY_HEADER) or len(content))]
    except ValueError:  # a binary answer's header length that is not a number
        return False
    return header.lstrip().startswith(b"{") and b'"outputs"' in header


class V2RestUser(FastHttpUser):
    wait_time = constant(0)
    network_timeout = JOB.request_timeout_s
    connection_timeout = JOB.request_timeout_s

    @task
    def infer(self):
        with self.client.post(JOB.endpoint.infer_path, data=BODY, headers=HEADERS, name="infer", catch_response=True) as response:
            answered = response.request_meta["exception"] is None  # else Locust counts the error itself
            if answered and not answers_v2(response.content, response.headers or {}):
                response.failure(f"HTTP {response.status_code} answered without V2 outputs")
