"""What one large admitted JSON request costs the server: its peak resident set grown per byte sent, and how long
small requests wait while it is answered.

A real server on loopback serves an identity model (what is sent comes back), its body limit raised to admit the
body; before each request its peak resident size (`VmHWM`) is reset (`/proc/PID/clear_refs`, 5) and after it the
peak's growth over the resident size before is read. Then one client on a kept-alive connection sends a small
request every `SMALL_INTERVAL_S`, alone and while the large body is answered; each one's latency counts from when it
was due, not from when the client could send it, so a stall counts once for every request it held back (one client
waiting back to back would record a one-second stall as one slow request among hundreds). Their p50/p99/max are
kept side by side. Slipway's launcher, plain `mlserver start` (serving the graph with `benchmarks.plain_runtime`)
and, with `--against REV` (repeatable), REV's tree (unpacked as `python -m benchmarks against` does) serve the same graph in
turn (`python -m benchmarks body-memory`, reports/body-memory.json and a plot beside it; the figures are in
docs/security.md).
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import shutil
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol

import onnx
from onnx import TensorProto, helper

from slipway.artifact import SETTINGS_FILE, write_manifest
from slipway.local_server import LocalServer

MIB = 1 << 20
SMALL_INTERVAL_S = 0.01  # a small request is due every 10 ms
SMALL_ALONE = 200  # small requests timed alone, before the large body
SMALL_MOST = 5000  # at most this many while the large body is answered (and at most `seconds`)
NUMBER = b"0.123456789,"  # one FP32 value as JSON text: 12 bytes
INTEGER = b"31415,"  # one INT64 value as JSON text (a token id, say): 6 bytes
STRING = b'"word-%07d",'  # one BYTES value as JSON text, each a string of its own (a word, say): 15 bytes
ONNX_TYPES = {"FP32": TensorProto.FLOAT, "INT64": TensorProto.INT64}
IR_VERSION, OPSET = 8, 17  # what ONNX Runtime reads


PLAIN = "benchmarks.plain_runtime.PlainOnnxRuntime"  # what plain MLServer serves the same graph with
SLIPWAY = "wrappers.runtime.OnnxRuntime"


class Server(Protocol):
    """What the measures need of a running server: where it listens and its process."""

    @property
    def http_url(self) -> str: ...

    @property
    def pid(self) -> int | None: ...


def identity_folder(root: Path, implementation: str, name: str = "echo", datatype: str = "FP32") -> Path:
    """A model folder: y = x over [N] of `datatype` (FP32, INT64), served by `implementation`, no row limit to speak
    of; `root/implementation/name`, so that several are a model repository."""
    folder = root / implementation / name
    folder.mkdir(parents=True)
    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"])],
        "identity",
        [helper.make_tensor_value_info("x", ONNX_TYPES[datatype], ["N"])],
        [helper.make_tensor_value_info("y", ONNX_TYPES[datatype], ["N"])],
    )
    return _saved(folder, name, implementation, graph)


def shape_folder(root: Path, implementation: str, name: str) -> Path:
    """A model folder: y = the shape of x, x [N] of strings (BYTES), y [1]: a large request, a tiny answer, so that
    what is held is the request's and not an echo's; `root/implementation/name`."""
    folder = root / implementation / name
    folder.mkdir(parents=True)
    graph = helper.make_graph(
        [helper.make_node("Shape", ["x"], ["y"])],
        "shape",
        [helper.make_tensor_value_info("x", TensorProto.STRING, ["N"])],
        [helper.make_tensor_value_info("y", TensorProto.INT64, [1])],
    )
    return _saved(folder, name, implementation, graph)


def _saved(folder: Path, name: str, implementation: str, graph: onnx.GraphProto) -> Path:
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=IR_VERSION)
    onnx.save(model, folder / "model.onnx")
    parameters = {"uri": "./model.onnx", "extra": {"max_request_rows": 1 << 28}}
    settings = {"name": name, "implementation": implementation, "parameters": parameters}
    (folder / SETTINGS_FILE).write_text(json.dumps(settings))
    write_manifest(folder)
    return folder


def json_body(size: int, datatype: str = "FP32") -> tuple[bytes, int]:
    """A V2 JSON request of about `size` bytes of FP32 (INT64) numbers or BYTES strings, and how many it holds. The
    strings all differ: a parser may make one object of equal strings (simdjson's binding does), which real text
    does not let it."""
    if datatype == "BYTES":
        count = size // len(STRING % 0)
        data = b",".join(STRING[:-1] % index for index in range(count))
    else:
        number = INTEGER if datatype == "INT64" else NUMBER
        count = size // len(number)
        data = (number * count)[:-1]
    head = b'{"inputs":[{"name":"x","datatype":"%s","shape":[%d],"data":[' % (datatype.encode(), count)
    return head + data + b"]}]}", count


def _status_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"/proc/{pid}/status has no {field}")


def peak_growth(server: Server, body: bytes, count: int, model: str = "echo", echoed: bool = True) -> dict[str, Any]:
    """Reset the server's peak RSS, send `body` to `model`, and read how far the peak rose over the RSS before it.
    `model` answers the `count` values sent (`echoed`) or their count alone."""
    pid = server.pid
    assert pid is not None
    Path(f"/proc/{pid}/clear_refs").write_text("5")  # VmHWM := VmRSS now
    before = _status_kib(pid, "VmRSS") * 1024
    request = urllib.request.Request(
        f"{server.http_url}/v2/models/{model}/infer", data=body, headers={"Content-Type": "application/json"}
    )
    started = time.perf_counter()
    with urllib.request.urlopen(request, timeout=600) as answer:
        data = json.loads(answer.read())["outputs"][0]["data"]
    seconds = time.perf_counter() - started
    if (len(data) if echoed else data[0]) != count:
        raise RuntimeError(f"the model answered {len(data) if echoed else data[0]} values for {count} sent")
    peak = _status_kib(pid, "VmHWM") * 1024
    return {
        "rss_before_mib": round(before / MIB, 1),
        "peak_growth_mib": round((peak - before) / MIB, 1),
        "bytes_held_per_byte_sent": round((peak - before) / len(body), 2),
        "seconds": round(seconds, 2),
    }


def _post(server: Server, body: bytes) -> bytes:
    request = urllib.request.Request(
        f"{server.http_url}/v2/models/echo/infer", data=body, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=600) as answer:
        return answer.read()


def _percentiles(latencies: list[float]) -> dict[str, Any]:
    ordered = sorted(latencies)
    return {
        "requests": len(ordered),
        "p50_ms": round(1000 * ordered[len(ordered) // 2], 1),
        "p99_ms": round(1000 * ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))], 1),
        "max_ms": round(1000 * ordered[-1], 1),
    }


def due_latencies(send: Callable[[], object], going: Callable[[float], bool], most: int, seconds: float) -> list[float]:
    """`send()` called for requests due every SMALL_INTERVAL_S, while `going(due)` says the request due then is still
    wanted: each one's latency from when it was due. Bounded: `most` requests, `seconds` in all."""
    latencies: list[float] = []
    start = time.perf_counter()
    while len(latencies) < most and time.perf_counter() - start < seconds:
        due = start + len(latencies) * SMALL_INTERVAL_S
        if not going(due):
            break
        wait = due - time.perf_counter()
        if wait > 0:
            time.sleep(wait)
        send()
        latencies.append(time.perf_counter() - due)
    return latencies


def small_requests_during(server: Server, body: bytes, seconds: float = 120.0) -> dict[str, Any]:
    """Small requests (four values each) on one kept-alive connection, due every SMALL_INTERVAL_S, alone and then
    while `body` is answered on another connection: their latencies' percentiles, side by side."""
    small, _ = json_body(len(NUMBER) * 4)
    where = urllib.parse.urlsplit(server.http_url)
    connection = http.client.HTTPConnection(str(where.hostname), where.port, timeout=600)

    def send() -> None:
        connection.request("POST", "/v2/models/echo/infer", body=small, headers={"Content-Type": "application/json"})
        answer = connection.getresponse()
        answer.read()
        if answer.status != 200:
            raise RuntimeError(f"a small request got HTTP {answer.status}")

    try:
        alone = due_latencies(send, lambda due: True, SMALL_ALONE, seconds)
        answered: list[float] = []  # when the large body's answer came back

        def large() -> None:
            _post(server, body)
            answered.append(time.perf_counter())

        thread = threading.Thread(target=large, daemon=True)
        thread.start()
        # every request due before the large answer came back, those sent after it too (held back by it)
        during = due_latencies(send, lambda due: not answered or due < answered[0], SMALL_MOST, seconds)
        thread.join(timeout=seconds)
    finally:
        connection.close()
    return {"alone": _percentiles(alone), "during_the_large_body": _percentiles(during or [0.0])}


@contextmanager
def served_at(folder: Path, implementation: str, env: dict[str, str], rev: str | None) -> Iterator[Server]:
    """`folder` served by this tree (Slipway's launcher or plain `mlserver start`), or by REV's tree."""
    if rev is None:
        with LocalServer(folder, extra_env=env, launcher=implementation == SLIPWAY) as server:
            yield server
        return
    from benchmarks.against import served_by, tree_of

    saved = {name: os.environ.get(name) for name in env}
    os.environ.update(env)  # REV's server takes this process's environment
    try:
        with served_by(tree_of(rev), folder) as served:
            yield served
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Each server in turn, `args.rounds` requests of `args.mib` MiB each; the median growth per server."""
    body, count = json_body(args.mib * MIB)
    env = {"SLIPWAY_MAX_BODY_BYTES": str(len(body) + MIB)}
    sides: list[tuple[str, str, str | None]] = [("slipway", SLIPWAY, None)]
    if args.against:
        from benchmarks.against import resolve

        sides += [(f"slipway_at_{commit[:12]}", SLIPWAY, commit) for commit in map(resolve, args.against)]
    sides.append(("plain_mlserver", PLAIN, None))
    root = Path(tempfile.mkdtemp(prefix="slipway-body-memory-"))
    figures: dict[str, Any] = {}
    try:
        for side, implementation, rev in sides:
            with served_at(identity_folder(root / side, implementation), implementation, env, rev) as server:
                runs = [peak_growth(server, body, count) for _ in range(args.rounds)]
                latency = small_requests_during(server, body)
            growth = sorted(run["bytes_held_per_byte_sent"] for run in runs)
            figures[side] = {
                "runs": runs,
                "median_bytes_held_per_byte_sent": growth[len(growth) // 2],
                "small_requests": latency,
            }
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return {
        "body_bytes": len(body),
        "numbers": count,
        "rounds": args.rounds,
        "against": [rev for _, _, rev in sides if rev is not None],
        "small_request_interval_ms": SMALL_INTERVAL_S * 1000,
        "load_average": os.getloadavg()[0],
        "servers": figures,
    }


def plot(payload: dict[str, Any], path: Path) -> None:
    """Per server: bytes held per byte sent, and the small requests' p99 alone and during the large body."""
    from slipway.plots import pyplot, save_png

    plt = pyplot()
    names = list(payload["servers"])
    servers = [payload["servers"][name] for name in names]
    figure, (held, waited) = plt.subplots(1, 2, figsize=(11, 4.2))
    held.bar(names, [server["median_bytes_held_per_byte_sent"] for server in servers], color="tab:blue", alpha=0.7)
    held.set_ylabel("peak bytes held per byte sent (median)")
    held.set_title(f"one {payload['body_bytes'] >> 20} MiB JSON body")
    for offset, key, label in ((-0.2, "alone", "alone"), (0.2, "during_the_large_body", "during the large body")):
        p99 = [server["small_requests"][key]["p99_ms"] for server in servers]
        waited.bar([i + offset for i in range(len(names))], p99, 0.4, label=label, alpha=0.7)
    waited.set_xticks(range(len(names)))
    waited.set_xticklabels(names)
    waited.set_yscale("log")
    waited.set_ylabel("small requests' p99 (ms, log scale)")
    waited.set_title(f"a small request every {payload['small_request_interval_ms']:g} ms")
    waited.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.1), ncol=2)
    for axis in (held, waited):
        axis.tick_params(axis="x", labelsize=8)
    save_png(figure, path)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--mib", type=int, default=64, help="the JSON body's size in MiB (default 64)")
    parser.add_argument("--rounds", type=int, default=3, help="requests per server (default 3)")
    parser.add_argument(
        "--against", metavar="REV", action="append", help="also serve with REV's tree (a commit id, tag or branch; repeatable)"
    )
