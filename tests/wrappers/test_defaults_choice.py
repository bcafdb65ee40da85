"""The settings chosen at load from measurements (`wrappers.defaults.choice`), and the timing that feeds them
(`wrappers.defaults.measurement`): fast, no server."""

from __future__ import annotations

import math
import time

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import REGISTRY

from engine.cpu_limits import threads_for_cpu_limit
from engine.tensor_specs import TensorSpec
from slipway.runtime_settings import RuntimeSettings, parse_runtime_settings
from tests.graphs import matmul_graph
from wrappers.defaults.choice import (
    BUSY_INTRA_OP_THREADS,
    BUSY_SESSION_MAX_MIB,
    CHOSEN,
    DEFAULT,
    EVENT_LOOP_SPIN_US,
    EXPLICIT,
    INFERENCE_THREADS,
    INLINE_BELOW_MS,
    INTRA_OP_THREADS,
    MAX_BATCH_ROWS,
    MEASURED,
    POLL_WINDOW_US,
    SPIN_WITHIN_RUNS,
    Measurements,
    choose,
)
from wrappers.defaults.measurement import hop_seconds, seconds_per_row
from wrappers.defaults.resolve import TimingPlan, metadata_parameters, resolve, session_run, timing_plan
from wrappers.operations.metrics import SETTING

cpu_limits = st.floats(min_value=0.25, max_value=64, allow_nan=False)
row_seconds = st.floats(min_value=1e-6, max_value=1.0, allow_nan=False)
hops = st.floats(min_value=1e-6, max_value=1e-3, allow_nan=False)


@st.composite
def measurements(draw, sizes=(1, 2, 4, 8)) -> Measurements:
    per_row = {rows: draw(row_seconds) for rows in sizes[: draw(st.integers(1, len(sizes)))]}
    return Measurements(per_row, draw(hops), draw(cpu_limits))


def _choose(measured: Measurements | None, explicit=None, can_merge=True, cpu_limit=None, model_mib=14.0):
    limit = cpu_limit if cpu_limit is not None else (measured.cpu_limit if measured else 2.0)
    return choose(
        measured,
        explicit or {},
        cpu_limit=limit,
        can_merge=can_merge,
        model_mib=model_mib,
        why_not_measured="warm-up is off",
        why_no_merging="fixed batch size",
    )


@settings(max_examples=200, deadline=None)
@given(measurements(), st.booleans())
def test_every_setting_is_chosen_sanely(measured, can_merge):
    chosen = _choose(measured, can_merge=can_merge)
    assert list(chosen) == list(CHOSEN)
    threads = threads_for_cpu_limit(measured.cpu_limit)
    assert 1 <= chosen[INTRA_OP_THREADS].value <= threads
    # A run beside others is narrower than a lone one, or there is one width.
    assert chosen[BUSY_INTRA_OP_THREADS].value in (0, 1)
    assert chosen[BUSY_INTRA_OP_THREADS].value < chosen[INTRA_OP_THREADS].value or not chosen[BUSY_INTRA_OP_THREADS].value
    # Never more runs side by side than the CPU limit holds at their threads each, plus one.
    per_run = chosen[BUSY_INTRA_OP_THREADS].value or chosen[INTRA_OP_THREADS].value
    assert 1 <= chosen[INFERENCE_THREADS].value <= threads // per_run + 1
    assert chosen[MAX_BATCH_ROWS].value in measured.seconds_per_row
    assert chosen[INLINE_BELOW_MS].value >= 0
    # The loop may poll only after runs it makes itself, and only with a CPU left beside it for gRPC's threads.
    inline = 1000 * measured.seconds_per_row[1] < chosen[INLINE_BELOW_MS].value
    polls = inline and measured.cpu_limit >= 2
    assert chosen[EVENT_LOOP_SPIN_US].value == (POLL_WINDOW_US if polls else 0)
    # Threads spin within runs exactly where a run has threads beside the caller's to keep awake.
    assert chosen[SPIN_WITHIN_RUNS].value == (chosen[INTRA_OP_THREADS].value > 1)
    assert all(choice.reason and choice.source in (MEASURED, DEFAULT) for choice in chosen.values())


@settings(max_examples=200, deadline=None)
@given(
    measurements(),
    st.fixed_dictionaries(
        {},
        optional={
            INTRA_OP_THREADS: st.integers(0, 8),
            INFERENCE_THREADS: st.integers(1, 8),
            MAX_BATCH_ROWS: st.integers(1, 64),
            INLINE_BELOW_MS: st.floats(0, 5),
            BUSY_INTRA_OP_THREADS: st.integers(0, 4),
            EVENT_LOOP_SPIN_US: st.integers(0, 100_000),
            SPIN_WITHIN_RUNS: st.booleans(),
        },
    ),
    st.booleans(),
)
def test_an_explicit_setting_always_wins(measured, explicit, can_merge):
    chosen = _choose(measured, explicit, can_merge=can_merge)
    for name, value in explicit.items():
        assert (chosen[name].value, chosen[name].source) == (value, EXPLICIT)
    threads = threads_for_cpu_limit(measured.cpu_limit)
    per_run = chosen[BUSY_INTRA_OP_THREADS].value or chosen[INTRA_OP_THREADS].value or threads  # 0: ORT's own count
    if INFERENCE_THREADS not in explicit:
        assert chosen[INFERENCE_THREADS].value <= max(1, threads // per_run) + 1
    assert all(chosen[name].source != EXPLICIT for name in set(CHOSEN) - set(explicit))


@settings(max_examples=200, deadline=None)
@given(measurements(), st.lists(st.floats(1.0, 3.0), min_size=3, max_size=3))
def test_a_model_whose_time_per_row_does_not_fall_never_merges(measured, growth):
    alone = measured.seconds_per_row[1]
    per_row = {1: alone, 2: alone * growth[0], 4: alone * growth[0] * growth[1], 8: alone * math.prod(growth)}
    chosen = _choose(Measurements(per_row, measured.hop_seconds, measured.cpu_limit))
    assert (chosen[MAX_BATCH_ROWS].value, chosen[MAX_BATCH_ROWS].source) == (1, MEASURED)


@settings(max_examples=100, deadline=None)
@given(measurements(), st.floats(0.01, 100))
def test_the_merge_choice_depends_on_ratios_not_on_the_machine_speed(measured, speed):
    faster = {rows: seconds * speed for rows, seconds in measured.seconds_per_row.items()}
    scaled = Measurements(faster, measured.hop_seconds, measured.cpu_limit)
    assert _choose(scaled)[MAX_BATCH_ROWS].value == _choose(measured)[MAX_BATCH_ROWS].value


@settings(max_examples=100, deadline=None)
@given(measurements(), st.floats(1.0, 64))
def test_more_cpus_never_mean_fewer_threads(measured, more):
    fewer = _choose(measured, cpu_limit=measured.cpu_limit)
    bigger = _choose(measured, cpu_limit=measured.cpu_limit + more)
    assert bigger[INTRA_OP_THREADS].value >= fewer[INTRA_OP_THREADS].value
    assert (
        bigger[INTRA_OP_THREADS].value * bigger[INFERENCE_THREADS].value
        >= fewer[INTRA_OP_THREADS].value * fewer[INFERENCE_THREADS].value
    )


def test_a_tiny_model_runs_inline_on_one_thread_and_a_large_one_on_every_core():
    tiny = _choose(Measurements({1: 50e-6, 2: 35e-6, 4: 30e-6, 8: 29e-6}, 30e-6, 2.0))
    assert tiny[INLINE_BELOW_MS].value > 0.05 and tiny[INTRA_OP_THREADS].value == 1
    assert tiny[INFERENCE_THREADS].value == 3  # 2 single-threaded runs fit, and one more
    assert tiny[EVENT_LOOP_SPIN_US].value == POLL_WINDOW_US and "polls up to" in tiny[EVENT_LOOP_SPIN_US].reason
    large = _choose(Measurements({1: 10e-3, 2: 8e-3, 4: 7.4e-3, 8: 7.2e-3}, 30e-6, 2.0))
    assert large[INLINE_BELOW_MS].value == 0 and large[INTRA_OP_THREADS].value == 2
    # a lone run on both cores; under load single-threaded runs beside each other: 2 fit, and one more
    assert large[BUSY_INTRA_OP_THREADS].value == 1 and large[INFERENCE_THREADS].value == 3
    assert large[MAX_BATCH_ROWS].value == 4  # 1.35x of the best 1.39x: within 5% of it, at half the rows
    assert large[EVENT_LOOP_SPIN_US].value == 0 and "inference threads" in large[EVENT_LOOP_SPIN_US].reason
    assert "7.400" in large[MAX_BATCH_ROWS].reason  # the reason carries the measured numbers


def test_runs_beside_others_stay_on_one_session_where_a_second_would_not_pay_or_not_fit():
    large = Measurements({1: 10e-3, 2: 8e-3}, 30e-6, 2.0)
    cases = {
        "inference_threads 1: runs never overlap": _choose(large, {INFERENCE_THREADS: 1}),
        "each run has 1 intra-op thread(s) already": _choose(large, {INTRA_OP_THREADS: 1}),
        f"over {BUSY_SESSION_MAX_MIB} MiB": _choose(large, model_mib=BUSY_SESSION_MAX_MIB + 1),
        "each run has 1 intra-op thread(s) already ": _choose(Measurements({1: 50e-6}, 30e-6, 2.0)),  # inline
    }
    for reason, chosen in cases.items():
        assert chosen[BUSY_INTRA_OP_THREADS].value == 0 and reason.strip() in chosen[BUSY_INTRA_OP_THREADS].reason
    wide_only = cases[f"over {BUSY_SESSION_MAX_MIB} MiB"]
    assert (wide_only[INTRA_OP_THREADS].value, wide_only[INFERENCE_THREADS].value) == (2, 1)  # as before this choice
    one_core = _choose(Measurements({1: 10e-3, 2: 8e-3}, 30e-6, 1.0))
    assert one_core[BUSY_INTRA_OP_THREADS].value == 0 and one_core[INFERENCE_THREADS].value == 1


def test_threads_spin_within_runs_on_the_cpu_only_where_a_run_has_several():
    large = Measurements({1: 10e-3, 2: 8e-3}, 30e-6, 2.0)
    wide = _choose(large)[SPIN_WITHIN_RUNS]
    assert (wide.value, wide.source) == (1, MEASURED) and "spreads over 2 intra-op threads" in wide.reason
    assert _choose(large, {INTRA_OP_THREADS: 1})[SPIN_WITHIN_RUNS].value == 0
    assert _choose(Measurements({1: 50e-6}, 30e-6, 2.0))[SPIN_WITHIN_RUNS].value == 0  # inline: one thread
    on_gpu = choose(None, {}, cpu_limit=8.0, can_merge=False, on_cpu=False)[SPIN_WITHIN_RUNS]
    assert (on_gpu.value, on_gpu.source) == (0, DEFAULT) and "GPU" in on_gpu.reason


def test_the_spinning_chosen_is_what_a_session_built_with_it_unset_does():
    """A session built before the choice keeps its lone session only where the two agree (wrappers.defaults.resolve)."""
    from engine.session import spins_within_runs

    for limit in (1.0, 2.0, 8.0):
        for explicit in ({}, {INTRA_OP_THREADS: 1}, {INTRA_OP_THREADS: 3}):
            for on_cpu in (True, False):
                chosen = choose(Measurements({1: 10e-3}, 30e-6, limit), explicit, cpu_limit=limit, can_merge=False, on_cpu=on_cpu)
                threads = int(chosen[INTRA_OP_THREADS].value)
                assert bool(chosen[SPIN_WITHIN_RUNS].value) == spins_within_runs(RuntimeSettings(), threads, on_cpu=on_cpu)
    assert not spins_within_runs(RuntimeSettings(allow_spinning=True), 2, on_cpu=True)  # spins between runs too
    assert not spins_within_runs(RuntimeSettings(spin_within_runs=False), 2, on_cpu=True)


def test_a_tiny_model_on_one_cpu_never_polls():
    chosen = _choose(Measurements({1: 50e-6}, 30e-6, 1.5))[EVENT_LOOP_SPIN_US]
    assert (chosen.value, chosen.source) == (0, MEASURED) and "no CPU beside the event loop's" in chosen.reason


def test_explicit_single_threaded_runs_get_one_slot_more_than_the_cores():
    chosen = _choose(Measurements({1: 10e-3, 2: 8e-3}, 30e-6, 2.0), {INTRA_OP_THREADS: 1})
    assert chosen[INFERENCE_THREADS].value == 3 and chosen[INFERENCE_THREADS].source == MEASURED


def test_unmeasured_or_unmergeable_models_keep_the_fixed_defaults():
    chosen = _choose(None)
    assert {name: choice.value for name, choice in chosen.items()} == {
        INLINE_BELOW_MS: 0.5,
        INTRA_OP_THREADS: 2,
        SPIN_WITHIN_RUNS: 1,
        BUSY_INTRA_OP_THREADS: 0,
        INFERENCE_THREADS: 1,
        MAX_BATCH_ROWS: 1,
        EVENT_LOOP_SPIN_US: 0,
    }
    assert {choice.source for choice in chosen.values()} == {DEFAULT}
    assert "warm-up is off" in chosen[MAX_BATCH_ROWS].reason
    fixed = _choose(Measurements({1: 10e-3, 8: 5e-3}, 30e-6, 2.0), can_merge=False)[MAX_BATCH_ROWS]
    assert (fixed.value, fixed.source) == (1, DEFAULT) and "fixed batch size" in fixed.reason


def test_timing_stops_at_the_budget_and_takes_the_fastest_run():
    calls: list[int] = []

    def run(rows: int) -> None:
        calls.append(rows)
        time.sleep(0.01 * rows)

    timed = seconds_per_row(run, (1, 2, 4, 8), runs=2, budget_s=0.3)
    assert list(timed) == [1, 2, 4]  # 8 rows would take the whole past the budget: neither timed nor run
    assert 8 not in calls and calls.count(1) == 4 and calls.count(4) == 3  # one untimed, a probe, two rounds
    assert calls[-3:] == [1, 2, 4]  # the sizes take turns
    assert all(0.009 <= seconds < 0.05 for seconds in timed.values())


def test_the_hop_to_a_thread_is_timed():
    assert 0 < hop_seconds(round_trips=20) < 0.1


def _tiny_session(tmp_path, batch="batch"):
    from engine.runner import SessionRunner
    from engine.session import create_session
    from engine.tensor_specs import describe

    session = create_session(matmul_graph(tmp_path / "matmul.onnx", batch=batch), RuntimeSettings())
    inputs, outputs = describe(session)
    return SessionRunner(session), inputs, outputs


def test_a_real_session_is_timed_and_the_choice_published_with_explicit_settings_winning(tmp_path):
    runner, inputs, outputs = _tiny_session(tmp_path)
    plan = timing_plan(inputs, outputs, on_cpu=True, warmup_runs=2, mlserver_batching=False)
    assert plan.batch_sizes == (1, 2, 4, 8)
    settings = parse_runtime_settings({"max_batch_rows": 4})
    resolved = resolve(
        settings, model="tiny", version="7", run=session_run(runner, inputs, ["y"]), plan=plan, cpu_limit=2.0, session_threads=2
    )
    choices = resolved.choices
    assert (choices[MAX_BATCH_ROWS].value, choices[MAX_BATCH_ROWS].source) == (4, EXPLICIT)
    assert choices[INLINE_BELOW_MS].value > 0 and choices[INTRA_OP_THREADS].value == 1  # a MatMul of 4x3: inline
    assert resolved.rebuild_session and resolved.settings.intra_op_threads == 1
    assert not resolved.keeps_lone_session  # built with 2 threads, chosen 1: the lone session is built again
    assert resolved.settings.inference_threads == choices[INFERENCE_THREADS].value == 3
    labels = {"model_name": "tiny", "model_version": "7", "setting": MAX_BATCH_ROWS}
    assert REGISTRY.get_sample_value(SETTING, {**labels, "source": EXPLICIT}) == 4
    assert REGISTRY.get_sample_value(SETTING, {**labels, "setting": INTRA_OP_THREADS, "source": MEASURED}) == 1
    parameters = metadata_parameters(choices)
    assert parameters[MAX_BATCH_ROWS] == 4 and parameters[f"{MAX_BATCH_ROWS}_source"] == EXPLICIT
    assert isinstance(parameters[INLINE_BELOW_MS], str) and float(parameters[INLINE_BELOW_MS]) > 0
    # Loaded again with every setting unset: the explicit series is dropped, not left beside the measured one.
    resolve(
        RuntimeSettings(),
        model="tiny",
        version="7",
        run=session_run(runner, inputs, ["y"]),
        plan=plan,
        cpu_limit=2.0,
        session_threads=1,
    )
    assert REGISTRY.get_sample_value(SETTING, {**labels, "source": EXPLICIT}) is None
    assert REGISTRY.get_sample_value(SETTING, {**labels, "source": MEASURED}) is not None


def test_a_second_session_of_the_busy_width_keeps_the_lone_one_built_already():
    def slow(rows: int) -> list:  # 20 ms a row: runs go to threads, 2 threads each alone, 1 beside others
        time.sleep(0.02 * rows)  # (2 ms went inline in a CI run whose hop to a thread took over 125 us: 16 hops)
        return [np.zeros((rows, 1), np.float32)]

    resolved = resolve(
        RuntimeSettings(), model="slow", version=None, run=slow, plan=TimingPlan((1, 2)), cpu_limit=2.0, session_threads=2
    )
    assert (resolved.settings.intra_op_threads, resolved.settings.busy_intra_op_threads) == (2, 1)
    assert resolved.rebuild_session and resolved.keeps_lone_session


def test_what_cannot_be_timed_or_merged_is_said():
    row = [TensorSpec("x", "FP32", (-1, 4))]
    fixed = [TensorSpec("x", "FP32", (2, 4))]
    assert timing_plan(row, row, on_cpu=False, warmup_runs=2, mlserver_batching=False).why_not.endswith("GPU provider")
    assert timing_plan(row, row, on_cpu=True, warmup_runs=0, mlserver_batching=False).batch_sizes == ()
    assert timing_plan(fixed, fixed, on_cpu=True, warmup_runs=2, mlserver_batching=False).batch_sizes == ()
    merged_by_mlserver = timing_plan(row, row, on_cpu=True, warmup_runs=2, mlserver_batching=True)
    assert merged_by_mlserver.batch_sizes == (1,) and "adaptive batching" in merged_by_mlserver.why_no_merging
    one_row = [TensorSpec("x", "FP32", (1, 4))]
    assert timing_plan(one_row, one_row, on_cpu=True, warmup_runs=2, mlserver_batching=False).batch_sizes == (1,)


def test_outputs_without_a_row_per_input_row_rule_merging_out(tmp_path):
    runner, inputs, _ = _tiny_session(tmp_path)

    def summed(rows: int) -> list:  # the session's rows summed into one: a graph whose outputs do not split back
        return [runner.run(["y"], {"x": np.zeros((rows, 4), np.float32)})[0].sum(axis=0, keepdims=True)]

    plan = TimingPlan((1, 2, 4, 8))
    chosen = resolve(
        RuntimeSettings(), model="summed", version=None, run=summed, plan=plan, cpu_limit=2.0, session_threads=1
    ).choices[MAX_BATCH_ROWS]
    assert chosen.value == 1 and "one row per input row" in chosen.reason
