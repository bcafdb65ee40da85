"""The serving settings a model gets when model-settings.json leaves them out, chosen from what load measured.

A fixed default cannot suit both a 60-microsecond digits CNN and a 10-millisecond MobileNetV2, nor a pod of
one CPU and one of sixteen. So at load the runtime times the model on its own machine
(`wrappers.defaults.measurement`) and this pure function turns those numbers, the CPU limit and whatever the user
set explicitly into the seven settings below, each with the reason a log line and the metrics show:

- inline_below_ms: a run cheaper than a few hops to a thread and back runs on the event loop itself;
- intra_op_threads: 1 for inline runs (they happen on the event loop), else the CPU limit's whole CPUs (the
  rule `engine.session` has always used), so that a lone request still gets every core;
- spin_within_runs: 1 where a lone run gets several threads on the CPU: they spin between its operators while it is
  in flight instead of sleeping and being woken at each one, and stop when it returns (a lower p50 for the same
  server CPU per request at concurrency 1, no change under load);
- busy_intra_op_threads: 1 where a lone run gets several threads: a run that starts while another is in flight
  goes to a single-threaded second session, as an operator split over N threads does less than N times the
  work (runs of 1 thread side by side do more images than runs of 2 in turn);
  0 (one session) where the second copy of the weights would be large;
- inference_threads: as many runs side by side as the CPU limit holds at the busy (else the lone) width each,
  and one more where several fit (while one run's answers travel back the others keep every core busy);
- max_batch_rows: requests that queue behind a busy session merge into one run only where the model's time
  per row falls with the batch; there is no waiting window, so a lone request never waits for company;
- event_loop_spin_us: where runs are inline and the CPU limit leaves gRPC's threads a CPU beside the event loop's,
  the loop may poll for a window after a run, and does while requests come back to back within that window
  (`wrappers.running.poll_gate`); with one CPU a polling loop would take the CPU those threads need.

On a GPU provider nothing is timed here (the kernels' own choices are `wrappers.defaults.gpu`'s): runs merge up to
the largest bucket (`run_planning.gpu_merge_rows`), two run slots let one run's copies and padding overlap the
other's kernels, and one intra-op thread does the CPU's part (shape arithmetic). An explicitly set value always
wins; a value that could not be measured (warm-up off) keeps the setting's fixed default, and says so. The figures
each rule rests on: docs/internals.md, "The figures behind the modules".
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from engine.cpu_limits import threads_for_cpu_limit

Source = Literal["measured", "explicit", "default"]
MEASURED: Source = "measured"
EXPLICIT: Source = "explicit"
DEFAULT: Source = "default"
Value = int | float

INLINE_BELOW_MS = "inline_below_ms"
INTRA_OP_THREADS = "intra_op_threads"
BUSY_INTRA_OP_THREADS = "busy_intra_op_threads"
INFERENCE_THREADS = "inference_threads"
MAX_BATCH_ROWS = "max_batch_rows"
EVENT_LOOP_SPIN_US = "event_loop_spin_us"
SPIN_WITHIN_RUNS = "spin_within_runs"
CHOSEN = (
    INLINE_BELOW_MS,
    INTRA_OP_THREADS,
    SPIN_WITHIN_RUNS,
    BUSY_INTRA_OP_THREADS,
    INFERENCE_THREADS,
    MAX_BATCH_ROWS,
    EVENT_LOOP_SPIN_US,
)
# What each setting is where nothing was measured: the fields' own defaults (`slipway.runtime_settings`).
FIXED_DEFAULTS: dict[str, Value] = {
    INLINE_BELOW_MS: 0.5,
    BUSY_INTRA_OP_THREADS: 0,
    INFERENCE_THREADS: 1,
    MAX_BATCH_ROWS: 1,
    EVENT_LOOP_SPIN_US: 0,
}

# A 1-row run shorter than this many hop round trips goes inline: the hop would be a large share of such a
# request's latency, and the event loop spends part of a hop's CPU on each thread run anyway. 16 hops of ~30 us
# (2 busy CPUs) is the fixed 0.5 ms used before; a machine with faster hops keeps fewer models inline.
INLINE_HOPS = 16
# Merging must make a row at least this much cheaper than alone, or it only adds the neighbours' wait.
MERGE_MIN_GAIN = 1.10
# Of the batch sizes that reach the gain, the smallest within this share of the best one's gain: a larger
# batch that saves almost nothing more would only make merged requests wait longer for each other.
MERGE_NEAR_BEST = 0.95
# A second session holds the weights again: over this much model, runs under load keep sharing the one session.
BUSY_SESSION_MAX_MIB = 512
# Run slots on a GPU provider: while one run's rows are padded and copied, the other's kernels run (each bucket's
# session has a CUDA stream of its own, `wrappers.running.bucket_sessions`).
GPU_RUN_SLOTS = 2
# The longest the event loop polls after an inline run, where it polls at all: digits over gRPC at concurrency 1
# waited 1.46 ms from one run to the next at the median while polling (p90 1.86 ms), so 2 ms spans most waits.
POLL_WINDOW_US = 2000


@dataclass(frozen=True)
class Measurements:
    """What load measured: seconds per row at each batch size timed (the fastest run of each), the round
    trip of a hop from the event loop to a thread and back, and the CPUs this process may use."""

    seconds_per_row: dict[int, float]
    hop_seconds: float
    cpu_limit: float


@dataclass(frozen=True)
class Choice:
    """One setting's value, where it came from, and why (with the numbers it was chosen from)."""

    setting: str
    value: Value | str  # a word for a setting that takes one (wrappers.defaults.gpu: cudnn_conv_algo_search)
    source: Source
    reason: str

    @property
    def number(self) -> float:
        """The value of a numeric setting (all of `CHOSEN` are)."""
        if isinstance(self.value, str):
            raise TypeError(f"{self.setting} is {self.value!r}, not a number")
        return float(self.value)


def choose(
    measured: Measurements | None,
    explicit: dict[str, Value],
    *,
    cpu_limit: float,
    can_merge: bool,
    model_mib: float = 0.0,
    on_cpu: bool = True,
    why_not_measured: str = "",
    why_no_merging: str = "",
    gpu_merge: tuple[int, str] | None = None,
) -> dict[str, Choice]:
    """The seven settings (`CHOSEN`), each explicit where `explicit` names it, else from `measured`.

    `measured` None: nothing could be timed (`why_not_measured` says why); each unset setting keeps its
    fixed default and intra-op threads follow the CPU limit. `can_merge` False (`why_no_merging`): requests
    cannot be merged for this graph or server, so max_batch_rows is 1 unless set. `model_mib`: the model file's
    size, what a second session would hold again. `gpu_merge`: on a GPU provider, the rows runs merge up to and why
    (`run_planning.gpu_merge_rows`).
    """
    chosen: dict[str, Choice] = {
        name: Choice(name, value, EXPLICIT, "set in model-settings.json") for name, value in explicit.items() if name in CHOSEN
    }

    def pick(name: str, value: Value, reason: str, source: Source = MEASURED) -> None:
        if name not in chosen:
            chosen[name] = Choice(name, value, source, reason)

    if gpu_merge is not None:
        _pick_gpu(gpu_merge, pick)
    if measured is None:
        for name, value in FIXED_DEFAULTS.items():
            pick(name, value, f"not measured ({why_not_measured}): the fixed default", DEFAULT)
    else:
        _pick_inline(measured, pick)
    inline_below = chosen[INLINE_BELOW_MS].number
    inline = inline_below > 0 and measured is not None and 1000 * measured.seconds_per_row[1] < inline_below
    threads = threads_for_cpu_limit(cpu_limit)
    if inline:
        pick(
            INTRA_OP_THREADS,
            1,
            "1-row runs go inline on the event loop: more intra-op threads would only add hand-offs between them",
        )
    else:
        pick(
            INTRA_OP_THREADS,
            threads,
            f"the CPU limit {cpu_limit:g} gives each run {threads} thread(s), so a lone request uses every core",
            MEASURED if measured is not None else DEFAULT,
        )
    lone = int(chosen[INTRA_OP_THREADS].number) or threads  # 0: ONNX Runtime's own count, about every core
    _pick_spinning(lone, on_cpu, pick, MEASURED if measured is not None else DEFAULT)
    if measured is not None:
        _pick_busy_width(lone, inline, model_mib, chosen, pick)
    per_run = int(chosen[BUSY_INTRA_OP_THREADS].number) or lone
    fit = max(1, threads // per_run)
    slots = fit + 1 if fit > 1 else 1
    pick(
        INFERENCE_THREADS,
        slots,
        f"{fit} run(s) of {per_run} intra-op thread(s) fit the CPU limit {cpu_limit:g}"
        + ("; one more keeps the cores busy while a run's answers travel back" if fit > 1 else ""),
        MEASURED if measured is not None else DEFAULT,
    )
    if not can_merge:
        pick(MAX_BATCH_ROWS, 1, f"requests cannot be merged here ({why_no_merging})", DEFAULT)
    elif measured is not None:
        _pick_merging(measured, pick)
    if measured is not None:
        _pick_polling(inline, cpu_limit, pick)
    return {name: chosen[name] for name in CHOSEN}


def _pick_gpu(gpu_merge: tuple[int, str], pick: Callable[..., None]) -> None:
    rows, reason = gpu_merge
    pick(MAX_BATCH_ROWS, rows, reason, DEFAULT)
    pick(
        INFERENCE_THREADS,
        GPU_RUN_SLOTS,
        f"on a GPU provider {GPU_RUN_SLOTS} run slots: while one run's rows are padded and copied, the other's kernels run",
        DEFAULT,
    )
    pick(INTRA_OP_THREADS, 1, "on a GPU provider the CPU's share of a run is shape arithmetic: one intra-op thread", DEFAULT)
    pick(INLINE_BELOW_MS, 0.0, "on a GPU provider every run goes to a run slot", DEFAULT)


def _pick_inline(measured: Measurements, pick: Callable[[str, Value, str], None]) -> None:
    run_ms = 1000 * measured.seconds_per_row[1]
    hop_ms = 1000 * measured.hop_seconds
    limit_ms = round(INLINE_HOPS * hop_ms, 4)
    numbers = f"a 1-row run takes {run_ms:.3f} ms, a hop to a thread and back {hop_ms:.3f} ms"
    if run_ms < limit_ms:
        pick(INLINE_BELOW_MS, limit_ms, f"{numbers}: runs under {INLINE_HOPS} hops ({limit_ms:g} ms) go inline")
    else:
        pick(INLINE_BELOW_MS, 0.0, f"{numbers}: over {INLINE_HOPS} hops ({limit_ms:g} ms), so runs go to threads")


def _pick_spinning(lone: int, on_cpu: bool, pick: Callable[..., None], source: Source) -> None:
    """The rule `engine.session.spins_within_runs` applies to a session built with the setting unset."""
    if not on_cpu:
        pick(SPIN_WITHIN_RUNS, 0, "the session runs on a GPU provider: its intra-op threads only feed the device", DEFAULT)
    elif lone > 1:
        pick(
            SPIN_WITHIN_RUNS,
            1,
            f"a lone run spreads over {lone} intra-op threads: they spin between its operators "
            "while it is in flight, instead of each being woken at every operator, and stop when it returns",
            source,
        )
    else:
        pick(SPIN_WITHIN_RUNS, 0, "runs have 1 intra-op thread: no other thread to keep awake", source)


def _pick_busy_width(
    lone: int, inline: bool, model_mib: float, chosen: dict[str, Choice], pick: Callable[[str, Value, str], None]
) -> None:
    one_run_at_a_time = INFERENCE_THREADS in chosen and chosen[INFERENCE_THREADS].value == 1
    if inline or lone < 2:
        pick(BUSY_INTRA_OP_THREADS, 0, f"each run has {lone} intra-op thread(s) already: one session")
    elif one_run_at_a_time:
        pick(BUSY_INTRA_OP_THREADS, 0, "inference_threads 1: runs never overlap, so one session")
    elif model_mib > BUSY_SESSION_MAX_MIB:
        pick(
            BUSY_INTRA_OP_THREADS,
            0,
            f"a second session would hold the model's {model_mib:.0f} MiB again (over {BUSY_SESSION_MAX_MIB} MiB): one session",
        )
    else:
        pick(
            BUSY_INTRA_OP_THREADS,
            1,
            f"a lone request runs on {lone} threads; a run that starts while another is in "
            f"flight runs on 1, in a second session ({model_mib:.0f} MiB of model again): runs side by side do more "
            "rows per CPU second than runs split across threads in turn",
        )


def _pick_merging(measured: Measurements, pick: Callable[[str, Value, str], None]) -> None:
    per_row = measured.seconds_per_row
    alone = per_row[1]
    gains = {rows: alone / seconds for rows, seconds in sorted(per_row.items()) if rows > 1 and seconds > 0}
    timed = ", ".join(f"{rows}: {1000 * per_row[rows]:.3f}" for rows in sorted(per_row))
    if not gains:
        pick(MAX_BATCH_ROWS, 1, f"only batch 1 was timed within the load-time budget (ms per row {timed})")
        return
    best = max(gains.values())
    if best < MERGE_MIN_GAIN:
        pick(
            MAX_BATCH_ROWS,
            1,
            f"ms per row by batch size {{{timed}}}: merging saves under "
            f"{100 * (MERGE_MIN_GAIN - 1):.0f}% per row, so requests run alone",
        )
        return
    rows = min(size for size, gain in gains.items() if gain >= MERGE_NEAR_BEST * best)
    pick(
        MAX_BATCH_ROWS,
        rows,
        f"ms per row by batch size {{{timed}}}: {gains[rows]:.2f}x cheaper per row at "
        f"{rows} rows (best {best:.2f}x), so up to {rows} rows that queue behind a run merge",
    )


def _pick_polling(inline: bool, cpu_limit: float, pick: Callable[[str, Value, str], None]) -> None:
    if not inline:
        pick(EVENT_LOOP_SPIN_US, 0, "runs go to inference threads: the event loop has no run of its own to poll after")
    elif cpu_limit < 2:
        pick(
            EVENT_LOOP_SPIN_US,
            0,
            f"the CPU limit {cpu_limit:g} leaves no CPU beside the event loop's: a polling "
            "loop would take the one gRPC's threads need",
        )
    else:
        pick(
            EVENT_LOOP_SPIN_US,
            POLL_WINDOW_US,
            f"runs go inline and the CPU limit {cpu_limit:g} leaves gRPC's "
            f"threads a CPU: after a run the loop polls up to {POLL_WINDOW_US} us while requests come back to back "
            "within it, else it sleeps",
        )
