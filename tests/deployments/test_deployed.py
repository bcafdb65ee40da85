"""Which deployed model a command means when it is not named (deployments/rollout/deployed.py): the choice among
what the cluster listed. The listing itself is asked of a real API server in tests/localcluster/test_deployed.py."""

from __future__ import annotations

import pytest

from deployments.rollout.deployed import ModelNotFound, choose


def test_the_one_model_in_the_namespace_is_the_one_meant():
    assert choose(["mnist"], namespace="team", flag="--name", target="undeploy") == "mnist"


def test_no_model_says_deploy_first():
    with pytest.raises(ModelNotFound) as refused:
        choose([], namespace="team", flag="--name", target="undeploy")
    assert str(refused.value) == "nothing Slipway deployed in namespace team; deploy first with `make deploy`"


def test_several_models_are_named_with_the_option_and_the_make_setting_that_picks_one():
    with pytest.raises(ModelNotFound) as refused:
        choose(["digits", "mnist"], namespace="team", flag="--deployment", target="canary-abort")
    assert str(refused.value) == (
        "namespace team holds models digits, mnist: give --deployment (make canary-abort NAME=...), e.g. --deployment digits"
    )
