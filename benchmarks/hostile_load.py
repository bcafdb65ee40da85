"""What hostile clients can make a server spend (issue 47), measured on Slipway's launcher and on plain MLServer side
by side: peak resident memory grown per byte of one admitted JSON body (of FP32 numbers, and of INT64 ones; with
`--against REV`, REV's launcher too), small requests' p99 while it is answered,
connections still held after the header timeout by clients trickling header bytes (slowloris), metric series and
bytes after requests for made-up model names, log bytes per malformed request (REST and gRPC), and requests lost
when the server is sent SIGTERM under 8 clients per protocol.

Each server serves the same identity graphs, FP32 and INT64, on loopback (`benchmarks.body_memory.identity_folder`;
plain `mlserver start` serves them with `benchmarks.plain_runtime`, as `body-memory` does), each probe bounded in count
and time. The
SIGTERM probe ends its server, so it starts one of its own per run. `python -m benchmarks hostile-load`
(reports/hostile-load.json and a plot beside it; the figures are in docs/security.md);
tests/wrappers/test_hostile_load.py runs a small one and checks the behaviours, not the speeds.
"""

from __future__ import annotations

import argparse
import http.client
import os
import select
import shutil
import signal
import socket
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.body_memory import (
    PLAIN,
    SLIPWAY,
    identity_folder,
    json_body,
    peak_growth,
    served_at,
    shape_folder,
    small_requests_during,
)
from benchmarks.load import GRPC_OPTIONS, MODEL_INFER
from slipway.drain import DEFAULT_DRAIN_S, DRAIN_ENV
from slipway.local_server import LocalServer
from slipway.ports import LOOPBACK
from slipway.v2_requests import grpc_request
from wrappers.limits.connection_rules import ConnectionLimits

MIB = 1 << 20
SMALL = b'{"inputs":[{"name":"x","datatype":"FP32","shape":[3],"data":[0.5,1.5,2.5]}]}'
MALFORMED = b'{"inputs":[{"name":"x","datatype":"FP64","shape":[3],"data":[0.5,1.5,2.5]}]}'  # FP64 for an FP32 input
HEADER_TIMEOUT_ENV = "SLIPWAY_HEADER_TIMEOUT_S"
TRICKLE_EVERY_S = 0.5  # a trickling connection sends one more header byte this often
SIGTERM_AFTER_S = 1.0  # the clients' load before the server is told to stop
CLIENT_DEADLINE_S = 60.0  # no client of the SIGTERM probe runs longer
RETRYING_CALLS = 1_000_000  # at most, per client that sends again on every refusal
SIDES = {"slipway": SLIPWAY, "plain_mlserver": PLAIN}
INT_MODEL = "echo-int64"  # beside "echo" (FP32): the same identity over INT64
BYTES_MODEL = "count-bytes"  # x [N] of BYTES (strings) -> its shape: what is held is the request's


@dataclass(frozen=True)
class Tier:
    """How large each probe is: the benchmark's defaults, or the test's smaller ones."""

    body_mib: int = 32  # the admitted JSON body
    trickling: int = 100  # slowloris connections
    header_timeout_s: float = ConnectionLimits.header_timeout_s  # Slipway's, as in the pods (SLIPWAY_HEADER_TIMEOUT_S)
    unknown_names: int = 300  # per protocol
    malformed: int = 100  # per protocol
    clients: int = 8  # per protocol, in the SIGTERM probe
    drain_s: float = DEFAULT_DRAIN_S  # Slipway's, as in the pods (SLIPWAY_DRAIN_SECONDS)
    sigterm_runs: int = 2
    latency_seconds: float = 60.0  # at most, for the small requests during the large body


def limits_env(tier: Tier, body_bytes: int) -> dict[str, str]:
    """Both sides get the same environment; Slipway's launcher reads the limits, plain MLServer none of them."""
    return {
        "SLIPWAY_MAX_BODY_BYTES": str(body_bytes + MIB),
        HEADER_TIMEOUT_ENV: f"{tier.header_timeout_s:g}",
        DRAIN_ENV: f"{tier.drain_s:g}",
    }


def identity_repository(root: Path, implementation: str) -> Path:
    """A model repository served by `implementation`: two identity models, `echo` (FP32) and INT_MODEL (INT64), and
    BYTES_MODEL, which answers the count of the strings sent."""
    identity_folder(root, implementation, INT_MODEL, "INT64")
    shape_folder(root, implementation, BYTES_MODEL)
    return identity_folder(root, implementation).parent


@contextmanager
def served(root: Path, side: str, env: dict[str, str]) -> Iterator[LocalServer]:
    """The identity models served by `side`: Slipway's launcher or plain `mlserver start`, on loopback."""
    implementation = SIDES[side]
    repository = identity_repository(root, implementation)
    with LocalServer(repository, extra_env=env, launcher=implementation == SLIPWAY) as server:
        yield server
    shutil.rmtree(repository, ignore_errors=True)


def bodies(tier: Tier) -> dict[str, tuple[bytes, int]]:
    """The admitted JSON bodies, each of about `tier.body_mib` MiB, and how many values each holds, by datatype."""
    return {datatype: json_body(tier.body_mib * MIB, datatype) for datatype in ("FP32", "INT64", "BYTES")}


def rss(server: Any, sent: dict[str, tuple[bytes, int]]) -> dict[str, Any]:
    """Peak bytes held per byte of each admitted body of numbers (`rss`: FP32, `rss_int64`: INT64)."""
    return {
        "rss": peak_growth(server, *sent["FP32"]),
        "rss_int64": peak_growth(server, *sent["INT64"], model=INT_MODEL),
    }


def rss_of_strings(fresh: Any, sent: dict[str, tuple[bytes, int]]) -> dict[str, Any]:
    """Peak bytes held per byte of the admitted BYTES body (`rss_bytes`), sent to a `fresh` server: the first large
    request a server answers grows its heap, and a later one mostly reuses what the one before it freed, which hides
    how much it would have grown."""
    return {"rss_bytes": peak_growth(fresh, *sent["BYTES"], model=BYTES_MODEL, echoed=False)}


def serving_after_s(server: LocalServer, seconds: float = 30.0) -> float | None:
    """Seconds until the server answers a small valid request 200 (None if not within `seconds`)."""
    started = time.monotonic()
    while time.monotonic() - started < seconds:
        request = urllib.request.Request(
            f"{server.http_url}/v2/models/echo/infer", data=SMALL, headers={"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(request, timeout=seconds) as answer:
                if answer.status == 200:
                    return round(time.monotonic() - started, 3)
        except (urllib.error.URLError, OSError):
            time.sleep(0.1)
    return None


def server_connections(port: int) -> int:
    """Established TCP connections on loopback whose local end is `port`: those the server holds (/proc/net/tcp)."""
    held = 0
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if int(fields[1].split(":")[1], 16) == port and fields[3] == "01":  # 01: ESTABLISHED
            held += 1
    return held


def trickling(server: LocalServer, connections: int, hold_s: float) -> dict[str, Any]:
    """`connections` clients that open a request and send one header byte every TRICKLE_EVERY_S, for `hold_s`: how
    many connections the server still held at the end, by its own side of each (/proc/net/tcp), and by the clients'."""
    socks = [socket.create_connection((LOOPBACK, server.http_port), timeout=10) for _ in range(connections)]
    open_ones = list(socks)
    try:
        for sock in socks:
            sock.sendall(b"POST /v2/models/echo/infer HTTP/1.1\r\nHost: slipway\r\nX-Slow: ")
        started = time.monotonic()
        deadline = started + hold_s
        while open_ones and time.monotonic() < deadline:
            readable, _, _ = select.select(open_ones, [], [], 0)
            for sock in readable:  # an answer (408) or the end: the server let go of it
                try:
                    while sock.recv(65536):
                        pass
                except OSError:
                    pass
                open_ones.remove(sock)
            for sock in list(open_ones):
                try:
                    sock.send(b"a")
                except OSError:
                    open_ones.remove(sock)
            time.sleep(TRICKLE_EVERY_S)
        held = server_connections(server.http_port)
        ended = round(time.monotonic() - started, 1) if not open_ones else None
    finally:
        for sock in socks:
            sock.close()
    return {
        "connections": connections,
        "held_for_at_most_s": hold_s,
        "held_by_the_server": held,
        "open_at_the_clients": len(open_ones),
        "all_closed_after_s": ended,
        "serving_after_s": serving_after_s(server),
    }


def _series(server: LocalServer) -> tuple[int, int]:
    with urllib.request.urlopen(server.metrics_url, timeout=30) as answer:
        text = answer.read()
    return sum(1 for line in text.splitlines() if line and not line.startswith(b"#")), len(text)


def _rest(server: LocalServer, path: str, body: bytes) -> int:
    request = urllib.request.Request(f"{server.http_url}{path}", data=body, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            answer.read()
            return int(answer.status)
    except urllib.error.HTTPError as err:
        err.read()
        return int(err.code)


def _grpc_codes(server: LocalServer, requests: list[bytes]) -> dict[str, int]:
    import grpc

    codes: dict[str, int] = {}
    with grpc.insecure_channel(server.grpc_target, options=GRPC_OPTIONS) as channel:
        call = channel.unary_unary(MODEL_INFER)
        for request in requests:
            try:
                call(request, timeout=30)
                code = "OK"
            except grpc.RpcError as err:
                code = err.code().name
            codes[code] = codes.get(code, 0) + 1
    return codes


def _counted(statuses: list[int]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for status in statuses:
        counts[str(status)] = counts.get(str(status), 0) + 1
    return counts


def _unknown(server: LocalServer, first: int, last: int) -> tuple[dict[str, int], dict[str, int]]:
    rest = [_rest(server, f"/v2/models/made-up-{number}/infer", SMALL) for number in range(first, last)]
    request = {"x": np.ones(3, np.float32)}
    grpc_codes = _grpc_codes(server, [grpc_request(f"invented-{number}", request) for number in range(first, last)])
    return _counted(rest), grpc_codes


def unknown_names(server: LocalServer, names: int) -> dict[str, Any]:
    """`names` made-up model names over REST and as many over gRPC, in two halves: the metric series and bytes before,
    after the first half and after the second (bounded series: the second half adds none)."""
    series_before, bytes_before = _series(server)
    _unknown(server, 0, names // 2)
    series_half, _ = _series(server)
    rest, grpc_codes = _unknown(server, names // 2, names)
    series_after, bytes_after = _series(server)
    return {
        "names_per_protocol": names,
        "rest_statuses_of_the_second_half": rest,
        "grpc_codes_of_the_second_half": grpc_codes,
        "series_before": series_before,
        "series_after_half": series_half,
        "series_after": series_after,
        "series_per_name_in_the_second_half": round((series_after - series_half) / (2 * (names - names // 2)), 2),
        "metrics_bytes_before": bytes_before,
        "metrics_bytes_after": bytes_after,
        "serving_after_s": serving_after_s(server),
    }


def _log_growth(server: LocalServer, send: Callable[[], object]) -> bytes:
    """What the server's log gained while `send()` ran (and half a second after, for what it logs as it answers)."""
    before = server.log_path.stat().st_size
    send()
    time.sleep(0.5)
    with open(server.log_path, "rb") as log:
        log.seek(before)
        return log.read()


def malformed(server: LocalServer, requests: int) -> dict[str, Any]:
    """`requests` malformed requests (an FP64 tensor for the FP32 input) over REST, then over gRPC: the log bytes each
    protocol's requests added (per request, and tracebacks among them), and how they were answered."""
    statuses: list[int] = []
    rest_log = _log_growth(
        server, lambda: statuses.extend(_rest(server, "/v2/models/echo/infer", MALFORMED) for _ in range(requests))
    )
    bad = grpc_request("echo", {"x": np.array([0.5, 1.5, 2.5])})  # FP64
    codes: dict[str, int] = {}
    grpc_log = _log_growth(server, lambda: codes.update(_grpc_codes(server, [bad] * requests)))
    return {
        "requests_per_protocol": requests,
        "rest_statuses": _counted(statuses),
        "grpc_codes": codes,
        "rest_log_bytes": len(rest_log),
        "grpc_log_bytes": len(grpc_log),
        "rest_log_bytes_per_request": round(len(rest_log) / requests, 1),
        "grpc_log_bytes_per_request": round(len(grpc_log) / requests, 1),
        "tracebacks": (rest_log + grpc_log).count(b"Traceback"),
        "serving_after_s": serving_after_s(server),
    }


class Outcomes:
    """What became of the SIGTERM probe's requests: answered, refused before the server took them (a connection
    refused, an HTTP 503, gRPC UNAVAILABLE: a client can retry them elsewhere), or lost (anything else: a connection
    dropped under a request sent, gRPC CANCELLED)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.counts: dict[str, dict[str, int]] = {}
        self.lost_as: dict[str, int] = {}

    def add(self, protocol: str, outcome: str, detail: str = "") -> None:
        with self._lock:
            counts = self.counts.setdefault(protocol, {"answered": 0, "refused": 0, "lost": 0})
            counts[outcome] += 1
            if outcome == "lost":
                key = f"{protocol}: {detail}"
                self.lost_as[key] = self.lost_as.get(key, 0) + 1


def _rest_client(server: LocalServer, outcomes: Outcomes, stop: threading.Event, deadline: float) -> None:
    """Small requests back to back on a kept-alive connection, a new one where the server closed it, until a
    request is refused (the server accepts no more) or `stop`."""
    connection: http.client.HTTPConnection | None = None
    while not stop.is_set() and time.monotonic() < deadline:
        if connection is None:
            connection = http.client.HTTPConnection(LOOPBACK, server.http_port, timeout=CLIENT_DEADLINE_S)
            try:
                connection.connect()
            except OSError:
                outcomes.add("rest", "refused")
                return
        try:
            connection.request("POST", "/v2/models/echo/infer", body=SMALL, headers={"Content-Type": "application/json"})
            answer = connection.getresponse()
            answer.read()
        except (OSError, http.client.HTTPException) as err:
            outcomes.add("rest", "lost", type(err).__name__)
            connection.close()
            connection = None
            continue
        if answer.status == 200:
            outcomes.add("rest", "answered")
        elif answer.status == 503:
            outcomes.add("rest", "refused")
            return
        else:
            outcomes.add("rest", "lost", f"HTTP {answer.status}")
        if answer.will_close:
            connection.close()
            connection = None
    if connection is not None:
        connection.close()


def _grpc_client(server: LocalServer, outcomes: Outcomes, stop: threading.Event, deadline: float) -> None:
    import grpc

    request = grpc_request("echo", {"x": np.array([0.5, 1.5, 2.5], np.float32)})
    with grpc.insecure_channel(server.grpc_target, options=GRPC_OPTIONS) as channel:
        call = channel.unary_unary(MODEL_INFER)
        while not stop.is_set() and time.monotonic() < deadline:
            try:
                call(request, timeout=CLIENT_DEADLINE_S)
            except grpc.RpcError as err:
                if err.code() == grpc.StatusCode.UNAVAILABLE:
                    outcomes.add("grpc", "refused")
                    return
                outcomes.add("grpc", "lost", err.code().name)
                continue
            outcomes.add("grpc", "answered")


def _grpc_client_retrying(server: LocalServer, outcomes: Outcomes, stop: threading.Event, deadline: float) -> None:
    """Like `_grpc_client`, but sends again at once on every refusal, through the whole drain and after the server
    has gone (its refusals then are the closed port's), until `stop` or at most RETRYING_CALLS calls."""
    import grpc

    request = grpc_request("echo", {"x": np.array([0.5, 1.5, 2.5], np.float32)})
    with grpc.insecure_channel(server.grpc_target, options=GRPC_OPTIONS) as channel:
        call = channel.unary_unary(MODEL_INFER)
        for _ in range(RETRYING_CALLS):
            if stop.is_set() or time.monotonic() >= deadline:
                return
            try:
                call(request, timeout=CLIENT_DEADLINE_S)
            except grpc.RpcError as err:
                if err.code() == grpc.StatusCode.UNAVAILABLE:
                    outcomes.add("grpc-retrying", "refused")
                else:
                    outcomes.add("grpc-retrying", "lost", err.code().name)
                continue
            outcomes.add("grpc-retrying", "answered")


def sigterm(server: LocalServer, clients: int, drain_s: float, protocols: tuple[str, ...] = ("rest", "grpc")) -> dict[str, Any]:
    """`clients` per protocol send small requests back to back; after SIGTERM_AFTER_S the server is sent SIGTERM.
    Each client goes on until the server refuses it ("grpc-retrying": until the server has exited): what became of
    every request, and how the server ended."""
    outcomes = Outcomes()
    stop = threading.Event()
    deadline = time.monotonic() + CLIENT_DEADLINE_S
    targets = {"rest": _rest_client, "grpc": _grpc_client, "grpc-retrying": _grpc_client_retrying}
    threads = [
        threading.Thread(target=targets[protocol], args=(server, outcomes, stop, deadline), daemon=True)
        for protocol in protocols
        for _ in range(clients)
    ]
    for thread in threads:
        thread.start()
    time.sleep(SIGTERM_AFTER_S)
    assert server.pid is not None
    signalled = time.monotonic()
    os.kill(server.pid, signal.SIGTERM)
    code = server.wait(drain_s + 30)
    exited_s = round(time.monotonic() - signalled, 2) if code is not None else None
    stop.set()
    for thread in threads:
        thread.join(timeout=CLIENT_DEADLINE_S)
    return {
        "clients_per_protocol": clients,
        "requests": outcomes.counts,
        "lost_as": outcomes.lost_as,
        "exit_code": code,
        "exited_after_s": exited_s,
    }


def measure(
    side: str, tier: Tier, root: Path, on_step: Callable[[], None] = lambda: None, memory_only: bool = False
) -> dict[str, Any]:
    """Every probe against `side` (`memory_only`: the memory probes alone), each on the same server but the strings'
    and the SIGTERM one, which start their own."""
    sent = bodies(tier)
    body = sent["FP32"][0]
    env = limits_env(tier, max(len(body) for body, _ in sent.values()))
    figures: dict[str, Any] = {}
    with served(root / f"{side}-strings", side, env) as server:
        figures.update(rss_of_strings(server, sent))
    if memory_only:
        with served(root / side, side, env) as server:
            figures.update(rss(server, sent))
        on_step()
        return figures
    with served(root / side, side, env) as server:
        figures.update(rss(server, sent))
        on_step()
        figures["small_requests"] = small_requests_during(server, body, tier.latency_seconds)
        on_step()
        figures["slowloris"] = trickling(server, tier.trickling, tier.header_timeout_s + 10)
        on_step()
        figures["unknown_models"] = unknown_names(server, tier.unknown_names)
        on_step()
        figures["malformed"] = malformed(server, tier.malformed)
        on_step()
    runs = []
    for number in range(tier.sigterm_runs):
        with served(root / f"{side}-sigterm-{number}", side, env) as server:
            runs.append(sigterm(server, tier.clients, tier.drain_s))
        on_step()
    figures["sigterm"] = {
        "runs": runs,
        "lost": {
            protocol: sum(run["requests"].get(protocol, {}).get("lost", 0) for run in runs) for protocol in ("rest", "grpc")
        },
    }
    return figures


def measure_at(commit: str, tier: Tier, root: Path) -> dict[str, Any]:
    """The memory probes alone against `commit`'s launcher (its tree unpacked as `python -m benchmarks against` does)."""
    sent = bodies(tier)
    env = limits_env(tier, max(len(body) for body, _ in sent.values()))
    with served_at(identity_repository(root / f"{commit[:12]}-strings", SLIPWAY), SLIPWAY, env, commit) as server:
        figures = rss_of_strings(server, sent)
    with served_at(identity_repository(root / commit[:12], SLIPWAY), SLIPWAY, env, commit) as server:
        return {**rss(server, sent), **figures}


def steps(tier: Tier, against: tuple[str, ...] = (), memory_only: bool = False) -> int:
    return len(SIDES) * (1 if memory_only else 5 + tier.sigterm_runs) + len(against)


def run(
    tier: Tier, against: tuple[str, ...] = (), on_step: Callable[[], None] = lambda: None, memory_only: bool = False
) -> dict[str, Any]:
    """Every probe on each side (`memory_only`: the memory probes alone); with `against` (commits), the memory probes
    on each commit's launcher too."""
    root = Path(tempfile.mkdtemp(prefix="slipway-hostile-load-"))
    rss_at: dict[str, Any] = {}
    try:
        servers = {side: measure(side, tier, root, on_step, memory_only) for side in SIDES}
        for commit in against:
            rss_at[f"slipway_at_{commit[:12]}"] = measure_at(commit, tier, root)
            on_step()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return {"tier": tier.__dict__, "load_average": os.getloadavg()[0], "servers": servers, "rss_at": rss_at}


def plot(payload: dict[str, Any], path: Path) -> None:
    """Per probe, the two servers side by side, each figure on its own axis."""
    from slipway.plots import pyplot, save_png

    plt = pyplot()
    names = sorted(payload["servers"], key=lambda name: name != "slipway")  # Slipway first (the report sorts its keys)
    servers = [payload["servers"][name] for name in names]
    tier = payload["tier"]
    panels: list[tuple[str, list[float]]] = [
        (
            f"peak bytes held per byte\nof one {tier['body_mib']} MiB body",
            [s["rss"]["bytes_held_per_byte_sent"] for s in servers],
        ),
        (
            f"peak bytes held per byte\nof one {tier['body_mib']} MiB INT64 body",
            [s["rss_int64"]["bytes_held_per_byte_sent"] for s in servers],
        ),
        (
            f"peak bytes held per byte\nof one {tier['body_mib']} MiB BYTES body",
            [s["rss_bytes"]["bytes_held_per_byte_sent"] for s in servers],
        ),
        (
            "small requests' p99 (ms)\nduring the large body",
            [s["small_requests"]["during_the_large_body"]["p99_ms"] for s in servers],
        ),
        (
            f"of {tier['trickling']} trickling connections, held\nafter the {tier['header_timeout_s']:g} s header timeout",
            [s["slowloris"]["held_by_the_server"] for s in servers],
        ),
        (
            f"metric series after {2 * tier['unknown_names']}\nunknown model names",
            [s["unknown_models"]["series_after"] for s in servers],
        ),
        (
            "log bytes per malformed\nrequest (REST + gRPC)",
            [s["malformed"]["rest_log_bytes_per_request"] + s["malformed"]["grpc_log_bytes_per_request"] for s in servers],
        ),
    ]
    figure, axes = plt.subplots(1, len(panels) + 1, figsize=(3 * (len(panels) + 1), 3.6))
    for axis, (title, values) in zip(axes, panels):
        bars = axis.bar(names, values, color=["tab:blue" if name == "slipway" else "tab:gray" for name in names], alpha=0.8)
        axis.bar_label(bars, fmt="%g", fontsize=7)
        axis.set_title(title, fontsize=8)
    lost = axes[-1]  # per protocol: REST and gRPC lose requests for different reasons
    for offset, protocol, color in ((-0.2, "rest", "tab:orange"), (0.2, "grpc", "tab:green")):
        values = [s["sigterm"]["lost"][protocol] for s in servers]
        bars = lost.bar([i + offset for i in range(len(names))], values, 0.4, label=protocol, color=color, alpha=0.8)
        lost.bar_label(bars, fmt="%g", fontsize=7)
    lost.set_xticks(range(len(names)))
    lost.set_xticklabels(names)
    lost.legend(fontsize=7)
    lost.set_title(f"requests lost on SIGTERM ({tier['clients']} clients\nper protocol, {tier['sigterm_runs']} runs)", fontsize=8)
    for axis in axes:
        axis.tick_params(axis="x", labelsize=7, rotation=20)
        axis.tick_params(axis="y", labelsize=7)
    save_png(figure, path)


def merged(report: dict[str, Any] | None, fresh: dict[str, Any]) -> dict[str, Any]:
    """`report` (the last full run's) with the memory probes of `fresh` (a `--memory-only` run) in place of its own;
    `rerun` says which figures are newer and when the others were measured. UserError where there is no report to
    update, or its body size differs."""
    from slipway.cli import UserError

    if report is None or not report.get("servers"):
        raise UserError(
            "no reports/hostile-load.json to update: run `python -m benchmarks hostile-load` once without --memory-only"
        )
    if report["tier"]["body_mib"] != fresh["tier"]["body_mib"]:
        raise UserError(
            f"reports/hostile-load.json measured {report['tier']['body_mib']} MiB bodies: pass --mib "
            f"{report['tier']['body_mib']}, or run without --memory-only"
        )
    updated = {key: value for key, value in report.items() if key not in ("report", "created_at", "machine")}
    for side, figures in fresh["servers"].items():
        updated["servers"][side].update(figures)
    updated["rss_at"] = {**report.get("rss_at", {}), **fresh["rss_at"]}
    updated["rerun"] = {
        "memory_probes_only": sorted({key for figures in fresh["servers"].values() for key in figures}),
        "other_probes_created_at": report.get("rerun", {}).get("other_probes_created_at", report.get("created_at")),
        "load_average": fresh["load_average"],
    }
    return updated


def tier_of(args: argparse.Namespace) -> Tier:
    return Tier(
        body_mib=args.mib,
        trickling=args.trickling,
        unknown_names=args.unknown_names,
        malformed=args.malformed,
        clients=args.clients,
        sigterm_runs=args.sigterm_runs,
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    defaults = Tier()
    parser.add_argument(
        "--against",
        metavar="REV",
        action="append",
        default=[],
        help="also measure the memory probes on REV's launcher (a commit id, tag or branch; repeatable)",
    )
    parser.add_argument("--mib", type=int, default=defaults.body_mib, help="the admitted JSON body in MiB (default 32)")
    parser.add_argument("--trickling", type=int, default=defaults.trickling, help="slowloris connections (default 100)")
    parser.add_argument(
        "--unknown-names", type=int, default=defaults.unknown_names, help="made-up model names per protocol (default 300)"
    )
    parser.add_argument("--malformed", type=int, default=defaults.malformed, help="malformed requests per protocol (default 100)")
    parser.add_argument("--clients", type=int, default=defaults.clients, help="clients per protocol at SIGTERM (default 8)")
    parser.add_argument("--sigterm-runs", type=int, default=defaults.sigterm_runs, help="SIGTERM runs per server (default 2)")
    parser.add_argument(
        "--memory-only",
        action="store_true",
        help="rerun the memory probes alone and update them in the last report (reports/hostile-load.json)",
    )
