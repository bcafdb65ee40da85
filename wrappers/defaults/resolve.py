"""At load, fill in the serving settings model-settings.json left unset, from the model timed on this machine.

The glue between the runtime's load and `wrappers.defaults.choice` (the rule) and `wrappers.defaults.measurement`
(the timing): which settings the user set, whether this model can be timed at all, one log line per choice
with its numbers, and the choice where operators look for it (the `slipway_setting` gauge and the model's V2
metadata parameters). No MLServer here.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from engine.cpu_limits import cpu_limit
from engine.runner import SessionRunner
from engine.session import session_options, spins_within_runs
from engine.tensor_specs import DYNAMIC, TensorSpec
from slipway.runtime_settings import RuntimeSettings
from wrappers import process_state
from wrappers.defaults import measurement as load_measurement
from wrappers.defaults.choice import (
    BUSY_INTRA_OP_THREADS,
    CHOSEN,
    INTRA_OP_THREADS,
    SPIN_WITHIN_RUNS,
    Choice,
    Measurements,
    Value,
    choose,
)
from wrappers.running.planning import gpu_merge_rows
from wrappers.running.warm_up import zeros
from wrappers.running.width import WidthRunner

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Resolved:
    """The settings with every chosen value filled in, each choice, and whether the session must be rebuilt
    (the intra-op threads or spinning it was built with are not the chosen ones, or runs beside others get a second
    session of their own width: `wrappers.running.width`); where both are the chosen ones, the lone session built
    already is kept (`keeps_lone_session`: of the choices, only these two change how it is built)."""

    settings: RuntimeSettings
    choices: dict[str, Choice]
    rebuild_session: bool
    keeps_lone_session: bool = False


def explicit_values(settings: RuntimeSettings) -> dict[str, Value]:
    """The chosen-at-load settings that model-settings.json sets (null counts as unset)."""
    values = {name: getattr(settings, name) for name in CHOSEN if name in settings.model_fields_set}
    return {name: value for name, value in values.items() if value is not None}


@dataclass(frozen=True)
class TimingPlan:
    """The batch sizes to time the model at (none: not timed, `why_not`; 1 only: no merging, `why_no_merging`)."""

    batch_sizes: tuple[int, ...]
    why_not: str = ""
    why_no_merging: str = ""


def timing_plan(
    inputs: list[TensorSpec], outputs: list[TensorSpec], *, on_cpu: bool, warmup_runs: int, mlserver_batching: bool
) -> TimingPlan:
    """What can be timed at load: runs on the CPU (a GPU's choices are the GPU settings' own), with warm-up on,
    of a graph that takes one row; more rows where every input and output has a dynamic batch dimension and
    MLServer does not merge requests itself."""
    if not on_cpu:
        return TimingPlan((), why_not="the session runs on a GPU provider")
    if not warmup_runs:
        return TimingPlan((), why_not="warmup_runs is 0")
    if not all(spec.shape and spec.shape[0] in (DYNAMIC, 1) for spec in inputs):
        return TimingPlan((), why_not="the graph does not take a single row")
    if mlserver_batching:
        return TimingPlan((1,), why_no_merging="MLServer's adaptive batching merges requests (max_batch_size)")
    if not all(spec.shape and spec.shape[0] == DYNAMIC for spec in [*inputs, *outputs]):
        return TimingPlan((1,), why_no_merging="the graph's batch dimension is fixed")
    return TimingPlan(load_measurement.BATCH_SIZES)


def session_run(runner: SessionRunner | WidthRunner, inputs: list[TensorSpec], output_names: list[str]) -> Callable[[int], list]:
    """`run(rows)`: the session on `rows` rows of zeros (each size's feeds built once, outside the timing)."""
    feeds: dict[int, dict[str, np.ndarray]] = {}

    def run(rows: int) -> list:
        if rows not in feeds:
            feeds[rows] = {spec.name: zeros(spec, rows) for spec in inputs}
        return runner.run(output_names, feeds[rows])

    return run


def resolve(
    settings: RuntimeSettings,
    *,
    model: str,
    version: str | None,
    run: Callable[[int], list],
    plan: TimingPlan,
    cpu_limit: float,
    session_threads: int,
    model_mib: float = 0.0,
    on_cpu: bool = True,
    gpu_merge: tuple[int, str] | None = None,
) -> Resolved:
    """Time `run(rows)` as `plan` says (where some setting is unset), choose, log, publish.

    `session_threads`: the intra-op threads the session was built with (from `settings`, on the CPU where `on_cpu`);
    `model_mib` the model file's size (what a second session holds again). Outputs without one row per input row
    rule merging out. A run that fails while being timed leaves the settings unmeasured, with a warning:
    warm-up reports such a graph's failure in full.
    """
    explicit = explicit_values(settings)
    measured = None
    why_not, why_no_merging = plan.why_not, plan.why_no_merging
    rows_aligned = True

    def checked(rows: int) -> list:
        nonlocal rows_aligned
        outputs = run(rows)
        rows_aligned = rows_aligned and all(output.ndim and output.shape[0] == rows for output in outputs)
        return outputs

    started = time.perf_counter()
    if plan.batch_sizes and set(CHOSEN) - set(explicit):
        try:
            per_row = load_measurement.seconds_per_row(checked, plan.batch_sizes)
            measured = Measurements(per_row, load_measurement.hop_seconds(), cpu_limit)
        except Exception as err:  # ONNX Runtime raises its own types; what failed is the warm-up's to report
            why_not = f"timing a run failed: {err}"
            logger.warning("%s: could not time the model at load (%s); unset settings keep their fixed defaults", model, err)
    elif plan.batch_sizes:
        why_not = "every one is set explicitly"
    if not rows_aligned:
        why_no_merging = "the graph's outputs do not have one row per input row"
    can_merge = len(plan.batch_sizes) > 1 and rows_aligned
    choices = choose(
        measured,
        explicit,
        cpu_limit=cpu_limit,
        can_merge=can_merge,
        model_mib=model_mib,
        on_cpu=on_cpu,
        why_not_measured=why_not,
        why_no_merging=why_no_merging,
        gpu_merge=gpu_merge,
    )
    for choice in choices.values():
        logger.info("%s: %s %g (%s): %s", model, choice.setting, choice.value, choice.source, choice.reason)
    if measured is not None:
        logger.info("%s: timing the model at load took %.0f ms", model, 1000 * (time.perf_counter() - started))
    process_state.current().metrics.publish_settings(
        model, version, {name: (choice.number, choice.source) for name, choice in choices.items()}
    )
    chosen = settings.model_copy(update={name: choice.value for name, choice in choices.items()})
    same_session = choices[INTRA_OP_THREADS].value == session_threads and bool(
        choices[SPIN_WITHIN_RUNS].value
    ) == spins_within_runs(settings, session_threads, on_cpu=on_cpu)
    return Resolved(
        chosen,
        choices,
        rebuild_session=not same_session or bool(choices[BUSY_INTRA_OP_THREADS].value),
        keeps_lone_session=same_session,
    )


def metadata_parameters(choices: dict[str, Choice]) -> dict[str, str | int | bool]:
    """The choices as V2 metadata parameters: `<setting>` its value and `<setting>_source` where it came from.

    Flat scalars, as gRPC's parameter map carries only bool, int64 and string: inline_below_ms (a float) goes as text.
    """
    parameters: dict[str, str | int | bool] = {}
    for name, choice in choices.items():
        parameters[name] = choice.value if isinstance(choice.value, (int, str)) else f"{choice.value:g}"
        parameters[f"{name}_source"] = choice.source
    return parameters


def resolve_for_session(
    settings: RuntimeSettings,
    runner: SessionRunner | WidthRunner,
    inputs: list[TensorSpec],
    outputs: list[TensorSpec],
    *,
    model: str,
    version: str | None,
    mlserver_batching: bool,
    model_path: Path,
) -> Resolved:
    """`resolve` for a loading model's fresh session: timed on zeros at the sizes `timing_plan` allows."""
    on_cpu = runner.device == "cpu"
    plan = timing_plan(inputs, outputs, on_cpu=on_cpu, warmup_runs=settings.warmup_runs, mlserver_batching=mlserver_batching)
    gpu_merge = None if on_cpu or mlserver_batching else gpu_merge_rows(inputs, outputs, settings.batch_buckets)
    return resolve(
        settings,
        model=model,
        version=version,
        run=session_run(runner, inputs, [spec.name for spec in outputs]),
        plan=plan,
        cpu_limit=cpu_limit(),
        session_threads=session_options(settings).intra_op_num_threads,
        model_mib=model_path.stat().st_size / (1 << 20),
        on_cpu=on_cpu,
        gpu_merge=gpu_merge,
    )
