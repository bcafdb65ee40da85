"""A real series for KEDA's Prometheus triggers: a small exporter on loopback and Prometheus scraping it every second.

The exporter serves MLServer's request counter (`model_infer_request_success_total`) with the labels the PodMonitor
gives a model's pods (namespace, slipway_io_model, slipway_io_predictor), growing at the rate a test sets, and
DCGM's `DCGM_FI_DEV_GPU_UTIL` gauge per card with the labels NVIDIA's exporter gives it in its Kubernetes mode, at
the value a test sets, through prometheus_client's own exposition; Prometheus (the `prometheus` component) scrapes
it with honor_labels, as it scrapes pods (and the DCGM exporter) whose labels are their own, so the rendered
triggers' queries read it unchanged.
"""

from __future__ import annotations

import threading
import time
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from deployments.render.autoscaling import GPU_UTIL_METRIC, REQUEST_COUNTER
from slipway.ports import LOOPBACK, free_port
from tests.deployments.canary.series import prometheus

SCRAPE_S = 1
TICK_S = 0.2
DCGM_LABELS = ("gpu", "UUID", "Hostname", "modelName", "device", "pod", "namespace", "container")


class Exporter:
    """Per (namespace, model, predictor) a request counter growing by its `rate` each second, and per card a
    utilization gauge, served at /metrics."""

    def __init__(self) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge

        self.registry = CollectorRegistry()
        self.counter = Counter(
            REQUEST_COUNTER.removesuffix("_total"),
            "successful inference requests (as MLServer counts them)",
            ["namespace", "slipway_io_model", "slipway_io_predictor"],
            registry=self.registry,
        )
        self.gpu_util = Gauge(
            GPU_UTIL_METRIC,
            "GPU utilization (in %), as NVIDIA's DCGM exporter names it",
            list(DCGM_LABELS),
            registry=self.registry,
        )
        self.rates: dict[tuple[str, str, str], float] = {}
        self.lock = threading.Lock()
        self.stopped = threading.Event()

    def set_rate(self, namespace: str, model: str, predictor: str, rate: float) -> None:
        with self.lock:
            self.rates[(namespace, model, predictor)] = rate
            self.counter.labels(namespace, model, predictor).inc(0)  # the series exists from now on, at 0 req/s too

    def set_gpu_util(self, namespace: str, container: str, card: int, percent: float) -> None:
        """One card's utilization, labelled as the DCGM exporter labels the card a container holds."""
        labels = {
            "gpu": str(card),
            "UUID": f"GPU-{zlib.crc32(f'{namespace}/{container}/{card}'.encode()):08x}",
            "Hostname": "slipway-gpu-1",
            "modelName": "NVIDIA L4",
            "device": f"nvidia{card}",
            "pod": f"{container}-{card}",
            "namespace": namespace,
            "container": container,
        }
        self.gpu_util.labels(**labels).set(percent)

    def _tick(self) -> None:
        last = time.monotonic()
        while not self.stopped.wait(TICK_S):
            now = time.monotonic()
            with self.lock:
                for labels, rate in self.rates.items():
                    self.counter.labels(*labels).inc(rate * (now - last))
            last = now

    @contextmanager
    def serving(self) -> Iterator[str]:
        """Serve /metrics on a free loopback port while the counters grow; the target's host:port."""
        from prometheus_client import generate_latest

        registry = self.registry

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                body = generate_latest(registry)
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args) -> None:
                pass

        server = ThreadingHTTPServer((LOOPBACK, free_port()), Handler)
        threads = [threading.Thread(target=server.serve_forever, daemon=True), threading.Thread(target=self._tick, daemon=True)]
        for thread in threads:
            thread.start()
        try:
            yield f"{LOOPBACK}:{server.server_address[1]}"
        finally:
            self.stopped.set()
            server.shutdown()
            server.server_close()
            for thread in threads:
                thread.join(timeout=5)


@contextmanager
def scraping(binary: Path, target: str, folder: Path) -> Iterator[str]:
    """Prometheus scraping `target` every SCRAPE_S on a free loopback port, stopped by PID afterwards; its URL."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "prometheus.yml").write_text(
        f"global:\n  scrape_interval: {SCRAPE_S}s\n  evaluation_interval: {SCRAPE_S}s\n"
        f"scrape_configs:\n  - job_name: models\n    honor_labels: true\n    static_configs:\n      - targets: ['{target}']\n"
    )
    args = [f"--config.file={folder / 'prometheus.yml'}", f"--storage.tsdb.path={folder / 'data'}", "--log.level=warn"]
    with prometheus(binary, folder, args) as url:
        yield url


def query(url: str, expr: str) -> float | None:
    """The single value of an instant query (None when it has no sample)."""
    import json
    import urllib.parse

    with urllib.request.urlopen(f"{url}/api/v1/query?{urllib.parse.urlencode({'query': expr})}", timeout=5) as answer:
        result = json.loads(answer.read())["data"]["result"]
    return float(result[0]["value"][1]) if result else None
