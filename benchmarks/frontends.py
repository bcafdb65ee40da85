"""`python -m benchmarks.frontends`: one front end against N (`wrappers.frontends`), side by side, over gRPC.

Both servers get the same runtime settings but `frontends`, are up at once, answer one fixed request the
same before anything is timed, and are loaded in turns (round by round), each through as many gRPC
connections as clients (HTTP/2 keeps a connection on one process, so one channel would reach one front
end only). Server CPU counts every process of the server (the supervisor's tree). Writes
`reports/bench-frontends.json`: rows/s, p50/p99, server CPU per request, and N's rows/s over one's per round;
and what the hand-off itself costs per request (`hop_cost`).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from pathlib import Path

import numpy as np

from benchmarks.load import GRPC, grpc_answer, run_load
from benchmarks.models import BENCH_DIR, MODELS, BenchModel, server_folder
from benchmarks.run import IMPLEMENTATIONS, SLIPWAY, SLIPWAY_SETTINGS
from slipway.cli import ArgumentParser, UserError, console, exit_with
from slipway.local_server import LocalServer
from slipway.reports import write_report
from slipway.v2_requests import grpc_request

# Merging across front ends needs max_batch_rows above 1; the one-process server gets the same, so only
# `frontends` differs between the two.
MERGE = {"digits": {"max_batch_rows": 8}, "mobilenetv2": {}}


def _answer(target: str, request: bytes) -> np.ndarray:
    from tritonclient.grpc import service_pb2

    response = service_pb2.ModelInferResponse.FromString(grpc_answer(target, request))
    return np.frombuffer(response.raw_output_contents[0], dtype=np.float32)


def side_by_side(
    model: BenchModel,
    settings: dict,
    *,
    frontends: int,
    concurrency: int,
    seconds: float,
    rounds: int,
    work_dir: Path,
    rows: int = 1,
    on_step: Callable[[int], None] | None = None,
) -> dict:
    """One front end and `frontends` of them, both up at once with the same `settings` but `frontends`, loaded in
    turns round by round over gRPC through one connection per client; refused where their answers differ."""
    folders = {
        count: server_folder(work_dir, model, f"frontends-{count}", IMPLEMENTATIONS[SLIPWAY], {**settings, "frontends": count})
        for count in (1, frontends)
    }
    inputs = {model.input_name: model.batch(rows)}
    request = grpc_request(model.name, inputs)
    summaries: dict[int, list[dict]] = {count: [] for count in folders}
    with ExitStack() as stack:
        servers = {count: stack.enter_context(LocalServer(folder)) for count, folder in folders.items()}
        answers = {count: _answer(server.grpc_target, request) for count, server in servers.items()}
        if not np.allclose(answers[1], answers[frontends], rtol=1e-5, atol=1e-6):
            raise RuntimeError(
                f"{model.name}: {frontends} front ends answer {answers[frontends][:4]}..., one answers "
                f"{answers[1][:4]}...: not timing a server that answers differently"
            )
        for _ in range(rounds):
            for count, server in servers.items():
                result = run_load(
                    protocol=GRPC,
                    server=server,
                    model=model.name,
                    inputs=inputs,
                    concurrency=concurrency,
                    seconds=seconds,
                    warmup_s=1.0,
                    process_tree=True,
                    channels=concurrency,
                )
                summaries[count].append(result.summary())
                console.print(f"{model.name} frontends={count}: {result.summary()['rows_per_s']:.0f} rows/s")
                if on_step:
                    on_step(1)
    ratios = [many["rows_per_s"] / one["rows_per_s"] for one, many in zip(summaries[1], summaries[frontends])]
    return {
        "settings": settings,
        "frontends": frontends,
        "concurrency": concurrency,
        "rows_per_request": rows,
        "answers_equal": True,
        "points": {
            str(count): {"median_rows_per_s": statistics.median(s["rows_per_s"] for s in runs), "rounds": runs}
            for count, runs in summaries.items()
        },
        "ratio_rounds": [round(ratio, 3) for ratio in ratios],
        "ratio_median": round(statistics.median(ratios), 3),
    }


def bench(model_name: str, *, frontends: int, concurrency: int, seconds: float, rounds: int) -> dict:
    model = MODELS[model_name]()
    settings = {**SLIPWAY_SETTINGS.get(model.name, {}), **MERGE.get(model.name, {})}
    return side_by_side(
        model,
        settings,
        frontends=frontends,
        concurrency=concurrency,
        seconds=seconds,
        rounds=rounds,
        work_dir=BENCH_DIR / "frontends",
    )


def hop_cost(model_name: str, *, requests: int, rounds: int) -> dict:
    """Microseconds per 1-row request, one at a time and 8 in flight: through the runtime's own batcher in this
    process (a hop to a run thread and back), and through a session host process (slot, socket, host, socket)."""
    import asyncio
    import subprocess
    import sys
    import tempfile
    from pathlib import Path

    from engine.runner import SessionRunner
    from engine.session import create_session
    from slipway.child import stop_with_parent
    from slipway.runtime_settings import RuntimeSettings
    from wrappers.frontends.client import HostClient
    from wrappers.running.batching import RowBatcher

    model = MODELS[model_name]()
    folder = server_folder(BENCH_DIR / "frontends", model, "hop", IMPLEMENTATIONS[SLIPWAY], {"frontends": 2})
    runner = SessionRunner(create_session(folder / "model.onnx", RuntimeSettings()))
    names = [node.name for node in runner.session.get_outputs()]
    feeds = {model.input_name: model.row}
    with tempfile.TemporaryDirectory(prefix="slipway-hop-") as workdir:
        socket_path = Path(workdir) / "host.sock"
        host = subprocess.Popen(
            [sys.executable, "-m", "wrappers.frontends.host", str(folder), str(socket_path)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            preexec_fn=stop_with_parent,
        )
        try:
            deadline = time.monotonic() + 120
            while not socket_path.exists():
                if host.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("the session host did not start")
                time.sleep(0.1)

            async def timed(submit, in_flight: int) -> float:
                for _ in range(100):
                    await submit(feeds, 1)
                started = time.perf_counter()

                async def worker() -> None:
                    for _ in range(requests // in_flight):
                        await submit(feeds, 1)

                await asyncio.gather(*(worker() for _ in range(in_flight)))
                return 1e6 * (time.perf_counter() - started) / (requests // in_flight * in_flight)

            async def measure() -> dict:
                batcher = RowBatcher(lambda f, rows: runner.run(names, f), max_rows=8)
                client = HostClient(socket_path, slots=16, on_lost=lambda: None)
                await client.start()
                found: dict[str, list[float]] = {}
                for _ in range(rounds):
                    for in_flight in (1, 8):
                        found.setdefault(f"in_process_batcher_{in_flight}_in_flight_us", []).append(
                            await timed(batcher.submit, in_flight)
                        )
                        found.setdefault(f"session_host_{in_flight}_in_flight_us", []).append(
                            await timed(client.submit, in_flight)
                        )
                client.close()
                batcher.close()
                return {key: round(statistics.median(values), 1) for key, values in found.items()}

            return {"model": model_name, "requests": requests, "rounds": rounds, **asyncio.run(measure())}
        finally:
            host.terminate()
            host.wait(timeout=15)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of `python -m benchmarks frontends` (and of `python -m benchmarks.frontends`)."""
    parser.add_argument("--models", nargs="+", default=["digits", "mobilenetv2"], help=f"of {sorted(MODELS)}")
    parser.add_argument("--frontends", type=int, default=2, help="front ends of the server set beside one")
    parser.add_argument("--concurrency", type=int, default=8, help="clients, each on its own gRPC connection")
    parser.add_argument("--seconds", type=float, default=8.0, help="per load, per round")
    parser.add_argument("--rounds", type=int, default=3, help="loads per server, in turns")
    parser.add_argument("--hop-requests", type=int, default=3000, help="requests per hop-cost measurement (0: none)")


def run(args: argparse.Namespace) -> int:
    """Measure, write reports/bench-frontends.json, say the ratios; a UserError (one line) for bad options."""
    unknown = sorted(set(args.models) - set(MODELS))
    if unknown or args.frontends < 2 or args.seconds <= 0 or args.rounds < 1 or args.concurrency < 1:
        raise UserError(
            f"use --models of {sorted(MODELS)}, --frontends of 2 or more, and positive --seconds, --rounds and --concurrency"
        )
    payload = {
        "hop": hop_cost("digits", requests=args.hop_requests, rounds=args.rounds) if args.hop_requests else None,
        "protocol": GRPC,
        "concurrency": args.concurrency,
        "seconds": args.seconds,
        "rounds": args.rounds,
        "models": {
            name: bench(name, frontends=args.frontends, concurrency=args.concurrency, seconds=args.seconds, rounds=args.rounds)
            for name in args.models
        },
    }
    path = write_report("bench-frontends", payload)
    for name, result in payload["models"].items():
        console.print(f"{name}: {args.frontends} front ends / 1 = {result['ratio_median']} (rounds {result['ratio_rounds']})")
    console.print(f"written {path}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = ArgumentParser(prog="python -m benchmarks.frontends", description=__doc__.splitlines()[0])
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    exit_with(main)
