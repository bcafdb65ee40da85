"""The serving rules that need no server, checked as properties (hypothesis) against plain Python and NumPy.

Run planning (padding buckets, chunks, warm-up shapes, inline runs), a request's name/datatype/shape/row checks,
response data read back by the request decoders, JSON bodies, compressed bodies, and raw gRPC contents rules.
None of these modules imports MLServer, so they run in the test process; the server tests check the wiring.
"""

from __future__ import annotations

import gzip
import json
import math
import zlib

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from engine.tensor_specs import DYNAMIC, TensorSpec
from slipway.runtime_settings import RuntimeSettings
from slipway.v2_wire import BYTES, REGION, V2_TO_NUMPY, TensorError, from_raw, to_raw
from wrappers.limits import body_budget
from wrappers.model.interface import advertised, batchable, pick
from wrappers.model.processing import LABELS_OUTPUT, SCORES_OUTPUT, ProcessingConfigError
from wrappers.protocol import request_rules
from wrappers.protocol.json_parsing import loads, parse
from wrappers.protocol.tensors import from_json, response_data
from wrappers.running import planning as run_planning
from wrappers.transport import body_rules, grpc_rules

FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
buckets_st = st.lists(st.integers(1, 64), min_size=1, max_size=6, unique=True).map(sorted)
dims = st.one_of(st.just(DYNAMIC), st.integers(0, 5))


# -- run planning -------------------------------------------------------------------------------


@FAST
@given(st.integers(0, 300), buckets_st)
def test_chunks_cover_every_row_once_each_in_the_smallest_bucket_that_holds_it(rows, buckets):
    chunks = run_planning.bucket_chunks(rows, buckets)
    assert sum(count for _, count, _ in chunks) == rows
    assert [start for start, _, _ in chunks] == list(range(0, max(rows, 1), buckets[-1]))
    for _, count, size in chunks:
        assert size in buckets and count <= size
        assert size == min(bucket for bucket in buckets if bucket >= count)
        assert count <= buckets[-1]


@FAST
@given(st.integers(1, 5000))
def test_gpu_buckets_are_powers_of_two_up_to_the_largest_and_the_largest(max_batch_rows):
    buckets = run_planning.gpu_buckets(max_batch_rows)
    largest = max(max_batch_rows, run_planning.GPU_LARGEST_BUCKET)
    assert buckets == sorted(set(buckets)) and buckets[0] == 1 and buckets[-1] == largest
    assert all(bucket & (bucket - 1) == 0 for bucket in buckets[:-1])
    assert len(buckets) - 1 <= largest.bit_length()


@FAST
@given(
    st.one_of(st.none(), st.lists(st.integers(1, 64), max_size=5)),
    st.booleans(),
    st.booleans(),
    st.integers(1, 64),
    st.lists(st.lists(dims, min_size=1, max_size=3), min_size=1, max_size=3),
    st.sampled_from([None, True, False]),
)
def test_padding_buckets_are_sorted_unique_and_refused_only_with_a_setting_named(
    configured, on_cpu, fixed_outputs, max_rows, shapes, per_bucket
):
    plan = dict(
        fixed_rows=None,
        input_shapes=shapes,
        configured=configured,
        on_cpu=on_cpu,
        max_batch_rows=max_rows,
        fixed_outputs=fixed_outputs,
        session_per_bucket=per_bucket,
    )
    try:
        buckets = run_planning.padding_buckets(**plan)
    except run_planning.BatchingConfigError as err:
        assert "batch_buckets" in str(err)
        return
    assert buckets == sorted(set(buckets))
    dynamic = all(shape[0] == DYNAMIC for shape in shapes)
    if not dynamic or (configured is None and on_cpu):
        assert buckets == []
    elif configured is not None:
        assert buckets == sorted(set(configured))
    sessions_per_bucket = per_bucket if per_bucket is not None else not on_cpu
    # a replayed CUDA graph: one shape per session, so one bucket unless each bucket has a session of its own
    assert not (fixed_outputs and dynamic) or len(buckets) == 1 or (sessions_per_bucket and len(buckets) > 1)


def test_a_fixed_batch_size_is_the_one_bucket_and_a_fixed_graph_takes_no_configured_ones():
    plan = dict(input_shapes=[(8, 3)], on_cpu=True, max_batch_rows=1, fixed_outputs=False, session_per_bucket=None)
    assert run_planning.padding_buckets(fixed_rows=8, configured=[1, 2], **plan) == [8]
    with pytest.raises(run_planning.BatchingConfigError, match="remove batch_buckets"):
        run_planning.padding_buckets(fixed_rows=None, configured=[1, 2], **plan)


def test_a_run_plan_pads_only_merged_runs_and_profiles_tensorrt_only_where_it_runs_padded():
    """The runtime and the session host plan alike: fixed rows only where requests merge, and the same settings
    object back (no session to rebuild) unless TensorRT runs padded."""
    inputs, outputs = [TensorSpec("x", "FP32", (DYNAMIC, 4))], [TensorSpec("y", "FP32", (DYNAMIC, 2))]
    config = RuntimeSettings(max_batch_rows=8, batch_buckets=[2, 8])
    plan = dict(on_cpu=False, fixed_outputs=False, model="m")
    cpu = run_planning.plan_runs(config, inputs, outputs, merging=True, providers=["CPUExecutionProvider"], **plan)
    assert (cpu.fixed_rows, cpu.buckets) == (None, [2, 8]) and cpu.settings is config
    trt = run_planning.plan_runs(config, inputs, outputs, merging=True, providers=["TensorrtExecutionProvider"], **plan)
    assert trt.buckets == [2, 8] and trt.settings is not config
    assert any(key.startswith("trt_profile_") for key in trt.settings.tensorrt.extra_options)
    fixed = [TensorSpec("x", "FP32", (4, 4))], [TensorSpec("y", "FP32", (4, 2))]
    assert run_planning.plan_runs(RuntimeSettings(), *fixed, merging=True, providers=[], **plan).fixed_rows == 4
    assert run_planning.plan_runs(RuntimeSettings(), *fixed, merging=False, providers=[], **plan).fixed_rows is None


@FAST
@given(st.lists(dims, min_size=1, max_size=4), st.integers(1, 64))
def test_a_warm_up_shape_has_the_rows_first_and_no_dynamic_dimension(shape, rows):
    planned = run_planning.warm_up_shape(shape, rows)
    assert planned[0] == rows and len(planned) == len(shape) and DYNAMIC not in planned
    assert all(p == d for p, d in zip(planned[1:], shape[1:]) if d != DYNAMIC)


@FAST
@given(st.floats(1e-7, 1e-1), st.integers(1, 512), st.integers(1, 512), st.floats(0.0, 50.0))
def test_inline_runs_are_cpu_runs_under_the_threshold_and_fewer_rows_stay_inline(per_row, rows, more, below_ms):
    inline = run_planning.runs_inline(per_row, True, rows, below_ms)
    assert inline == (1000 * per_row * rows < below_ms)
    if run_planning.runs_inline(per_row, True, rows + more, below_ms):
        assert inline
    assert not run_planning.runs_inline(per_row, False, rows, below_ms)
    assert not run_planning.runs_inline(None, True, rows, below_ms)


@FAST
@given(buckets_st, st.lists(st.integers(1, 8), min_size=1, max_size=3), st.integers(0, 3))
def test_warm_up_meets_the_buckets_where_runs_are_padded_and_nothing_without_runs(buckets, configured, runs):
    assert run_planning.warm_up_sizes(buckets, configured, runs) == (buckets if runs else [])
    assert run_planning.warm_up_sizes([], configured, runs) == (configured if runs else [])


def test_tensorrt_gets_a_profile_only_where_it_runs_on_padded_sizes_and_the_settings_name_none():
    inputs = [TensorSpec("x", "FP32", (DYNAMIC, 3))]
    trt = ["TensorrtExecutionProvider", "CUDAExecutionProvider"]
    config = RuntimeSettings()
    profiled = run_planning.with_tensorrt_profile(config, inputs, [1, 2, 8], trt, "m")
    assert profiled.tensorrt.extra_options["trt_profile_max_shapes"] == "x:8x3"
    assert run_planning.with_tensorrt_profile(config, inputs, [], trt, "m") is config
    assert run_planning.with_tensorrt_profile(config, inputs, [8], ["CPUExecutionProvider"], "m") is config
    assert run_planning.with_tensorrt_profile(profiled, inputs, [1, 2, 8], trt, "m") is profiled  # already has one


# -- a request's checks ------------------------------------------------------------------------


@FAST
@given(
    st.lists(dims, max_size=4),
    st.lists(st.integers(0, 6), max_size=4),
    st.integers(1, 10),
    st.sampled_from(["FP32", "INT64", "BYTES"]),
    st.sampled_from(["FP32", "INT64", "BYTES"]),
)
def test_the_header_check_accepts_exactly_the_advertised_datatype_shape_and_rows(spec_shape, shape, limit, want, sent):
    spec = TensorSpec("x", want, tuple(spec_shape))
    fits = len(shape) == len(spec_shape) and all(d in (DYNAMIC, s) for d, s in zip(spec_shape, shape))
    rows_ok = not shape or 0 < shape[0] <= limit
    try:
        request_rules.check_header(spec, sent, tuple(shape), limit)
    except request_rules.RequestError as err:
        assert not (sent == want and fits and rows_ok)
        assert "'x'" in str(err) and "\n" not in str(err)
    else:
        assert sent == want and fits and rows_ok


@FAST
@given(st.lists(st.integers(0, 5), max_size=4), st.integers(0, 200))
def test_data_fills_its_shape_exactly_when_numpy_can_reshape_it(shape, size):
    try:
        np.empty(size).reshape(shape)
        reshapes = True
    except ValueError:
        reshapes = False
    try:
        request_rules.check_filled(size, tuple(shape), "x")
        filled = True
    except TensorError:
        filled = False
    assert filled == reshapes == (size == math.prod(shape))


@FAST
@given(st.dictionaries(st.sampled_from("abcd"), hnp.array_shapes(min_dims=0, max_dims=3, max_side=4), min_size=1))
def test_rows_are_the_first_dimension_all_inputs_share(shapes):
    arrays = {name: np.zeros(shape) for name, shape in shapes.items()}
    counts = {name: (shape[0] if shape else 1) for name, shape in shapes.items()}
    if len(set(counts.values())) == 1:
        assert request_rules.rows(arrays) == next(iter(counts.values()))
    else:
        with pytest.raises(request_rules.RequestError, match="same number of rows"):
            request_rules.rows(arrays)


@FAST
@given(st.lists(st.sampled_from("abcd"), max_size=5), st.sets(st.sampled_from("abc"), min_size=1))
def test_inputs_are_accepted_when_each_is_sent_exactly_once(names, expected):
    exact = sorted(names) == sorted(expected)
    try:
        request_rules.check_input_names("m", names, expected)
    except request_rules.RequestError as err:
        assert not exact and f"takes inputs {sorted(expected)}" in str(err)
    else:
        assert exact


@FAST
@given(st.lists(st.sampled_from("abcz"), max_size=4), st.lists(st.sampled_from("abc"), min_size=1, unique=True))
def test_outputs_asked_for_are_known_ones_and_none_asked_means_all(wanted, names):
    if set(wanted) <= set(names):
        assert request_rules.requested_outputs("m", wanted, names) == (wanted or names)
    else:
        with pytest.raises(request_rules.RequestError, match="unknown outputs requested"):
            request_rules.requested_outputs("m", wanted, names)


@FAST
@given(hnp.arrays(np.float32, hnp.array_shapes(max_dims=2, max_side=5)))
def test_non_finite_values_are_refused_exactly_where_numpy_finds_them(array):
    try:
        request_rules.check_finite(array.ravel(), "x")
        finite = True
    except request_rules.RequestError:
        finite = False
    assert finite == bool(np.isfinite(array).all())


@FAST
@given(st.lists(st.one_of(st.text(max_size=8), st.binary(max_size=8)), max_size=6))
def test_bytes_become_text_exactly_when_they_are_utf8(items):
    flat = np.array(items + [""], dtype=object)[:-1] if items else np.empty(0, dtype=object)
    try:
        text = request_rules.as_text(flat, "x")
    except request_rules.RequestError as err:
        assert "not UTF-8" in str(err)
        assert any(isinstance(item, bytes) and not _utf8(item) for item in items)
    else:
        assert list(text) == [item.decode() if isinstance(item, bytes) else item for item in items]


def _utf8(item: bytes) -> bool:
    try:
        item.decode()
    except UnicodeDecodeError:
        return False
    return True


# -- responses read back -----------------------------------------------------------------------

NUMERIC = sorted(name for name in V2_TO_NUMPY if name not in (BYTES, "FP16"))


@FAST
@given(
    st.sampled_from(NUMERIC).flatmap(
        lambda name: st.tuples(st.just(name), hnp.arrays(V2_TO_NUMPY[name], hnp.array_shapes(max_dims=3, max_side=4)))
    )
)
def test_response_data_reads_back_as_the_same_array_as_json_and_as_raw(case):
    datatype, array = case
    as_json = response_data(array, datatype, as_array=False)
    assert isinstance(as_json, list)
    back = from_json(json.loads(json.dumps(as_json, allow_nan=True)), datatype, list(array.shape), "y")
    np.testing.assert_array_equal(back.reshape(array.shape), array)
    raw = to_raw(response_data(array, datatype, as_array=True), datatype)
    np.testing.assert_array_equal(from_raw(raw, datatype, list(array.shape), "y").reshape(array.shape), array)


@FAST
@given(st.lists(st.text(max_size=6), min_size=1, max_size=6))
def test_text_outputs_go_back_as_str_in_json_and_as_bytes_raw(items):
    array = np.array(items, dtype=object)
    assert response_data(array, BYTES, as_array=False) == items
    raw = to_raw(np.array(response_data(array, BYTES, as_array=True), dtype=object), BYTES)
    assert list(from_raw(raw, BYTES, [len(items)], "y")) == [item.encode() for item in items]


# -- the interface clients see ------------------------------------------------------------------


@FAST
@given(
    st.lists(st.text("abcxyz", min_size=1, max_size=3), min_size=1, max_size=4, unique=True),
    st.one_of(st.none(), st.integers(1, 16)),
    st.booleans(),
    st.one_of(st.none(), st.integers(1, 5)),
)
def test_advertised_tensors_replace_what_the_stages_take_the_place_of(names, fixed_rows, image, top_k):
    inputs = [TensorSpec(name, "FP32", (fixed_rows or DYNAMIC, 3)) for name in names]
    outputs = [TensorSpec(name + "_out", "FP32", (fixed_rows or DYNAMIC, 10)) for name in names]
    image_input = names[0] if image else None
    scores = outputs[0].name if top_k else None
    ins, outs = advertised(inputs, outputs, fixed_rows, image_input, scores, top_k)
    assert [spec.name for spec in ins] == ([image_input] if image else []) + [n for n in names if n != image_input]
    assert all(spec.shape[0] == DYNAMIC for spec in ins + outs)
    assert (LABELS_OUTPUT in [s.name for s in outs]) == (SCORES_OUTPUT in [s.name for s in outs]) == bool(top_k)
    assert scores not in [s.name for s in outs] or not top_k
    assert batchable(inputs[0], None) is inputs[0]


def test_a_stage_names_its_tensor_or_the_graph_has_just_one():
    specs = [TensorSpec("a", "FP32", (DYNAMIC,)), TensorSpec("b", "FP32", (DYNAMIC,))]
    assert pick(specs[:1], None, "preprocess.input", "input") is specs[0]
    assert pick(specs, "b", "preprocess.input", "input") is specs[1]
    with pytest.raises(ProcessingConfigError, match=r"the graph has 2 inputs \['a', 'b'\]: set preprocess.input"):
        pick(specs, None, "preprocess.input", "input")
    with pytest.raises(ProcessingConfigError, match="'c' is not a graph input"):
        pick(specs, "c", "preprocess.input", "input")


# -- bodies -------------------------------------------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=5), children, max_size=4),
    max_leaves=20,
)


@FAST
@given(json_values)
def test_a_json_body_parses_to_what_json_dumps_wrote(value):
    assert loads(json.dumps(value).encode()) == value


@FAST
@given(st.binary(max_size=40))
def test_a_body_parses_as_json_loads_does_or_fails_as_malformed_json(body):
    try:
        expected = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        expected = ValueError
    if expected is ValueError:
        with pytest.raises(json.JSONDecodeError):
            loads(body)
    else:
        assert loads(body) == expected


@FAST
@given(st.lists(st.tuples(st.text("xyz", min_size=1, max_size=3), st.booleans(), st.booleans()), max_size=4))
def test_only_inputs_in_shared_memory_without_data_are_given_empty_data(tensors):
    inputs = []
    for name, in_region, has_data in tensors:
        tensor = {"name": name, "parameters": {REGION: "r"} if in_region else {}}
        if has_data:
            tensor["data"] = [1]
        inputs.append(tensor)
    parsed = parse(json.dumps({"inputs": inputs}).encode())
    for (_, in_region, has_data), tensor in zip(tensors, parsed["inputs"]):
        assert ("data" in tensor) == (has_data or in_region)
        assert tensor.get("data") == ([1] if has_data else [] if in_region else None)


LIMIT = 64 << 20  # a body limit for the rules below (the server sizes its own: body_budget)


@FAST
@given(st.binary(max_size=3000), st.integers(1, 3), st.sampled_from(["gzip", "deflate"]))
def test_a_compressed_body_inflates_to_what_was_compressed_within_the_limit(data, members, encoding):
    if encoding == "gzip":
        body = b"".join(gzip.compress(data) for _ in range(members))
        whole = data * members
    else:
        body, whole = zlib.compress(data), data
    window = body_rules.zlib_window(encoding)
    assert bytes(body_rules.inflate(body, encoding, window, LIMIT)) == whole
    if whole:
        with pytest.raises(body_rules.BodyError, match=f"the {encoding} body inflates past {len(whole) - 1} bytes"):
            body_rules.inflate(body, encoding, window, limit=len(whole) - 1)
        with pytest.raises(body_rules.BodyError, match="truncated|not valid"):
            body_rules.inflate(body[:-1], encoding, window, LIMIT)


def test_a_body_over_the_limit_is_refused_by_its_length_and_unknown_encodings_by_name():
    body_rules.check_declared_length({"content-length": str(LIMIT)}, LIMIT)
    with pytest.raises(body_rules.BodyTooLarge, match=f"the body is over {LIMIT} bytes") as refused:
        body_rules.check_declared_length({"content-length": str(LIMIT + 1)}, LIMIT)
    assert "raise the server's SLIPWAY_MAX_BODY_BYTES" in str(refused.value)  # the setting, where the server is ours
    with pytest.raises(body_rules.BodyError, match="'br' is not supported; send gzip, deflate or none"):
        body_rules.zlib_window("br")
    scope = {"headers": [(b"content-encoding", b"gzip"), (b"content-length", b"9"), (b"x", b"1")]}
    assert body_rules.headers_of(body_rules.uncompressed(scope, 20)) == {"x": "1", "content-length": "20"}


MIB = body_budget.MIB


@pytest.mark.parametrize(
    ("memory_limit", "resident", "configured", "admitted"),
    [
        (None, 300 * MIB, None, body_budget.DEFAULT_BODY_BYTES),  # no limit to size by
        (2048 * MIB, 300 * MIB, None, 109 * MIB),  # a 2 GiB pod: (2048 - 300) / 16 MiB
        (64 << 30, 300 * MIB, None, body_budget.DEFAULT_BODY_BYTES),  # a large node: never more than the default
        (512 * MIB, 500 * MIB, None, body_budget.MIN_BODY_BYTES),  # nothing left: the floor, not zero
        (2048 * MIB, 300 * MIB, "1000", 1000),  # set outright wins
        (None, 0, " 5242880 ", 5 * MIB),
    ],
)
def test_the_body_limit_follows_the_memory_left_at_the_measured_amplification(memory_limit, resident, configured, admitted):
    assert body_budget.admitted_bytes(memory_limit, resident, configured) == admitted


@pytest.mark.parametrize("configured", ["64M", "-1", "0", "1e6", "lots"])
def test_a_body_limit_that_is_not_a_number_of_bytes_is_refused_naming_the_variable(configured):
    with pytest.raises(body_budget.BodyBudgetError, match=rf"SLIPWAY_MAX_BODY_BYTES='{configured}' is not a number of bytes"):
        body_budget.admitted_bytes(2048 * MIB, 0, configured)


@pytest.mark.parametrize(
    ("cgroup", "files", "limit"),
    [
        ("0::/kubepods/pod1/c1\n", {"kubepods/pod1/c1/memory.max": "2147483648\n"}, 2 << 30),  # v2
        ("0::/\n", {"memory.max": "max\n"}, None),  # v2, no limit
        ("9:memory:/slipway\n1:cpu:/\n", {"memory/slipway/memory.limit_in_bytes": "1073741824\n"}, 1 << 30),  # v1
        ("9:memory:/\n", {"memory/memory.limit_in_bytes": "9223372036854771712\n"}, None),  # v1, no limit
        ("0::/a\n", {"unified/a/memory.max": "4096\n"}, 4096),  # hybrid: v2 under unified/
        ("0::/gone\n", {}, None),  # unreadable: none
    ],
)
def test_the_memory_limit_is_read_from_this_process_own_cgroup(tmp_path, cgroup, files, limit):
    (tmp_path / "cgroup").write_text(cgroup)
    for relative, text in files.items():
        path = tmp_path / "fs" / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    assert body_budget.memory_limit(tmp_path / "cgroup", tmp_path / "fs") == limit


# -- raw gRPC contents --------------------------------------------------------------------------

FIELDS = sorted({field for field in grpc_rules.TYPED_FIELDS.values() if field})


@FAST
@given(
    st.sampled_from(sorted(grpc_rules.TYPED_FIELDS) + ["NOPE"]),
    st.lists(st.sampled_from(FIELDS), max_size=2, unique=True),
    st.booleans(),
)
def test_typed_contents_pass_only_in_their_datatypes_field_and_never_beside_raw(datatype, sent, raw):
    problem = grpc_rules.typed_contents_problem("x", datatype, sent, raw=raw)
    expected = grpc_rules.TYPED_FIELDS.get(datatype, "")
    ok = not raw and (expected == "" or sent in ([], [expected]))
    assert (problem is None) == ok
    if problem:
        assert problem.startswith("input 'x'") and "send" in problem


@FAST
@given(st.integers(0, 4), st.lists(st.text("ab", min_size=1, max_size=2), max_size=4))
def test_one_raw_buffer_per_input_without_contents(buffers, names):
    problem = grpc_rules.raw_buffers_problem(buffers, names)
    assert (problem is None) == (buffers == len(names))


@FAST
@given(st.sampled_from(sorted(grpc_rules.TYPED_FIELDS)), st.lists(st.integers(-1, 3), max_size=3), st.booleans(), st.booleans())
def test_an_input_without_data_is_named_with_where_its_data_goes(datatype, shape, has_contents, in_region):
    problem = grpc_rules.missing_data_problem("x", datatype, shape, has_contents=has_contents, in_shared_memory=in_region)
    carries_nothing = not has_contents and not in_region and min(shape, default=1) >= 0 and math.prod(shape) > 0
    assert (problem is not None) == carries_nothing
    if problem:
        assert ("raw_input_contents" in problem) and (datatype == "FP16") == ("FP16 has no typed contents" in problem)


@FAST
@given(st.booleans(), st.lists(st.sampled_from(sorted(grpc_rules.TYPED_FIELDS)), max_size=4))
def test_a_response_is_raw_as_asked_or_where_an_output_is_fp16(use_raw, datatypes):
    assert grpc_rules.answers_raw(use_raw, datatypes) == (use_raw or "FP16" in datatypes)


@pytest.mark.parametrize("request_id", [None, "", "7f3a9c1e-0b2d-4c8e-9a6f-1d2e3f4a5b6c", "x" * 128, "a:b/c+d=e_f.g~h"])
def test_request_ids_that_fit_a_header_pass(request_id):
    from wrappers.protocol.request_rules import check_request_id

    check_request_id(request_id)


@pytest.mark.parametrize("request_id", ["café", "a b", "a\tb", "a\r\nb", "a\x00", "x" * 129])
def test_request_ids_that_do_not_fit_a_header_are_refused_saying_what_to_send(request_id):
    from wrappers.protocol.request_rules import RequestError, check_request_id

    with pytest.raises(RequestError, match=r"send 1-128 printable ASCII characters without spaces .*or no id"):
        check_request_id(request_id)
