"""`make bench-peers`: Slipway's runtime against KServe and PyTriton, with one client, side by side in one run.

For each model: raw `session.run` in this process (the limit: the best of sweeps before and after the
loads; and, as one more turn in every round, its best setting of the sweep before, for a ratio to each load
measured within seconds of it, as the host's speed drifts over a run), then every server at its own defaults
on loopback, each serving the same ONNX file: the plain MLServer runtime (`benchmarks.plain_runtime`),
Slipway's runtime, KServe and PyTriton (each in its own virtualenv, `benchmarks.peers.envs`). Before any
timing each server must answer one fixed input over gRPC and REST as raw ONNX Runtime does; one that does
not is not timed and the command fails. The same closed-loop client (`benchmarks.load.run_load`) then loads
each server in turn at each point, round after round, starting each round one server further on, so that
every ratio compares loads measured next to each other in time. At each gRPC point the bare gRPC transport
(`benchmarks.transport`, no MLServer and no model) takes a turn too, right after Slipway's and held to its p50, so
at about its request rate (gRPC's CPU per request rises as the rate falls: fewer events per wake-up), for the
point's CPU bound (`cpu_bound`). A peer that cannot be installed or started, or that was skipped, is reported as
"not run: <reason>".
"""

from __future__ import annotations

import json
import os
import time
import urllib.request
from collections.abc import Callable
from contextlib import ExitStack
from importlib.metadata import version
from pathlib import Path

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator

from benchmarks.load import GRPC, REST, grpc_answer, run_load
from benchmarks.models import BENCH_DIR, BenchModel, server_folder
from benchmarks.peers.envs import KSERVE, PINS, PYTRITON, PeerUnavailable
from benchmarks.peers.goals import goals
from benchmarks.peers.servers import PeerServer
from benchmarks.raw import measure_raw, raw_turn
from benchmarks.run import IMPLEMENTATIONS, PLAIN, RAW_BATCH_SIZES, SLIPWAY, _median_round, transport_hold_ms
from benchmarks.transport import BareGrpcServer
from slipway.local_server import LocalServer, LoopbackServer, ServerError
from slipway.reports import wakeup_round_trip_us
from slipway.v2_requests import grpc_request, rest_body

PEERS = (KSERVE, PYTRITON)
SERVERS = (PLAIN, SLIPWAY, *PEERS)
RAW = "raw"  # raw `session.run`'s turn in each round
TRANSPORT = "transport"  # the bare gRPC transport's turn in each round of a gRPC point
MEASURED = "measured"
# Answers must match raw ONNX Runtime's to float32 noise (every server runs the same graph with the same ORT).
RTOL, ATOL = 1e-4, 1e-5


class PeersConfig(BaseModel):
    """What one `bench-peers` run measures."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    models: tuple[str, ...] = ("digits", "mobilenetv2")
    protocols: tuple[str, ...] = (GRPC, REST)
    concurrency: tuple[int, ...] = (1, 8)
    seconds: float = Field(default=2.0, gt=0, description="measured seconds per load")
    rounds: int = Field(default=3, ge=2, description="rounds per point, the servers in turn; the median round counts")
    warmup_s: float = Field(default=1.0, ge=0)
    raw_seconds: float = Field(default=2.0, gt=0)
    skip: tuple[str, ...] = Field(default=(), description="peers not to run (reported as not run)")

    @field_validator("protocols")
    @classmethod
    def _known_protocols(cls, protocols: tuple[str, ...]) -> tuple[str, ...]:
        unknown = sorted(set(protocols) - {GRPC, REST})
        if unknown or not protocols:
            raise ValueError(f"protocols {unknown or '(none)'}: use {GRPC} and/or {REST}")
        return protocols

    @field_validator("concurrency")
    @classmethod
    def _positive(cls, concurrency: tuple[int, ...]) -> tuple[int, ...]:
        if not concurrency or min(concurrency) < 1:
            raise ValueError("concurrency: give one or more client counts of at least 1")
        return concurrency

    @field_validator("skip")
    @classmethod
    def _known_peers(cls, skip: tuple[str, ...]) -> tuple[str, ...]:
        unknown = sorted(set(skip) - set(PEERS))
        if unknown:
            raise ValueError(f"cannot skip {unknown}: the peers are {list(PEERS)}")
        return skip


def not_run(reason: str) -> str:
    """A server's status when it was not measured: one line, for the table and the JSON."""
    return "not run: " + " ".join(reason.split())


def versions() -> dict[str, str]:
    """What served: the peers' pins and this checkout's MLServer, ONNX Runtime and Slipway."""
    pinned = {requirement.split("==")[0]: requirement.split("==")[1] for pins in PINS.values() for requirement in pins}
    return {**pinned, "mlserver": version("mlserver"), "onnxruntime": version("onnxruntime")}


def answers_match(expected: dict[str, np.ndarray], answered: dict[str, np.ndarray]) -> str | None:
    """None where `answered` holds every expected output, of its shape, equal to float32 noise; else why not."""
    for name, want in expected.items():
        got = answered.get(name)
        if got is None:
            return f"no output {name!r} in its answer (it sent {sorted(answered)})"
        if got.shape != want.shape:
            return f"output {name!r} has shape {list(got.shape)}, raw ONNX Runtime's {list(want.shape)}"
        if not np.allclose(got, want, rtol=RTOL, atol=ATOL):
            return f"output {name!r} differs from raw ONNX Runtime's by up to {float(np.max(np.abs(got - want))):.3g}"
    return None


def served_answer(server, protocol: str, model: str, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The outputs a server answers `inputs` with, over `protocol`, by name."""
    if protocol == GRPC:
        from tritonclient.grpc import InferResult, service_pb2

        response = service_pb2.ModelInferResponse.FromString(grpc_answer(server.grpc_target, grpc_request(model, inputs)))
        result = InferResult(response)
        return {output.name: result.as_numpy(output.name) for output in response.outputs}
    request = urllib.request.Request(
        f"{server.http_url}/v2/models/{model}/infer",
        data=rest_body(inputs),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        body = json.loads(response.read())
    return {output["name"]: np.asarray(output["data"], dtype=np.float32).reshape(output["shape"]) for output in body["outputs"]}


def check_answers(server, model: BenchModel, protocols: tuple[str, ...], expected: dict[str, np.ndarray]) -> str | None:
    """None where the server answers the fixed input as raw ONNX Runtime does over every protocol; else why not."""
    for protocol in protocols:
        try:
            answered = served_answer(server, protocol, model.name, {model.input_name: model.row})
        except Exception as err:  # HTTP and gRPC errors, an answer of another form: grpc.RpcError has no closer base
            first = (str(err).splitlines() or [""])[0][:200]
            return f"{protocol}: no answer to read: {type(err).__name__}: {first}"
        problem = answers_match(expected, answered)
        if problem:
            return f"{protocol}: {problem}"
    return None


def best_of_sweeps(before: list[dict], after: list[dict]) -> list[dict]:
    """Each raw setting's better sweep, before or after the loads: other work on the machine only ever slows
    `session.run` down, so the faster sweep is the nearer to the limit (both are kept beside it)."""
    best = []
    for first, second in zip(before, after, strict=True):
        runs = [first["rows_per_s"], second["rows_per_s"]]
        best.append({**(first if runs[0] >= runs[1] else second), "rows_per_s_before_after": runs})
    return best


def round_order(servers: list[str], round_index: int, *, after_slipway: str | None = None) -> list[str]:
    """The servers' order in a round: each round starts one further on, so none always follows the same one;
    `after_slipway`, where given, takes its turn right after Slipway's (held to the p50 Slipway just had)."""
    shift = round_index % len(servers) if servers else 0
    order = servers[shift:] + servers[:shift]
    if after_slipway:
        order.insert(order.index(SLIPWAY) + 1, after_slipway)
    return order


def cpu_bound(raw_rounds: list[tuple[float, float]], transport_rounds: list[dict], cpus: int) -> dict:
    """The rows/s the CPUs allow at a gRPC point of batch-1 requests for a server that adds nothing to raw
    `session.run` (its CPU per row at its fastest setting), the bare gRPC transport at Slipway's request rate and
    the client (their CPU per request), each round's own: the CPUs over that CPU per row. A server does its own
    work on top and merges no more rows than its clients send at once; it passes the bound only where it runs
    ONNX Runtime on less CPU per row than raw's fastest setting (its threads may spin) does."""
    rows, ratios = [], []
    for (raw_rows, raw_cpu_ms), transport in zip(raw_rounds, transport_rounds, strict=True):
        per_row_ms = raw_cpu_ms + transport["server_cpu_ms_per_request"] + transport["client_cpu_ms_per_request"]
        rows.append(round(1000 * cpus / per_row_ms, 2))
        ratios.append(rows[-1] / raw_rows)
    return {
        "rows_per_s": round(float(np.median(rows)), 2),
        "x_raw_same_round": round(float(np.median(ratios)), 3),
        "rounds_rows_per_s": rows,
        "transport": _median_round(transport_rounds),
    }


def bench_model(
    model: BenchModel,
    config: PeersConfig,
    peer_pythons: dict[str, Path | str],
    advance: Callable[[], None] = lambda: None,
    work_dir: Path = BENCH_DIR / "peers",
) -> dict:
    """One model against every server; `peer_pythons` holds each peer's Python, or why it cannot run."""
    import onnxruntime as ort

    def raw_sweep() -> list[dict]:
        return measure_raw(model.onnx_path, model.input_name, model.row, batch_sizes=RAW_BATCH_SIZES, seconds=config.raw_seconds)

    session = ort.InferenceSession(str(model.onnx_path), providers=["CPUExecutionProvider"])
    names = [output.name for output in session.get_outputs()]
    expected = dict(zip(names, session.run(names, {model.input_name: model.row})))
    raw_before = raw_sweep()
    raw_now = raw_turn(
        model.onnx_path,
        model.input_name,
        model.row,
        seconds=config.raw_seconds,
        setting=max(raw_before, key=lambda result: result["rows_per_s"]),
    )
    advance()
    status: dict[str, str] = {}
    inputs = {model.input_name: model.row}
    rounds: dict[tuple[str, int, str], list[dict]] = {}
    raw_rounds: dict[tuple[int, str], list[tuple[float, float]]] = {}  # rows/s, CPU ms per row
    transport_rounds: dict[int, list[dict]] = {}
    with ExitStack() as stack:
        servers: dict[str, LoopbackServer] = {}
        for name in SERVERS:
            server: LoopbackServer
            try:
                if name in IMPLEMENTATIONS:
                    folder = server_folder(work_dir, model, name, IMPLEMENTATIONS[name], None)  # each at its defaults
                    server = stack.enter_context(LocalServer(folder, launcher=name != PLAIN))
                elif isinstance(python := peer_pythons.get(name, "not asked for"), str):
                    status[name] = not_run(python)
                    continue
                else:
                    server = stack.enter_context(PeerServer(name, python, model.onnx_path, model.name))
            except (PeerUnavailable, ServerError) as err:
                if name not in PEERS:
                    raise  # Slipway's own runtime, or the baseline, must start
                status[name] = not_run(f"could not start: {err}")
                continue
            problem = check_answers(server, model, config.protocols, expected)
            if problem:
                status[name] = not_run(f"wrong answer, not timed: {problem}")
                continue
            servers[name] = server
            status[name] = MEASURED
        transport: BareGrpcServer | None = None
        if GRPC in config.protocols and SLIPWAY in servers:
            transport = stack.enter_context(BareGrpcServer.answering_as(servers[SLIPWAY], model.name, inputs, work_dir))
        advance()
        for protocol in config.protocols:
            with_transport = TRANSPORT if transport and protocol == GRPC else None
            for concurrency in config.concurrency:
                for round_index in range(config.rounds):
                    for name in round_order([*servers, RAW], round_index, after_slipway=with_transport):
                        if name == RAW:
                            raw_rounds.setdefault((concurrency, protocol), []).append(raw_now())
                            advance()
                            continue
                        target: LoopbackServer | BareGrpcServer
                        if name == TRANSPORT:  # only at gRPC points
                            if transport is None:
                                raise RuntimeError("round_order named the bare transport at a point where it does not run")
                            held = transport_rounds.setdefault(concurrency, [])
                            hold_ms = transport_hold_ms(rounds[(SLIPWAY, concurrency, protocol)][-1], held)
                            transport.hold(hold_ms)
                            target = transport
                        else:
                            target = servers[name]
                        result = run_load(
                            protocol=protocol,
                            server=target,
                            model=model.name,
                            inputs=inputs,
                            concurrency=concurrency,
                            seconds=config.seconds,
                            warmup_s=config.warmup_s,
                            process_tree=True,
                        )
                        if name == TRANSPORT:
                            held.append({**result.summary(), "hold_ms": hold_ms})
                        else:
                            rounds.setdefault((name, concurrency, protocol), []).append(result.summary())
                        advance()
    raw = best_of_sweeps(raw_before, raw_sweep())
    advance()
    limit = max(result["rows_per_s"] for result in raw)
    points = []
    for (name, concurrency, protocol), summaries in rounds.items():
        point = {"runtime": name, **_median_round(summaries)}
        point["x_raw_limit"] = round(point["rows_per_s"] / limit, 3)
        same_round = [raw_rows for raw_rows, _ in raw_rounds[(concurrency, protocol)]]
        point["x_raw_same_round"] = round(
            float(np.median([summary["rows_per_s"] / raw for summary, raw in zip(summaries, same_round, strict=True)])), 3
        )
        point["raw_rounds_rows_per_s"] = same_round
        point["rounds_rows_per_s"] = [summary["rows_per_s"] for summary in summaries]
        point["rounds_p50_ms"] = [summary["p50_ms"] for summary in summaries]
        point["rounds_server_cpu_ms_per_request"] = [summary["server_cpu_ms_per_request"] for summary in summaries]
        point["rounds_machine_steal_pct"] = [summary["machine_steal_pct"] for summary in summaries]  # the host's noise
        points.append(point)
    cpus = len(os.sched_getaffinity(0))
    bounds = [
        {
            "protocol": GRPC,
            "concurrency": concurrency,
            **cpu_bound(raw_rounds[(concurrency, GRPC)], transport_rounds[concurrency], cpus),
        }
        for concurrency in sorted(transport_rounds)
    ]
    for bound in bounds:
        bound["x_raw_limit"] = round(bound["rows_per_s"] / limit, 3)
    return {
        "source": model.source,
        "raw": raw,
        "raw_limit_rows_per_s": limit,
        "servers": status,
        "points": points,
        "cpu_bounds": bounds,
    }


def steps(config: PeersConfig) -> int:
    """Progress steps per run: raw sweeps and the servers' start per model, then every load."""
    turns = len(config.protocols) * (len(SERVERS) + 1) + (GRPC in config.protocols)  # + raw's, + the transport's
    loads = len(config.concurrency) * config.rounds * turns
    return len(config.models) * (3 + loads)


def bench_payload(
    config: PeersConfig,
    models: dict[str, dict],
    peers: dict[str, str],
    started: float,
    load_before: tuple[float, ...],
    wakeup_before,
) -> dict:
    """The report: the measurements with what they were measured on and by."""
    return {
        "config": config.model_dump(mode="json"),
        "versions": versions(),
        "peers": peers,
        "load_average": {"before": [round(x, 2) for x in load_before], "after": [round(x, 2) for x in os.getloadavg()]},
        "cpu_count": os.cpu_count(),
        "wakeup_round_trip_us": {"before": wakeup_before, "after": wakeup_round_trip_us()},
        "duration_s": round(time.time() - started, 1),
        "client": "closed loop, one prepared batch-1 request per client (gRPC: raw_input_contents; REST: V2 JSON), "
        "same machine; server CPU is the server's whole process tree",
        "models": models,
        "goals": goals(models),
    }


def wrong_answers(payload: dict) -> list[str]:
    """Each server that answered differently from raw ONNX Runtime, per model: the run fails on these."""
    return [
        f"{model}: {name}: {status}"
        for model, result in payload["models"].items()
        for name, status in result["servers"].items()
        if "wrong answer" in status
    ]


def peer_pythons(config: PeersConfig, on_line: Callable[[str], None]) -> dict[str, Path | str]:
    """Each peer's virtualenv Python (installed on first use), or why it will not run."""
    from benchmarks.peers.envs import ensure_env

    found: dict[str, Path | str] = {}
    for peer in PEERS:
        if peer in config.skip:
            found[peer] = f"skipped (--skip {peer})"
            continue
        try:
            found[peer] = ensure_env(peer, on_line=on_line)
        except PeerUnavailable as err:
            found[peer] = str(err)
    return found


def run_peers(config: PeersConfig, on_line: Callable[[str], None] = print) -> dict:
    """Install what is missing, measure every model in `config`, and return the report's payload."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from benchmarks.models import MODELS

    load_before, wakeup_before, started = os.getloadavg(), wakeup_round_trip_us(), time.time()
    pythons = peer_pythons(config, on_line)
    peers = {peer: (MEASURED if isinstance(python, Path) else not_run(python)) for peer, python in pythons.items()}
    models: dict[str, dict] = {}
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns) as progress:
        task = progress.add_task("bench-peers", total=steps(config))
        for name in config.models:
            progress.update(task, description=f"bench-peers {name}: preparing the model")
            model = MODELS[name]()
            progress.update(task, description=f"bench-peers {name}")
            models[name] = bench_model(model, config, pythons, lambda: progress.advance(task))
        progress.update(task, completed=steps(config))
    return bench_payload(config, models, peers, started, load_before, wakeup_before)
