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


# --- a budget per named output ---------------------------------------------------------------------------------


def outputs(label_changed=0.0, value_diff=0.0):
    """A classifier output 'label' and a value output 'value', as `output_quality` measures them."""
    import numpy as np

    from export.evaluate import output_quality

    rows = 100
    reference = np.tile(np.array([[0.1, 0.7, 0.2]], np.float32), (rows, 1))
    variant = reference.copy()
    variant[: int(rows * label_changed)] = [0.8, 0.1, 0.1]  # these rows change their top-1 class
    value = np.linspace(-2, 2, rows, dtype=np.float32)[:, None]
    return (
        output_quality("label", variant, reference, reference),
        output_quality("value", value + np.float32(value_diff), value, value),
    )


def test_each_output_is_judged_by_its_own_budget_naming_the_output_it_broke():
    budget = Budget(outputs={"label": {"points": 5}, "value": {"tolerance": 0.01}})
    unlabelled = quality(accuracy=None, reference_accuracy=None, agreement=0.97)
    accepted = judge(unlabelled, "int8", budget, outputs(label_changed=0.03, value_diff=0.015))  # value's scale is 2
    assert accepted.accepted and "output 'label' 3.00 points <= 5" in accepted.reason, accepted.reason
    # 3 points changed is within label's own 5 (the model-wide 0.5 would refuse it): the first output's own replaces it
    too_far = judge(unlabelled, "int8", budget, outputs(label_changed=0.03, value_diff=0.05))
    assert not too_far.accepted and too_far.reason == "output 'value': max abs diff 5.00e-02 > its tolerance 2.0e-02"
    label = judge(quality(accuracy=None, reference_accuracy=None, agreement=0.9), "int8", budget, outputs(label_changed=0.1))
    assert not label.accepted and label.reason == "output 'label': top-1 disagreement 10.00 points > its budget 5"


def test_without_an_own_budget_the_first_output_keeps_the_model_wide_one():
    budget = Budget(accuracy_points=0.5, outputs={"value": {"tolerance": 1.0}})
    verdict = judge(quality(accuracy=None, reference_accuracy=None, agreement=0.97), "int8", budget, outputs(0.03))
    assert not verdict.accepted and verdict.reason.startswith("top-1 disagreement (accuracy unknown: no labels) 3.00 points")


def test_integer_outputs_disagree_where_their_value_changed():
    import numpy as np

    from export.evaluate import output_quality

    reference = np.array([0, 1, 2, 1], np.int64)
    measured = output_quality("label", np.array([0, 1, 1, 1], np.int64), reference, reference)
    assert measured.disagreement_points == 25.0 and measured.max_abs_diff == 1.0
    assert (
        output_quality("value", np.ones((4, 1), np.float32), np.ones((4, 1), np.float32), np.ones((4, 1))).disagreement_points
        is None
    )


@pytest.mark.parametrize(
    "budgets, tolerances, expected",
    [
        (["label=2"], ["value=0.01"], {"label": {"points": 2.0}, "value": {"tolerance": 0.01}}),
        (["label=2"], ["label=0.1"], {"label": {"points": 2.0, "tolerance": 0.1}}),
    ],
)
def test_output_limits_read_from_the_command_line(budgets, tolerances, expected):
    from export.commands import output_limits

    assert output_limits(budgets, tolerances) == expected
    assert Budget(outputs=expected).outputs["label"].points == 2.0


@pytest.mark.parametrize(
    "budgets, tolerances, expected",
    [
        (["label"], None, "--output-budget 'label' is not NAME=NUMBER (a number >= 0): write e.g. --output-budget label=1"),
        (None, ["value=-1"], "--output-tolerance 'value=-1' is not NAME=NUMBER"),
        (["=3"], None, "--output-budget '=3' is not NAME=NUMBER"),
        (["label=1", "label=2"], None, "--output-budget names output 'label' twice"),
    ],
)
def test_a_malformed_output_budget_is_one_line_saying_how_to_write_it(budgets, tolerances, expected):
    from export.commands import output_limits
    from slipway.cli import UserError

    with pytest.raises(UserError) as caught:
        output_limits(budgets, tolerances)
    assert str(caught.value).startswith(expected) and "\n" not in str(caught.value)
