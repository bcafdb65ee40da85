"""Recorded series of a stable and a canary predictor in a real Prometheus: written as OpenMetrics text, backfilled
into a TSDB with `promtool tsdb create-blocks-from openmetrics`, served by `prometheus` (both built from
Prometheus' Go module, localcluster/components.py) on a free loopback port, tied to the test run and
stopped by PID.

Each scenario is a namespace of its own holding one SeldonDeployment (`digits`) with a stable predictor
(`default`, two pods) and a canary (`canary`, one pod), labelled as the rendered PodMonitor's scrape labels
them: `namespace`, `pod`, `container`, `endpoint`, `job`, `instance`, and the pod labels `slipway.io/model`
and `slipway.io/predictor` as `slipway_io_model` and `slipway_io_predictor`. The metrics are the ones the
pods export: MLServer's `model_infer_request_success_total` / `model_infer_request_failure_total`
(labels model, version; the failure counter only exists once a request failed) and the runtime's
`slipway_inference_seconds` (the run) and `slipway_request_seconds` (the whole request) histograms (labels
model_name, model_version, and protocol for the latter; wrappers/operations/metrics.py's buckets).
"""

from __future__ import annotations

import math
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from slipway.ports import LOOPBACK, free_port

NAMESPACE_OF = {
    "healthy": "canary-healthy",
    "slow": "canary-slow",
    "slow-outside": "canary-slow-outside",
    "erroring": "canary-erroring",
    "sparse": "canary-sparse",
}
DEPLOYMENT, STABLE, CANARY = "digits", "default", "canary"
SCRAPE_S = 15
RECORDED_S = 15 * 60  # a quarter hour of scrapes, the last at `end`
UPTIME_S = 3600.0  # the pods had served for an hour before the first recorded scrape
SECONDS_BUCKETS = (0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


@dataclass(frozen=True)
class Behaviour:
    """One pod's traffic: requests/s, the failed share, the run's latency as a mix of log-normals (weight, median s,
    sigma), the whole request's (`request`; unset: the run's, nothing measurable around it), and for a classifier
    the share of rows each class wins."""

    rps: float
    failed: float = 0.0
    latency: tuple[tuple[float, float, float], ...] = ((1.0, 0.004, 0.3),)
    classes: tuple[float, ...] = ()
    request: tuple[tuple[float, float, float], ...] | None = None

    def cdf(self, seconds: float, *, request: bool = False) -> float:
        return sum(
            weight * 0.5 * (1 + math.erf(math.log(seconds / median) / (sigma * math.sqrt(2))))
            for weight, median, sigma in self._mix(request)
        )

    def mean(self, *, request: bool = False) -> float:
        return sum(weight * median * math.exp(sigma**2 / 2) for weight, median, sigma in self._mix(request))

    def _mix(self, request: bool) -> tuple[tuple[float, float, float], ...]:
        return self.request if request and self.request is not None else self.latency


STABLE_POD = Behaviour(rps=10.0)
SCENARIOS = {  # scenario -> the canary pod's behaviour (the stable pods are STABLE_POD throughout)
    "healthy": Behaviour(rps=2.0),
    "slow": Behaviour(rps=2.0, latency=((0.88, 0.004, 0.3), (0.12, 0.040, 0.1))),  # a slow tail: p95 ~40 ms
    # the same tail around an unchanged run (decoding, queueing, processing): ONNX Runtime's figure alone passes it
    "slow-outside": Behaviour(rps=2.0, request=((0.88, 0.004, 0.3), (0.12, 0.040, 0.1))),
    "erroring": Behaviour(rps=2.0, failed=0.05),
    "sparse": Behaviour(rps=0.2),  # 60 requests in 5 minutes
}
# namespace -> predictor -> (each pod's behaviour, pods)
Layout = dict[str, dict[str, tuple[Behaviour, int]]]
SHADOW = "shadow"
UNIFORM_CLASSES = tuple([0.1] * 10)
SKEWED_CLASSES = (0.05, 0.05, 0.05, 0.4, 0.05, 0.1, 0.1, 0.05, 0.1, 0.05)  # total variation from uniform: 0.3
CLASSIFYING_POD = Behaviour(rps=10.0, classes=UNIFORM_CLASSES)
JUDGE_LAYOUT: Layout = {
    **{NAMESPACE_OF[scenario]: {STABLE: (STABLE_POD, 2), CANARY: (canary, 1)} for scenario, canary in SCENARIOS.items()},
    # a shadow mirrored the stable's 2 x 10 requests/s: answering alike, or with class 3 winning far more often
    "shadow-faithful": {STABLE: (CLASSIFYING_POD, 2), SHADOW: (Behaviour(rps=20.0, classes=UNIFORM_CLASSES), 1)},
    "shadow-drifting": {STABLE: (CLASSIFYING_POD, 2), SHADOW: (Behaviour(rps=20.0, classes=SKEWED_CLASSES), 1)},
    "shadow-regressor": {STABLE: (STABLE_POD, 2), SHADOW: (Behaviour(rps=20.0), 1)},  # no class counter at all
}


def _labels(labels: dict[str, str]) -> str:
    return "{" + ",".join(f'{key}="{value}"' for key, value in labels.items()) + "}"


def _pods(layout: Layout) -> list[tuple[dict[str, str], Behaviour]]:
    pods = []
    for namespace, predictors in layout.items():
        index = 0
        for predictor, (behaviour, count) in predictors.items():
            for pod in range(count):
                index += 1
                pods.append(
                    (
                        {
                            "namespace": namespace,
                            "pod": f"{DEPLOYMENT}-{predictor}-0-{DEPLOYMENT}-5f6b8-{pod:05d}",
                            "container": DEPLOYMENT,
                            "endpoint": "metrics",
                            "job": f"{namespace}/{DEPLOYMENT}-mlserver",
                            "instance": f"10.244.0.{10 + index}:6000",
                            "slipway_io_model": DEPLOYMENT,
                            "slipway_io_predictor": predictor,
                        },
                        behaviour,
                    )
                )
    return pods


def openmetrics(end: float, layout: Layout = JUDGE_LAYOUT, *, recorded_s: int = RECORDED_S) -> str:
    """Every namespace's series from `end - recorded_s` to `end`, one sample per scrape, as OpenMetrics text."""
    stamps = [end - recorded_s + step * SCRAPE_S for step in range(recorded_s // SCRAPE_S + 1)]
    pods = [
        (labels, behaviour, [behaviour.rps * (UPTIME_S + stamp - stamps[0]) for stamp in stamps])
        for labels, behaviour in _pods(layout)
    ]  # requests served by each scrape
    model = {"model": DEPLOYMENT, "version": "3"}
    lines = ["# TYPE model_infer_request_success counter", "# HELP model_infer_request_success Model infer request success count"]
    for labels, behaviour, served in pods:
        for stamp, count in zip(stamps, served):
            lines.append(
                f"model_infer_request_success_total{_labels({**labels, **model})} "
                f"{math.floor(count * (1 - behaviour.failed))} {stamp:.3f}"
            )
    lines += [
        "# TYPE model_infer_request_failure counter",
        "# HELP model_infer_request_failure Model infer request failure count",
    ]
    for labels, behaviour, served in pods:
        if behaviour.failed:  # MLServer's labelled counter exists only after the first failure
            for stamp, count in zip(stamps, served):
                lines.append(
                    f"model_infer_request_failure_total{_labels({**labels, **model})} "
                    f"{math.floor(count * behaviour.failed)} {stamp:.3f}"
                )
    runtime = {"model_name": DEPLOYMENT, "model_version": "3"}
    for name, help_text, extra, request in (
        (
            "slipway_inference_seconds",
            "Time inside ONNX Runtime per run (one run may serve several merged requests)",
            {},
            False,
        ),
        ("slipway_request_seconds", "Time from an inference request's arrival to its answer", {"protocol": "rest"}, True),
    ):
        lines += [f"# TYPE {name} histogram", f"# HELP {name} {help_text}"]
        for labels, behaviour, served in pods:
            series = {**labels, **runtime, **extra}
            for stamp, count in zip(stamps, served):
                runs = math.floor(count)
                for bound in SECONDS_BUCKETS:
                    lines.append(
                        f"{name}_bucket{_labels({**series, 'le': repr(bound)})} "
                        f"{math.floor(runs * behaviour.cdf(bound, request=request))} {stamp:.3f}"
                    )
                lines.append(f"{name}_bucket{_labels({**series, 'le': '+Inf'})} {runs} {stamp:.3f}")
                lines.append(f"{name}_count{_labels(series)} {runs} {stamp:.3f}")
                lines.append(f"{name}_sum{_labels(series)} {runs * behaviour.mean(request=request):.6f} {stamp:.3f}")
    lines += [
        "# TYPE slipway_predicted_class counter",
        "# HELP slipway_predicted_class Rows whose highest score was this class (arg-max of the scores output)",
    ]
    for labels, behaviour, served in pods:
        for winner, share in enumerate(behaviour.classes):
            series = {**labels, **runtime, "class": str(winner)}
            for stamp, count in zip(stamps, served):
                lines.append(f"slipway_predicted_class_total{_labels(series)} {math.floor(count * share)} {stamp:.3f}")
    return "\n".join([*lines, "# EOF", ""])


@dataclass(frozen=True)
class Recorded:
    """The backfilled TSDB blocks and the time of the last recorded scrape."""

    blocks: Path
    end: float


@pytest.fixture(scope="session")
def prometheus_tools() -> dict[str, Path]:
    from localcluster.build import build_all
    from localcluster.components import COMPONENTS

    built = build_all(tuple(component for component in COMPONENTS if component.name == "prometheus"))
    return {name: built["prometheus"] / "bin" / name for name in ("prometheus", "promtool")}


def backfill(
    promtool: Path, folder: Path, end: float, layout: Layout = JUDGE_LAYOUT, *, recorded_s: int = RECORDED_S
) -> Recorded:
    """`layout`'s series up to `end` written as TSDB blocks by promtool, in `folder`/blocks."""
    source = folder / "series.om.txt"
    source.write_text(openmetrics(end, layout, recorded_s=recorded_s))
    result = subprocess.run(
        [str(promtool), "tsdb", "create-blocks-from", "openmetrics", str(source), str(folder / "blocks")],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, f"promtool backfill failed: {result.stdout[-2000:]} {result.stderr[-2000:]}"
    assert any((folder / "blocks").iterdir()), "promtool wrote no block"
    return Recorded(folder / "blocks", end)


@pytest.fixture(scope="package")
def recorded(tmp_path_factory, prometheus_tools) -> Recorded:
    end = float(math.floor(time.time() / SCRAPE_S) * SCRAPE_S - SCRAPE_S)
    return backfill(prometheus_tools["promtool"], tmp_path_factory.mktemp("canary-series"), end)


@contextmanager
def prometheus(binary: Path, folder: Path, args: list[str], *, headers: dict[str, str] | None = None) -> Iterator[str]:
    """Prometheus with `args` on a free loopback port, its log in `folder`, until it is ready; its URL. Stopped by
    PID afterwards. `headers`: what the readiness probe sends (a web config's credentials)."""
    from localcluster.processes import last_lines, running, start, stop

    port = free_port()
    process = start("prometheus", binary, [*args, f"--web.listen-address={LOOPBACK}:{port}"], log_dir=folder, tied=True)
    url = f"http://{LOOPBACK}:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert running(process), f"prometheus exited: {last_lines(process)}"
            try:
                with urllib.request.urlopen(urllib.request.Request(f"{url}/-/ready", headers=headers or {}), timeout=1):
                    break
            except (urllib.error.URLError, OSError):
                assert time.monotonic() < deadline, f"prometheus was not ready in 60 s: {last_lines(process)}"
                time.sleep(0.1)
        yield url
    finally:
        assert stop([process]) == ["prometheus"] and not running(process)


@contextmanager
def serving(
    binary: Path, recorded: Recorded, folder: Path, *, web_config: str | None = None, headers: dict[str, str] | None = None
) -> Iterator[str]:
    """Prometheus over a copy of the recorded blocks on a free loopback port (no scraping); its URL.
    `web_config`: the --web.config.file contents (e.g. basic auth users); `headers`: what the readiness
    probe sends then."""
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copytree(recorded.blocks, folder / "data")
    (folder / "prometheus.yml").write_text(f"global:\n  scrape_interval: {SCRAPE_S}s\n")
    args = [
        f"--config.file={folder / 'prometheus.yml'}",
        f"--storage.tsdb.path={folder / 'data'}",
        "--storage.tsdb.retention.time=30d",
        "--log.level=warn",
    ]
    if web_config is not None:
        (folder / "web.yml").write_text(web_config)
        args.append(f"--web.config.file={folder / 'web.yml'}")
    with prometheus(binary, folder, args, headers=headers) as url:
        yield url


@pytest.fixture(scope="package")
def prometheus_url(recorded, prometheus_tools, tmp_path_factory) -> Iterator[str]:
    with serving(prometheus_tools["prometheus"], recorded, tmp_path_factory.mktemp("prometheus")) as url:
        yield url
