"""The SLO gate on figures with known answers: which limit broke, by how much, and what was judged."""

import pytest

from slipway.slo import ConfigError, Slo, breaches, capacity_step, judge, load_slo


def figures(users, rps, p95, error_rate=0.0, index=0):
    return {
        "index": index,
        "users": users,
        "rps": rps,
        "p50_ms": p95 / 3,
        "p95_ms": p95,
        "p99_ms": p95 * 1.5,
        "error_rate": error_rate,
        "requests": 1000,
        "failures": int(error_rate * 1000),
    }


def test_slo_from_yaml_with_flags_winning(tmp_path):
    path = tmp_path / "slo.yaml"
    path.write_text("p95_ms: 50\nmax_error_rate: 0.01\nmin_rps: 100\n")
    slo = load_slo(path, p95_ms=20.0, p99_ms=None)
    assert slo == Slo(p95_ms=20, max_error_rate=0.01, min_rps=100)


@pytest.mark.parametrize(
    "text, message",
    [
        ("p95: 50\n", "p95: Extra inputs are not permitted"),
        ("p95_ms: fast\n", "p95_ms: Input should be a valid number"),
        ("max_error_rate: 2\n", "max_error_rate: Input should be less than or equal to 1"),
        ("- p95_ms\n", "must be a mapping"),
        ("p95_ms: [\n", "not valid YAML: expected the node content, but found '<stream end>' at line 2, column 1"),
        ("p95_ms: 50\n  p99_ms: 80\n", "not valid YAML: mapping values are not allowed here at line 2, column 9"),
        (b"p95_ms: 50\nmin_rps: \xff\n", "not UTF-8 text (byte 0xff at line 2, column 10: invalid start byte)"),
    ],
)
def test_bad_slo_files_are_one_clear_error(tmp_path, text, message):
    path = tmp_path / "slo.yaml"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    with pytest.raises(ConfigError, match="slo.yaml") as caught:
        load_slo(path)
    assert message in str(caught.value) and "\n" not in str(caught.value)
    with pytest.raises(ConfigError, match="does not exist"):
        load_slo(tmp_path / "missing.yaml")


def test_breaches_name_the_limit_and_by_how_much():
    slo = Slo(p50_ms=10, p95_ms=40, p99_ms=200, max_error_rate=0.01, min_rps=500)
    found = breaches(slo, figures(users=8, rps=400, p95=60, error_rate=0.02))
    messages = {breach.limit: breach.message() for breach in found}
    assert set(messages) == {"p50_ms", "p95_ms", "max_error_rate", "min_rps"}
    assert messages["p95_ms"] == "p95 latency 60.0 ms > p95_ms 40 (over by 20.0 ms, +50%)"
    assert messages["min_rps"] == "throughput 400.0 req/s < min_rps 500 (short by 100.0 req/s, -20%)"
    assert "error rate 2.00% > max_error_rate 1.00%" in messages["max_error_rate"]
    assert breaches(Slo(), figures(8, 1, 1e6)) == []


def test_step_load_is_judged_on_its_capacity_at_the_slo():
    steps = [figures(1, 100, 5, index=0), figures(2, 190, 8, index=1), figures(4, 260, 30, index=2), figures(8, 270, 90, index=3)]
    slo = Slo(p95_ms=35, min_rps=250)
    assert capacity_step(slo, steps)["users"] == 4
    verdict = judge(slo, shape="step", steps=steps, aggregate={})
    assert verdict.passed and "step 3 (4 users)" in verdict.judged_on

    tight = judge(Slo(p95_ms=10, min_rps=250), shape="step", steps=steps, aggregate={})
    assert not tight.passed and tight.figures["rps"] == 190
    assert tight.lines() == ["throughput 190.0 req/s < min_rps 250 (short by 60.0 req/s, -24%)"]

    impossible = judge(Slo(p95_ms=1), shape="step", steps=steps, aggregate={})
    assert "even the lightest load breaks the SLO" in impossible.judged_on
    assert impossible.lines() == ["p95 latency 5.0 ms > p95_ms 1 (over by 4.0 ms, +400%)"]


def test_constant_load_is_judged_on_its_steady_state_and_spikes_on_the_whole_run():
    steady, whole = figures(4, 300, 10), figures(4, 280, 45)
    slo = Slo(p95_ms=20)
    assert judge(slo, shape="constant", steps=[steady], aggregate=whole).passed
    verdict = judge(slo, shape="spike", steps=[steady], aggregate=whole)
    assert not verdict.passed and verdict.judged_on == "the whole run"
