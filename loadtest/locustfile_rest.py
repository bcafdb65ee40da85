"""Locust user for V2 REST: POST one prepared inference body (V2 JSON, or Triton's binary tensors), again and again.

Started by `python -m loadtest run`, which writes the job (endpoint, shape, payload) that
`current_job()` reads; the shape comes from `loadtest.shapes`.
"""

from locust import FastHttpUser, constant, task

from loadtest.config import current_job
from loadtest.shapes import PlannedShape  # noqa: F401  (Locust picks the shape up from this module)

JOB = current_job()
BODY = JOB.payload_bytes()
HEADERS = JOB.request_headers


class V2RestUser(FastHttpUser):
    wait_time = constant(0)
    network_timeout = JOB.request_timeout_s
    connection_timeout = JOB.request_timeout_s

    @task
    def infer(self):
        self.client.post(JOB.endpoint.infer_path, data=BODY, headers=HEADERS, name="infer")
