"""The budget logic: which variants are accepted, why, and which one is chosen."""

import pytest

from export.evaluate import Quality, compare
from export.selection import Budget, Candidate, NoVariantWithinBudget, choose, judge


def quality(*, accuracy=0.98, reference_accuracy=0.99, agreement=0.99, max_abs_diff=0.0, scale=1.0) -> Quality:
    return Quality(
        rows=100,
        top1_agreement=agreement,
        accuracy=accuracy,
        reference_accuracy=reference_accuracy,
        max_abs_diff=max_abs_diff,
        reference_scale=scale,
    )


def test_accuracy_drop_within_and_over_budget():
    assert judge(quality(accuracy=0.986), "int8", Budget(accuracy_points=0.5)).accepted
    verdict = judge(quality(accuracy=0.98), "int8", Budget(accuracy_points=0.5))
    assert not verdict.accepted and verdict.reason == "accuracy drop 1.00 points > budget 0.5"


def test_a_gain_in_accuracy_is_within_any_budget():
    assert judge(quality(accuracy=0.995), "int8", Budget(accuracy_points=0)).accepted


def test_without_labels_the_budget_applies_to_disagreement():
    unlabelled = quality(accuracy=None, reference_accuracy=None, agreement=0.99)
    verdict = judge(unlabelled, "int8", Budget(accuracy_points=0.5))
    assert not verdict.accepted and "top-1 disagreement" in verdict.reason and "1.00 points" in verdict.reason
    assert judge(unlabelled, "int8", Budget(accuracy_points=1.0)).accepted


def test_float_variants_must_reproduce_their_source_scaled_to_its_outputs():
    budget = Budget(accuracy_points=5, fp32_tolerance=1e-4, fp16_tolerance=1e-2)
    assert not judge(quality(accuracy=0.99, max_abs_diff=2e-4), "fp32", budget).accepted
    assert judge(quality(accuracy=0.99, max_abs_diff=2e-4, scale=10.0), "fp32", budget).accepted  # logits of magnitude 10
    assert judge(quality(accuracy=0.99, max_abs_diff=5e-3), "fp16", budget).accepted
    assert "fp16 tolerance" in judge(quality(accuracy=0.99, max_abs_diff=5e-2), "fp16", budget).reason
    assert judge(quality(accuracy=0.99, max_abs_diff=0.5), "int8", budget).accepted  # int8 is judged on accuracy only


def test_budget_refuses_negative_limits():
    with pytest.raises(ValueError):
        Budget(accuracy_points=-1)


def test_choose_the_fastest_accepted_variant_and_say_why():
    candidates = [
        Candidate("fp32", True, 0.040, 40_000),
        Candidate("int8", True, 0.025, 90_000),
        Candidate("slim", False, 0.010, 200_000),  # fastest, but rejected
        Candidate("fp16", True, 0.045, 95_000),
    ]
    name, reason = choose(candidates, "latency")
    assert name == "int8" and "lowest p50 latency" in reason and "rejected: slim" in reason
    name, _ = choose(candidates, "throughput")
    assert name == "fp16"


def test_no_accepted_variant_is_an_error():
    with pytest.raises(NoVariantWithinBudget):
        choose([Candidate("int8", False, 0.02, 1.0)], "latency")


def test_compare_measures_against_the_conversion_reference():
    import numpy as np

    reference = np.array([[0.9, 0.1], [0.2, 0.8], [0.6, 0.4]])
    outputs = np.array([[0.8, 0.2], [0.3, 0.7], [0.4, 0.6]])
    labels = np.array([0, 1, 1])
    result = compare(outputs, reference, labels, conversion_reference=outputs + 0.01)
    assert result.top1_agreement == pytest.approx(2 / 3)
    assert result.accuracy == 1.0 and result.reference_accuracy == pytest.approx(2 / 3)
    assert result.accuracy_drop_points == pytest.approx(-100 / 3)
    assert result.max_abs_diff == pytest.approx(0.01)
