"""Locust user for V2 REST: POST one prepared inference body, again and again.

Configured by the runner through environment variables: SLIPWAY_MODEL (model name),
SLIPWAY_PAYLOAD (a JSON file holding the request body).
"""

import json
import os

from locust import FastHttpUser, constant, task

MODEL = os.environ.get("SLIPWAY_MODEL", "digits")
with open(os.environ["SLIPWAY_PAYLOAD"], "rb") as _handle:
    BODY = _handle.read()
json.loads(BODY)  # fail at start-up, not on the first request, when the payload is not JSON


class V2RestUser(FastHttpUser):
    wait_time = constant(0)

    @task
    def infer(self):
        self.client.post(
            f"/v2/models/{MODEL}/infer", data=BODY, headers={"Content-Type": "application/json"}, name="infer"
        )
