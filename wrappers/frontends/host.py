"""The session host: the one process that owns a model's ONNX Runtime session and runs what every front end sends.

It builds the session as the runtime does (`engine.session`, `wrappers.running.planning`, `wrappers.running.warm_up`)
and merges requests from all front ends into runs with the runtime's own batcher (`wrappers.running.batching`): all
connections are served on one event loop, so a run takes rows from any front end. Its loop only parses small
messages and copies outputs into slots (`ring`): decoding protobuf or JSON, the work that saturated a single
server's loop, stays in the front ends. Started by `wrappers.frontends.supervisor`:
`python -m wrappers.frontends.host MODEL_DIR SOCKET`.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import Any, cast

import numpy as np
import uvloop
from onnxruntime.capi.onnxruntime_pybind11_state import Fail, InvalidArgument
from prometheus_client import Counter

from engine.runner import SessionRunner
from engine.tensor_specs import TensorSpec, describe
from slipway import atomic
from slipway.artifact import SETTINGS_FILE, ArtifactError
from slipway.cli import ArgumentParser, UserError, exit_with, first_line
from slipway.files import FileProblem, read_json
from slipway.runtime_settings import RuntimeSettings, SettingsError, TopKPostprocessing, parse_runtime_settings
from slipway.v2_wire import BYTES
from wrappers import process_state
from wrappers.defaults.choice import Choice
from wrappers.defaults.gpu import plan_buckets
from wrappers.defaults.resolve import resolve_for_session
from wrappers.frontends import protocol, with_pod_frontends
from wrappers.frontends.ring import RingError, SlotMap
from wrappers.model.artifact_checks import verify_folder, with_content_keyed_cache
from wrappers.operations.metrics import CLASS_LABEL, LABELS, PREDICTED_CLASS, PredictedClasses
from wrappers.running import width as run_width
from wrappers.running.batching import RowBatcher, run_in_buckets
from wrappers.running.bucket_sessions import BucketRunner
from wrappers.running.planning import (
    BatchingConfigError,
    plan_runs,
    runs_inline,
    warm_up_sizes,
)
from wrappers.running.warm_up import WarmUp, WarmUpError
from wrappers.running.width import WidthRunner

logger = logging.getLogger(__name__)
MAX_SLOTS = 1024  # per front end
# What ONNX Runtime raises when a run fails on what it was fed, as in `wrappers.runtime` (which imports MLServer,
# not wanted in the host): merged requests are then rerun apart, and the front end answers HTTP 400.
INPUT_ERRORS = (InvalidArgument, Fail)
_STATS_COLUMNS = 4  # per row of a run: its start, its seconds, its rows, the row's index in it


class HostError(RuntimeError):
    """The model cannot be hosted; the message says which file or setting to change."""


def read_model(model_dir: Path) -> tuple[str, str | None, Path, RuntimeSettings]:
    """The name, version, graph file and runtime settings that `model-settings.json` in `model_dir` gives."""
    path = model_dir / SETTINGS_FILE
    try:
        settings = read_json(path)
    except FileProblem as err:
        raise HostError(f"{err}: the session host needs the model folder's {SETTINGS_FILE}") from err
    if not isinstance(settings, dict) or not isinstance(settings.get("name"), str):
        raise HostError(f'{path} names no model: it needs a "name"')
    parameters = settings.get("parameters") or {}
    try:
        config = with_pod_frontends(parse_runtime_settings(parameters.get("extra")))
    except SettingsError as err:
        raise HostError(str(err)) from err
    graph = model_dir / (parameters.get("uri") or "model.onnx")
    return settings["name"], parameters.get("version"), graph, config


def serving_file(socket_path: Path) -> Path:
    """Where the host says how many front ends serve (`SessionHost.serving`)."""
    return socket_path.with_name(socket_path.name + ".serving")


def _scores_index(name: str, version: str | None, outputs: list[TensorSpec], config: RuntimeSettings) -> int | None:
    """Which output's arg-max is counted per class, by the runtime's rule (`PredictedClasses.for_outputs`)."""
    scores = config.postprocess.output if isinstance(config.postprocess, TopKPostprocessing) else None
    if PredictedClasses.for_outputs(process_state.current().metrics, name, version, outputs, scores) is None:
        return None
    return next((index for index, spec in enumerate(outputs) if spec.name == scores), 0)


class SessionHost:
    """One model's session, its batcher, and the front ends connected to it."""

    def __init__(self, model_dir: Path):
        self.name, self.version, graph, config = read_model(model_dir)
        if not graph.is_file():
            raise HostError(f"{graph} does not exist: parameters.uri in {SETTINGS_FILE} must name the ONNX file")
        try:
            verify_folder(graph.parent, self.name, self.version, config.verify_manifest)
            config = with_content_keyed_cache(config, self.name, graph)
        except (ArtifactError, SettingsError) as err:
            raise HostError(f"model {self.name}: {err}") from err
        try:
            self.runner: SessionRunner | WidthRunner | BucketRunner = run_width.runner(graph, config)
        except Exception as err:  # ONNX Runtime raises its own types: a graph it cannot load, a provider that fails
            raise HostError(f"model {self.name}: ONNX Runtime cannot build a session of {graph}: {first_line(err)}") from err
        self.inputs, self.outputs = describe(self.runner.session)
        self.output_names = [spec.name for spec in self.outputs]
        strings = [spec.name for spec in [*self.inputs, *self.outputs] if spec.datatype == BYTES]
        if strings:
            raise HostError(
                f"model {self.name}: graph tensors {strings} hold strings, which cannot go through shared "
                "memory to the session host; set frontends to 1"
            )
        self.config, self.choices = self._choose(config, graph)
        try:
            plan = plan_runs(
                self.config,
                self.inputs,
                self.outputs,
                merging=self.config.max_batch_rows > 1,
                on_cpu=self.runner.device == "cpu",
                fixed_outputs=self.runner.fixed_outputs,
                providers=self.runner.session.get_providers(),
                model=self.name,
            )
        except BatchingConfigError as err:
            raise HostError(f"model {self.name}: {err}") from err
        self.buckets = plan.buckets
        if plan.settings is not self.config:  # as the runtime does: one TensorRT profile over the padded row counts
            self.config = plan.settings
            self.runner = run_width.runner(graph, plan.settings)
        bucketed = plan_buckets(
            graph,
            self.config,
            self.buckets,
            self.runner.session.get_providers(),
            self.inputs,
            self.output_names,
            model=self.name,
            version=self.version,
        )
        if bucketed is not None:  # as the runtime does: a session per bucket, its kernels' settings timed here
            self.config, self.runner = bucketed.settings, bucketed.runner
            self.choices.update(bucketed.choices)
        self._scores = _scores_index(self.name, self.version, self.outputs, self.config)
        self._class_rows = Counter(
            PREDICTED_CLASS, "Rows whose highest score was this class", labelnames=(*LABELS, CLASS_LABEL), registry=None
        )  # not served here: written to the front ends' multi-process files
        sizes = warm_up_sizes(self.buckets, self.config.warmup_batch_sizes, self.config.warmup_runs)
        self.warm_up = warm_up = WarmUp(self.name, self.inputs, self.output_names, sizes, self.config.warmup_runs)
        try:
            self.batcher = RowBatcher(
                self._run,
                max_rows=self.config.max_batch_rows,
                max_runs=self.config.inference_threads,
                input_errors=INPUT_ERRORS,
                thread_name=f"host-{self.name}",
                warm_up=partial(warm_up.run, self.runner),
                buckets=self.buckets,
            )
        except WarmUpError as err:
            raise HostError(f"model {self.name}: {err}") from err
        self.open: set[_Connection] = set()
        self.front_ends_serving: set[_Connection] = set()
        self.socket_path: Path | None = None

    def _choose(self, config: RuntimeSettings, graph: Path) -> tuple[RuntimeSettings, dict[str, Choice]]:
        """The settings left unset, chosen as the runtime chooses them for a session of its own
        (`serving_defaults`: timed here on the CPU; on a GPU provider runs merge up to the largest bucket).
        Explicit settings win. The session is rebuilt where the intra-op threads chosen are not those it was
        built with."""
        runner = self.runner
        assert not isinstance(runner, BucketRunner), "sessions per bucket come after the settings are chosen"
        resolved = resolve_for_session(
            config,
            runner,
            self.inputs,
            self.outputs,
            model=self.name,
            version=self.version,
            mlserver_batching=False,
            model_path=graph,
        )
        if resolved.rebuild_session:
            self.runner = run_width.rebuilt(graph, resolved.settings, runner, keep_lone_session=resolved.keeps_lone_session)
        return resolved.settings, dict(resolved.choices)

    @property
    def connections(self) -> int:
        return len(self.open)

    def serving(self, connection: _Connection, serves: bool) -> None:
        """Count the front ends that have loaded the model, in `<socket>.serving` (the supervisor reports the server
        started once every front end serves: one still loading would answer that the model is not ready)."""
        before = len(self.front_ends_serving)
        if serves:
            self.front_ends_serving.add(connection)
        else:
            self.front_ends_serving.discard(connection)
        if self.socket_path is not None and len(self.front_ends_serving) != before:
            atomic.write_text(serving_file(self.socket_path), f"{len(self.front_ends_serving)}\n")

    def _inline(self, rows: int) -> bool:
        return runs_inline(self.warm_up.seconds_per_row, self.runner.device == "cpu", rows, self.config.inline_below_ms)

    def description(self) -> dict[str, Any]:
        """What a front end needs to check and advertise requests without a session of its own."""
        return {
            "model": self.name,
            # As ONNX Runtime describes them (type strings, symbolic dimensions): `engine.tensor_specs.describe` reads them.
            "inputs": [[node.name, node.type, node.shape] for node in self.runner.session.get_inputs()],
            "outputs": [[node.name, node.type, node.shape] for node in self.runner.session.get_outputs()],
            "providers": self.runner.session.get_providers(),
            "device": self.runner.device,
            "buckets": self.buckets,
            # The settings chosen here, for the front ends' metadata: [value, source, reason] by name.
            "choices": {name: [choice.value, choice.source, choice.reason] for name, choice in self.choices.items()},
            "pid": os.getpid(),
        }

    def _run(self, feeds: dict[str, np.ndarray], rows: int) -> list[np.ndarray]:
        """One run on a batcher thread, padded to the buckets as the runtime pads; a last output carries, per row,
        the run's start, its seconds, its rows and the row's place in it, which the batcher splits per request."""
        started = time.perf_counter()
        run = partial(self.runner.run, self.output_names)
        outputs = run(feeds) if not self.buckets or rows in self.buckets else run_in_buckets(run, feeds, rows, self.buckets)
        if self._scores is not None:
            self._count_classes(outputs[self._scores])
        stats = np.empty((rows, _STATS_COLUMNS))
        stats[:, 0], stats[:, 1], stats[:, 2] = started, time.perf_counter() - started, rows
        stats[:, 3] = np.arange(rows)
        return [*outputs, stats]

    def _count_classes(self, scores: np.ndarray) -> None:
        """slipway_predicted_class_total, counted here where every front end's rows pass (`wrappers.operations.metrics`)."""
        if scores.ndim != 2 or not scores.shape[0]:
            return
        tally = np.bincount(np.argmax(scores, axis=1), minlength=scores.shape[1])
        for winner in np.flatnonzero(tally):
            self._class_rows.labels(self.name, self.version or "", str(winner)).inc(int(tally[winner]))

    async def answer(self, connection: _Connection, slot: int, size: int, arrays: protocol.Arrays) -> None:
        """Run one request's rows from its slot and write its outputs back into the slot."""
        slot_map = connection.slots[slot]
        try:
            slot_map.remap(size)
            if len(arrays) != len(self.inputs):
                raise protocol.ProtocolError(f"a request with {len(arrays)} arrays for {len(self.inputs)} inputs")
            feeds = dict(zip((spec.name for spec in self.inputs), slot_map.views(arrays)))
            rows = arrays[0][1][0] if arrays[0][1] else 1
            submitted = time.perf_counter()
            if self._inline(rows):
                *outputs, stats = self._run(feeds, rows)  # as the runtime runs tiny runs: a thread hop costs more
            else:
                *outputs, stats = await self.batcher.submit(feeds, rows)
            del feeds
            slot_map.write(outputs)
        except INPUT_ERRORS as err:
            connection.send(protocol.error_reply(slot, slot_map.size, protocol.INPUT_ERROR, str(err)))
            return
        except Exception as err:  # the front end answers it as the runtime would (HTTP 500), the host serves on
            connection.send(protocol.error_reply(slot, slot_map.size, protocol.ERROR, f"{type(err).__name__}: {err}"))
            return
        finally:
            connection.in_flight.discard(slot)
        start, seconds, run_rows, index = (float(value) for value in stats[0]) if len(stats) else (submitted, 0, 0, 1)
        first = index == 0  # the request holding the run's first row reports the run, once across front ends
        connection.send(
            protocol.reply(
                slot,
                slot_map.size,
                [(output.dtype, output.shape) for output in outputs],
                seconds if first else 0.0,
                int(run_rows) if first else 0,
                max(0.0, start - submitted),
            )
        )

    async def serve(self, socket_path: Path) -> None:
        """Accept front ends on `socket_path` until cancelled."""
        loop = asyncio.get_running_loop()
        self.socket_path = socket_path
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        staging = socket_path.with_name(f".{socket_path.name}.{os.getpid()}")
        listener.bind(str(staging))
        listener.listen(64)
        os.replace(staging, socket_path)  # the path appears only once it accepts: front ends never meet a refusal
        listener.setblocking(False)
        logger.info(
            "session host for %s listening on %s (providers %s, buckets %s)",
            self.name,
            socket_path,
            self.runner.session.get_providers(),
            self.buckets,
        )
        try:
            while True:
                sock, _ = await loop.sock_accept(listener)
                loop.create_task(self._accept(sock))
        finally:
            listener.close()
            for connection in list(self.open):
                connection.close()
            self.batcher.close()
            await asyncio.sleep(0)  # the transports close on the loop's next turn

    async def _accept(self, sock: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        try:
            slots = await loop.run_in_executor(None, self._handshake, sock)
        except (OSError, protocol.ProtocolError, RingError) as err:
            logger.warning("a front end failed its handshake: %s", err)
            sock.close()
            return
        sock.setblocking(False)
        await loop.connect_accepted_socket(partial(_Connection, self, slots), sock)

    def _handshake(self, sock: socket.socket) -> list[SlotMap]:
        sock.setblocking(True)
        sock.settimeout(protocol.HANDSHAKE_TIMEOUT_S)
        protocol.send_hello(sock, self.description())
        return [SlotMap(fd, size) for fd, size in protocol.receive_slots(sock, MAX_SLOTS)]


class _Connection(asyncio.Protocol):
    """One front end: its slots, and its requests read as they come."""

    def __init__(self, host: SessionHost, slots: list[SlotMap]):
        self.host = host
        self.slots = slots
        self.in_flight: set[int] = set()
        self._outbox: list[bytes] = []
        self._reader = protocol.FrameReader()
        self._transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's transports are not asyncio's classes
        self.host.open.add(self)
        logger.info("front end connected with %d slots (%d connected)", len(self.slots), self.host.connections)

    def data_received(self, data: bytes) -> None:
        try:
            for payload in self._reader.feed(data):
                slot, size, arrays = protocol.parse_request(payload)
                if slot == protocol.SERVING:
                    self.host.serving(self, True)
                    continue
                if not 0 <= slot < len(self.slots) or slot in self.in_flight:
                    raise protocol.ProtocolError(f"slot {slot} is not a free slot of this front end")
                self.in_flight.add(slot)
                asyncio.get_running_loop().create_task(self.host.answer(self, slot, size, arrays))
        except (protocol.ProtocolError, ValueError) as err:
            logger.error("dropping a front end that sent a bad frame: %s", err)
            assert self._transport is not None
            self._transport.close()

    def send(self, data: bytes) -> None:
        """Replies made in one turn of the event loop go in one write: one wake-up of the front end, not one each."""
        if not self._outbox:
            asyncio.get_running_loop().call_soon(self._flush)
        self._outbox.append(data)

    def _flush(self) -> None:
        replies, self._outbox = self._outbox, []
        if self._transport is not None and not self._transport.is_closing():
            self._transport.write(b"".join(replies))

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.host.open.discard(self)
        self.host.serving(self, False)
        self._transport = None
        for slot in self.slots:
            os.close(slot.fd)
        logger.info("front end disconnected (%d connected)", self.host.connections)


def main(argv: Sequence[str] | None = None) -> int:
    parser = ArgumentParser(prog="python -m wrappers.frontends.host", description=__doc__.splitlines()[0])
    parser.add_argument("model_dir", type=Path, help="the artifact folder (with model-settings.json)")
    parser.add_argument("socket", type=Path, help="the Unix socket front ends connect to")
    parser.add_argument("--failure-file", type=Path, help="where to write the one-line cause too, should it fail")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s [session host] %(levelname)s %(message)s")
    try:
        host = SessionHost(args.model_dir)
    except HostError as err:
        if args.failure_file is not None:
            atomic.write_text(args.failure_file, f"{err}\n")
        raise UserError(str(err)) from None
    uvloop.install()  # MLServer's own dependency: a faster loop for the host's messages
    asyncio.run(host.serve(args.socket))
    return 0


if __name__ == "__main__":
    exit_with(main)
