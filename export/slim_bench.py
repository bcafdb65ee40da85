"""`make bench-slim`: a model and its half-width copy (structured pruning by channel groups), timed side by side.

Issue 26's goal for real architectures: MobileNetV2 (random weights: only sizes and speed
are at stake) with half the channels of every group that may shrink runs at least 1.6x
the images per second at batch 32 on the CPU, and both ONNX graphs are valid and answer
with outputs of the same shape. The two are timed in one run, in interleaved rounds (each
round times both, in alternating order), so load from another process on a shared machine
falls on both alike; the throughput ratio is reported per round, as a median with its
spread, so a noisy run shows as a wide spread rather than as a misleading single figure.
"""

from __future__ import annotations

import functools
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from export.model import INPUT_NAME
from slipway import atomic
from slipway.readme import replace_section
from slipway.reports import write_report

PAGE_SECTION = "bench-slim"
REPORT_NAME = "bench-slim"
TARGET_RATIO = 1.6
BATCH = 32


class SlimBenchError(ValueError):
    """The model cannot be slimmed or benchmarked as asked."""


@dataclass(frozen=True)
class Side:
    """One of the two models: what it costs to ship, what it answers, how fast it runs."""

    name: str
    file_bytes: int
    parameters: int
    conv_filters: int  # output channels over every Conv2D / DepthwiseConv2D: "how many channels" in one number
    output_shapes: dict[str, list[int]]
    graph_valid: bool
    graph_error: str | None
    throughput: float  # images/s at the batch, from the median call over all rounds
    call_ms: list[float]  # the median call of each round, for the plot

    def as_dict(self) -> dict:
        return {
            "name": self.name,
            "file_bytes": self.file_bytes,
            "parameters": self.parameters,
            "conv_filters": self.conv_filters,
            "output_shapes": self.output_shapes,
            "graph_valid": self.graph_valid,
            "graph_error": self.graph_error,
            "throughput": self.throughput,
            "median_call_ms_per_round": self.call_ms,
        }


@dataclass(frozen=True)
class SlimBench:
    model: str
    fraction: float
    batch: int
    rounds: int
    calls_per_round: int
    full: Side
    slim: Side
    ratios: list[float]  # slim / full throughput, one per round

    @property
    def ratio(self) -> float:
        return statistics.median(self.ratios)

    @property
    def same_output_shapes(self) -> bool:
        return self.full.output_shapes == self.slim.output_shapes

    @property
    def met(self) -> bool:
        return self.ratio >= TARGET_RATIO and self.full.graph_valid and self.slim.graph_valid and self.same_output_shapes

    def spread(self) -> dict:
        quartiles = statistics.quantiles(self.ratios, n=4) if len(self.ratios) > 1 else [self.ratio] * 3
        return {"min": min(self.ratios), "q1": quartiles[0], "median": self.ratio, "q3": quartiles[2], "max": max(self.ratios)}


def conv_filters(model) -> int:
    """Output channels summed over the model's convolutions (Conv2D filters, DepthwiseConv2D channels)."""
    total = 0
    for layer in model.layers:
        kind = type(layer).__name__
        if kind in ("Conv2D", "DepthwiseConv2D"):
            total += int(layer.output.shape[-1])
    return total


def check_graph(model_bytes: bytes) -> str | None:
    """None when onnx.checker (full check, shape inference included) accepts the graph, else its complaint in one line."""
    import onnx

    try:
        onnx.checker.check_model(onnx.ModelProto.FromString(model_bytes), full_check=True)
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as err:
        return " ".join(str(err).split())
    return None


def _output_shapes(answers: object) -> dict[str, list[int]]:
    """ONNX Runtime's answers (a list of arrays) as {output_<i>: shape}."""
    return {f"output_{i}": list(np.shape(answer)) for i, answer in enumerate(answers if isinstance(answers, list) else [answers])}


def _time(run: Callable[[], object], calls: int) -> float:
    """The median of `calls` timed calls, in seconds."""
    times = []
    for _ in range(calls):
        started = time.perf_counter()
        run()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def compare(
    model,
    images: np.ndarray,
    *,
    fraction: float,
    rounds: int,
    calls: int,
    opset: int,
    step: Callable[[str], None] = lambda _: None,
) -> SlimBench:
    """Slim `model`, convert both to ONNX, check them, and time both at `len(images)` rows in interleaved rounds.

    `step` is called once per stage and once per round (`step_count` of them): the progress bar.
    """
    from export.convert import keras_to_onnx
    from export.measure import onnx_runner, onnx_size
    from export.optimize import optimize_graph
    from export.prune import PruneError, prune_filters

    if rounds < 2 or calls < 1:
        raise SlimBenchError(f"--rounds must be at least 2 (a spread needs two) and --calls at least 1, got {rounds} and {calls}")
    step("slimming")
    try:
        slim = prune_filters(model, fraction)
    except PruneError as err:
        raise SlimBenchError(str(err)) from err
    graphs = {}
    for name, keras_model in (("full", model), ("slim", slim)):
        step(f"converting {name}")  # optimized as every served variant is, so the timing is the served graph's
        graphs[name] = optimize_graph(keras_to_onnx(keras_model, opset=opset)).SerializeToString()
    step("checking graphs")
    runners = {name: onnx_runner(graph) for name, graph in graphs.items()}
    feeds = {INPUT_NAME: images}  # keras_to_onnx names a one-input model's input so
    shapes = {name: _output_shapes(run(feeds)) for name, run in runners.items()}
    errors = {name: check_graph(graph) for name, graph in graphs.items()}
    per_round: dict[str, list[float]] = {"full": [], "slim": []}
    for index in range(rounds):
        order = ("full", "slim") if index % 2 == 0 else ("slim", "full")  # alternate: neither always runs first
        for name in order:
            per_round[name].append(_time(functools.partial(runners[name], feeds), calls))
        step(f"round {index + 1}/{rounds}")
    sides = {}
    for name, keras_model in (("full", model), ("slim", slim)):
        size = onnx_size(graphs[name])
        sides[name] = Side(
            name=name,
            file_bytes=size.file_bytes,
            parameters=size.parameters,
            conv_filters=conv_filters(keras_model),
            output_shapes=shapes[name],
            graph_valid=errors[name] is None,
            graph_error=errors[name],
            throughput=len(images) / statistics.median(per_round[name]),
            call_ms=[t * 1e3 for t in per_round[name]],
        )
    ratios = [full / slim_time for full, slim_time in zip(per_round["full"], per_round["slim"])]
    return SlimBench(model.name, fraction, len(images), rounds, calls, sides["full"], sides["slim"], ratios)


def step_count(rounds: int) -> int:
    """How many times `compare` calls `step`."""
    return 4 + rounds


def markdown(result: SlimBench, load: dict) -> str:
    spread = result.spread()
    full, slim = result.full, result.slim
    lines = [
        f"Measured by `make bench-slim` on {load['cores']} CPU cores (load average {load['before']:.1f} before, "
        f"{load['after']:.1f} after the run: above the core count means the cores were shared). "
        f"{result.model} with random weights, {result.fraction:.0%} of the channels of every channel group that may shrink "
        f"removed (`export.channel_groups`), both ONNX graphs optimized as served and timed by ONNX Runtime at batch "
        f"{result.batch} in {result.rounds} interleaved rounds of {result.calls_per_round} calls.",
        "",
        "| | full | slim | slim / full |",
        "|---|--:|--:|--:|",
        f"| convolution channels | {full.conv_filters:,} | {slim.conv_filters:,} | {slim.conv_filters / full.conv_filters:.2f} |",
        f"| parameters | {full.parameters:,} | {slim.parameters:,} | {slim.parameters / full.parameters:.2f} |",
        f"| ONNX file (MB) | {full.file_bytes / 1e6:.1f} | {slim.file_bytes / 1e6:.1f} | {slim.file_bytes / full.file_bytes:.2f} |",
        f"| images/s at batch {result.batch} | {full.throughput:.1f} | {slim.throughput:.1f} | **{result.ratio:.2f}x** |",
        "",
        f"Throughput ratio per round: median {spread['median']:.2f}x, quartiles {spread['q1']:.2f}-{spread['q3']:.2f}x, "
        f"range {spread['min']:.2f}-{spread['max']:.2f}x (target >= {TARGET_RATIO}x). "
        f"ONNX graphs valid (onnx.checker, full check): full {'yes' if full.graph_valid else '**no**'}, "
        f"slim {'yes' if slim.graph_valid else '**no**'}; outputs of the same shape: "
        f"{'yes' if result.same_output_shapes else '**no**'} ({', '.join(str(s) for s in slim.output_shapes.values())}). "
        f"Goal met: {'yes' if result.met else '**no**'}.",
    ]
    return "\n".join(lines) + "\n"


def plot(result: SlimBench, path: Path) -> None:
    """Median call time of each round, full vs slim, and the ratio per round against the target."""
    from slipway.plots import pyplot, save_png

    plt = pyplot()
    figure, (calls, ratios) = plt.subplots(1, 2, figsize=(10, 3.8))
    rounds = range(1, result.rounds + 1)
    for side in (result.full, result.slim):
        calls.plot(rounds, side.call_ms, marker="o", label=f"{side.name} ({side.throughput:.0f} images/s)")
    calls.set(title=f"{result.model}: one call at batch {result.batch}", xlabel="round", ylabel="median call (ms)")
    calls.set_ylim(bottom=0)
    calls.legend()
    ratios.plot(rounds, result.ratios, marker="o", color="tab:green", label=f"slim / full (median {result.ratio:.2f}x)")
    ratios.axhline(TARGET_RATIO, color="tab:red", linestyle="--", label=f"target {TARGET_RATIO}x")
    ratios.set(title="throughput ratio per round", xlabel="round", ylabel="x faster")
    ratios.set_ylim(bottom=0)
    ratios.legend()
    save_png(figure, path)


def write(result: SlimBench, load: dict, page: Path | None) -> Path:
    """reports/bench-slim.json + .png + .md, and the benchmarks page's section (where `page` is given); returns the JSON path."""
    path = write_report(
        REPORT_NAME,
        {
            "model": result.model,
            "fraction_removed": result.fraction,
            "batch": result.batch,
            "rounds": result.rounds,
            "calls_per_round": result.calls_per_round,
            "full": result.full.as_dict(),
            "slim": result.slim.as_dict(),
            "throughput_ratio": result.ratio,
            "throughput_ratio_per_round": result.ratios,
            "throughput_ratio_spread": result.spread(),
            "same_output_shapes": result.same_output_shapes,
            "target": {"throughput_ratio": f">= {TARGET_RATIO}", "graphs_valid": True, "same_output_shapes": True},
            "met": result.met,
            "load_average": load,
        },
    )
    plot(result, path.with_suffix(".png"))
    text = markdown(result, load)
    atomic.write_text(path.with_suffix(".md"), text)
    if page is not None:
        replace_section(page, PAGE_SECTION, text)
    return path


def check_page(page: Path) -> None:
    """Refuse, before a minute of work, a docs page without the section's markers (nothing would land there)."""
    text = page.read_text() if page.is_file() else ""
    if f"<!-- {PAGE_SECTION}:start -->" not in text or f"<!-- {PAGE_SECTION}:end -->" not in text:
        raise SlimBenchError(
            f"{page} has no <!-- {PAGE_SECTION}:start --> / <!-- {PAGE_SECTION}:end --> markers: add them "
            "where the figures belong, or pass --no-docs"
        )
