"""The runtime's front-end mode (`frontends` > 1): the session is the host's, the requests are this process's.

Where its settings say `frontends: N` above 1, `OnnxRuntime` gets a `HostRunner` instead of a session of its
own: the graph's inputs and outputs and the providers as the host's session reports them, so that the runtime
checks, advertises, pre/post-processes and encodes exactly as with a local session (the same 4xx answers), and
a batcher that sends each request's rows to the host (`client.HostClient.submit`, the batcher's signature).
Nothing is padded, warmed up or run inline here: the host pads and warms up as the runtime would, for every
front end at once. Run metrics come back with each reply; a run is observed once, by the front end whose
request held its first row. The host counts the predicted classes (`slipway_predicted_class_total`).
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from engine.runner import SessionRunner
from engine.tensor_specs import TensorSpec
from slipway.runtime_settings import RuntimeSettings, SettingsError
from wrappers.defaults.choice import CHOSEN, Choice
from wrappers.defaults.resolve import Resolved, resolve_for_session
from wrappers.frontends.client import HostClient, Observer, host_socket
from wrappers.operations.metrics import ModelMetrics
from wrappers.running import width as run_width
from wrappers.running.width import WidthRunner

logger = logging.getLogger(__name__)


class HostRunner:
    """The runtime's runner in front-end mode: the host's session described, its runs sent to the host."""

    device = "host"  # never "cpu": nothing runs inline on this event loop
    uses_io_binding = False
    fixed_outputs = False

    def __init__(self, client: HostClient):
        self.client = client
        self.session = client.session

    def run(self, output_names: list[str], feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        raise RuntimeError("a front end runs nothing itself: its runs go to the session host (HostClient.submit)")


def serve_through_host(config: RuntimeSettings, runner: object = None) -> tuple[RuntimeSettings, HostRunner]:
    """The front end's settings (no padding, no warm-up: the host's) and its runner, connected to the session host
    the supervisor named (HostUnavailable, one line, where none answers). A runner already connected is kept."""
    if config.shared_memory:
        raise SettingsError(
            "shared_memory cannot be served by several front ends: a client registers its region with "
            "one of them, and its requests may reach another; set shared_memory false or frontends 1"
        )
    hosted = config.model_copy(update={"batch_buckets": [], "warmup_runs": 0})
    return hosted, runner if isinstance(runner, HostRunner) else HostRunner(HostClient(host_socket()))


def runner_for(
    config: RuntimeSettings, model_path: Path, runner: object = None, *, keep_lone_session: bool = False
) -> tuple[RuntimeSettings, SessionRunner | WidthRunner | HostRunner]:
    """The settings to serve with and their runner: the session host's where `frontends` > 1 (it owns the session
    and runs the graph: `serve_through_host`), else a session of this process's own, built for these settings
    (`keep_lone_session`: `runner`'s lone session already is, and is kept)."""
    if config.frontends > 1:
        return serve_through_host(config, runner)
    if isinstance(runner, (SessionRunner, WidthRunner)):
        return config, run_width.rebuilt(model_path, config, runner, keep_lone_session=keep_lone_session)
    return config, run_width.runner(model_path, config)


def chosen_settings(
    config: RuntimeSettings,
    runner: SessionRunner | WidthRunner | HostRunner,
    inputs: list[TensorSpec],
    outputs: list[TensorSpec],
    *,
    model: str,
    version: str | None,
    mlserver_batching: bool,
    model_path: Path,
) -> Resolved:
    """The settings model-settings.json left unset, filled in where the model is timed: by the session host in
    front-end mode (a front end has no session to time), else on this process's own session (`serving_defaults`)."""
    if isinstance(runner, HostRunner):
        return chosen_by_host(config, runner, model)
    return resolve_for_session(
        config, runner, inputs, outputs, model=model, version=version, mlserver_batching=mlserver_batching, model_path=model_path
    )


def chosen_by_host(config: RuntimeSettings, runner: HostRunner, model: str) -> Resolved:
    """The settings the session host chose at load (a front end has no session to time), for this front end's
    log and metadata, each as the host chose it and why (the host publishes them in `slipway_setting`)."""
    choices = {
        name: Choice(name, value, source, reason)
        for name, (value, source, reason) in runner.client.description.get("choices", {}).items()
    }
    for choice in choices.values():
        logger.info(
            "%s: %s %g (%s, chosen by the session host): %s", model, choice.setting, choice.value, choice.source, choice.reason
        )
    chosen = config.model_copy(update={name: choice.value for name, choice in choices.items() if name in CHOSEN})
    return Resolved(chosen, choices, rebuild_session=False)


def start(runner: HostRunner, metrics: ModelMetrics) -> HostClient:
    """The client as the model's batcher, its replies observed into the model's metrics, reading on this loop (the
    predicted classes are the host's to count: it sees every front end's rows)."""
    runner.client.observe = observer(metrics)
    runner.client.start_soon()
    return runner.client


def observer(metrics: ModelMetrics) -> Observer:
    """Every request's queue time in the host; a run's seconds and rows once per run."""

    def observe(outputs: list[np.ndarray], queue_seconds: float, run_seconds: float, run_rows: int) -> None:
        metrics.queue_seconds.observe(queue_seconds)
        if run_rows:
            metrics.inference_seconds.observe(run_seconds)
            metrics.batch_rows.observe(run_rows)

    return observe
