"""`python -m benchmarks against REV`: this tree's runtime against another commit's, side by side.

`make bench` gives Slipway's rows/s over the plain runtime's; that ratio also moves with what both share (the
host, MLServer, how servers are started), so whether a change slowed serving down is answered here directly:
the same server folder (`make bench`'s settings) served by this tree and by REV's (unpacked with `git archive`
under build/bench/against/), both up at once, answering one request alike before anything is timed, loaded in
turns from one client (who goes first alternates by round, so drift hits both). Per point it keeps rows/s, p50
and server CPU per request of each (CPU per request is the steadier figure on a shared machine), and this
tree's over REV's round by round. Writes reports/bench-against.json and a plot beside it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from benchmarks.load import GRPC, REST, grpc_answer, run_load
from benchmarks.models import BENCH_DIR, MODELS, BenchModel, server_folder
from benchmarks.run import IMPLEMENTATIONS, SLIPWAY, SLIPWAY_SETTINGS
from slipway.child import stop_with_parent
from slipway.cli import UserError
from slipway.local_server import LocalServer
from slipway.paths import PROJECT_ROOT
from slipway.v2_requests import grpc_request

THIS, BASE = "this", "base"  # this tree, and REV's
# Runs in REV's tree, with its own code: starts its server for a folder, prints where it listens, and stops it
# when our end of its stdin closes (we stopped, or died). The module holding LocalServer moved over time, and the
# venv's path finds this tree's modules too, so the module is named by what REV's tree holds (`_launcher_module`).
HOLDER = """
import importlib, json, sys
from pathlib import Path
server = importlib.import_module(sys.argv[2]).LocalServer(Path(sys.argv[1])).start()
print(json.dumps({"http_url": server.http_url, "grpc_target": server.grpc_target, "pid": server.pid}), flush=True)
try:
    sys.stdin.read()
finally:
    server.stop()
"""


@dataclass(frozen=True)
class Served:
    """Where a server of REV's tree listens, and its PID (its CPU is measured like ours)."""

    http_url: str
    grpc_target: str
    pid: int


def resolve(rev: str) -> str:
    """REV's full commit id; a UserError naming what to pass where git does not know it."""
    found = subprocess.run(
        ["git", "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}"], cwd=PROJECT_ROOT, capture_output=True, text=True
    )
    if found.returncode:
        raise UserError(f"{rev!r} is not a commit of this repository: pass a commit id, tag or branch (git log)")
    return found.stdout.strip()


def tree_of(commit: str, root: Path = BENCH_DIR / "against") -> Path:
    """REV's files, unpacked once (into a temporary folder renamed into place, so never half there)."""
    tree = root / commit[:12]
    if tree.is_dir():
        return tree
    root.mkdir(parents=True, exist_ok=True)
    unpacking = Path(tempfile.mkdtemp(prefix=f".{commit[:12]}-", dir=root))
    try:
        archive = subprocess.run(
            ["git", "archive", "--format=tar", commit], cwd=PROJECT_ROOT, capture_output=True, check=True
        ).stdout
        subprocess.run(["tar", "-x", "-C", str(unpacking)], input=archive, check=True)
        unpacking.rename(tree)
    except BaseException:
        shutil.rmtree(unpacking, ignore_errors=True)
        raise
    return tree


def _launcher_module(tree: Path) -> str:
    for module in ("slipway.local_server", "wrappers.server"):
        if (tree / (module.replace(".", "/") + ".py")).is_file():
            return module
    raise UserError(f"{tree} has neither slipway/local_server.py nor wrappers/server.py: compare with a later commit")


@contextmanager
def served_by(tree: Path, folder: Path) -> Iterator[Served]:
    """`folder` served by the code in `tree` (its launcher, its runtime), in a process of its own."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(folder), _launcher_module(tree)],
        cwd=tree,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        preexec_fn=stop_with_parent,
    )
    assert holder.stdin is not None and holder.stdout is not None  # both are pipes (PIPE above)
    try:
        line = holder.stdout.readline()
        if not line:
            raise UserError(f"the server of {tree} did not start (exit status {holder.wait()}): see its error above")
        yield Served(**json.loads(line))
    finally:
        holder.stdin.close()  # the holder stops its server and exits
        try:
            holder.wait(timeout=30)
        except subprocess.TimeoutExpired:
            holder.kill()
            holder.wait()


def _answer(target: str, request: bytes) -> np.ndarray:
    from tritonclient.grpc import service_pb2

    response = service_pb2.ModelInferResponse.FromString(grpc_answer(target, request))
    return np.frombuffer(response.raw_output_contents[0], dtype=np.float32)


def _side(runs: list[dict]) -> dict:
    return {
        "rows_per_s": statistics.median(run["rows_per_s"] for run in runs),
        "p50_ms": statistics.median(run["p50_ms"] for run in runs),
        "server_cpu_ms_per_request": statistics.median(run["server_cpu_ms_per_request"] for run in runs),
        "rounds": runs,
    }


def compare(
    model: BenchModel,
    rev: str,
    tree: Path,
    *,
    protocols: list[str],
    concurrency: list[int],
    seconds: float,
    rounds: int,
    work_dir: Path,
    on_step: Callable[[], None] = lambda: None,
) -> dict:
    """Every point (protocol x concurrency) of `model`, this tree's server and `tree`'s loaded in turns."""
    settings = SLIPWAY_SETTINGS.get(model.name, {})
    folder = server_folder(work_dir, model, "against", IMPLEMENTATIONS[SLIPWAY], settings)
    inputs = {model.input_name: model.row}
    request = grpc_request(model.name, inputs)
    points = []
    with ExitStack() as stack:
        servers: dict[str, LocalServer | Served] = {
            THIS: stack.enter_context(LocalServer(folder)),
            BASE: stack.enter_context(served_by(tree, folder)),
        }
        ours, theirs = (_answer(server.grpc_target, request) for server in servers.values())
        if not np.allclose(ours, theirs, rtol=1e-5, atol=1e-6):
            raise UserError(
                f"{model.name}: {rev} answers {theirs[:4]}..., this tree {ours[:4]}...: not timing "
                "servers that answer differently"
            )
        for protocol in protocols:
            for clients in concurrency:
                runs: dict[str, list[dict]] = {THIS: [], BASE: []}
                for index in range(rounds):
                    order = [THIS, BASE] if index % 2 == 0 else [BASE, THIS]
                    for side in order:
                        result = run_load(
                            protocol=protocol,
                            server=servers[side],
                            model=model.name,
                            inputs=inputs,
                            concurrency=clients,
                            seconds=seconds,
                        )
                        runs[side].append(result.summary())
                        on_step()
                point = {"protocol": protocol, "concurrency": clients, THIS: _side(runs[THIS]), BASE: _side(runs[BASE])}
                for key, field in (("rows_per_s", "rows_per_s"), ("cpu_per_request", "server_cpu_ms_per_request")):
                    ratios = [round(a[field] / b[field], 3) for a, b in zip(runs[THIS], runs[BASE])]
                    point[f"{key}_ratio_rounds"], point[f"{key}_ratio"] = ratios, statistics.median(ratios)
                points.append(point)
    return {"settings": settings, "points": points}


def markdown(payload: dict) -> str:
    """The table docs/benchmarks.md shows: medians of each side, and this tree's over REV's with the rounds' range."""
    lines = [
        f"This tree against `{payload['rev'][:12]}`, {payload['rounds']} rounds of {payload['seconds']:g} s per point "
        f"(load average {payload['load_average']}):",
        "",
        "| model | protocol | clients | rows/s this / base | ratio (rounds) | server CPU ms/request this / base | ratio |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, model in payload["models"].items():
        for point in model["points"]:
            this, base = point[THIS], point[BASE]
            rounds = point["rows_per_s_ratio_rounds"]
            lines.append(
                f"| {name} | {point['protocol']} | {point['concurrency']} | {this['rows_per_s']:,.1f} / "
                f"{base['rows_per_s']:,.1f} | {point['rows_per_s_ratio']:.2f} ({min(rounds):.2f}-{max(rounds):.2f}) | "
                f"{this['server_cpu_ms_per_request']:.3f} / {base['server_cpu_ms_per_request']:.3f} | "
                f"{point['cpu_per_request_ratio']:.2f} |"
            )
    return "\n".join(lines) + "\n"


def plot(payload: dict, path: Path) -> None:
    """Per model: this tree's rows/s and CPU per request over REV's at each point, each round a dot."""
    from slipway.plots import pyplot, save_png

    plt = pyplot()
    models = payload["models"]
    figure, axes = plt.subplots(1, len(models), figsize=(6 * len(models), 4.2), squeeze=False)
    for axis, (name, model) in zip(axes[0], models.items()):
        labels = [f"{p['protocol']}\nc={p['concurrency']}" for p in model["points"]]
        for offset, key, label in (
            (-0.15, "rows_per_s", "rows/s (higher is better)"),
            (0.15, "cpu_per_request", "server CPU per request (lower is better)"),
        ):
            medians = [p[f"{key}_ratio"] for p in model["points"]]
            axis.bar([i + offset for i in range(len(labels))], medians, 0.3, label=label, alpha=0.7)
            for i, point in enumerate(model["points"]):
                rounds = point[f"{key}_ratio_rounds"]
                axis.plot([i + offset] * len(rounds), rounds, "k.", markersize=4)
        axis.axhline(1.0, color="black", linewidth=0.8)
        axis.set_xticks(range(len(labels)))
        axis.set_xticklabels(labels)
        axis.set_ylabel(f"this tree / {payload['rev'][:12]}")
        axis.set_title(name)
        axis.legend(fontsize=8)
    save_png(figure, path)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of `python -m benchmarks against`."""
    parser.add_argument("rev", help="the commit to compare with (id, tag or branch)")
    parser.add_argument("--models", nargs="+", default=["digits", "mobilenetv2"], help=f"of {sorted(MODELS)}")
    parser.add_argument("--protocols", nargs="+", default=[GRPC, REST], help="grpc and/or rest (default both)")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8], help="clients per point (default 1 8)")
    parser.add_argument("--seconds", type=float, default=2.0, help="per load, per round (default 2)")
    parser.add_argument("--rounds", type=int, default=6, help="loads per server per point, in turns (default 6)")
    parser.add_argument(
        "--no-docs",
        dest="update_docs",
        action="store_false",
        help="leave docs/benchmarks.md as it is (default: its table is replaced)",
    )


def run(args: argparse.Namespace, on_step: Callable[[], None] = lambda: None) -> dict:
    """Check the options (a UserError in one line), unpack REV, measure every model; the report's payload."""
    unknown = sorted(set(args.models) - set(MODELS)) + sorted(set(args.protocols) - {GRPC, REST})
    if unknown or args.seconds <= 0 or args.rounds < 1 or min(args.concurrency) < 1:
        raise UserError(
            f"unknown {unknown}: use --models of {sorted(MODELS)}, --protocols of grpc rest, and positive "
            "--seconds, --rounds and --concurrency"
            if unknown
            else "give positive --seconds, --rounds and --concurrency"
        )
    commit = resolve(args.rev)
    tree = tree_of(commit)
    return {
        "rev": commit,
        "load_average": round(os.getloadavg()[0], 2),
        "protocols": args.protocols,
        "concurrency": args.concurrency,
        "seconds": args.seconds,
        "rounds": args.rounds,
        "models": {
            name: compare(
                MODELS[name](),
                commit,
                tree,
                protocols=args.protocols,
                concurrency=args.concurrency,
                seconds=args.seconds,
                rounds=args.rounds,
                work_dir=BENCH_DIR / "against" / "servers",
                on_step=on_step,
            )
            for name in args.models
        },
    }


def steps(args: argparse.Namespace) -> int:
    """Loads a run makes: its progress bar's total."""
    return len(args.models) * len(args.protocols) * len(args.concurrency) * args.rounds * 2
