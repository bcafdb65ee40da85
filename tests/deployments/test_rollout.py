"""`deployments.rollout.sequence`: the deploy sequence without a cluster, each cluster step replaced by one that records it.

The order is what leaves nothing half done: the server's dry run of every object before any upload, the upload
before any apply; a refused input, and a step that fails, leave every later step undone."""

from __future__ import annotations

from contextlib import contextmanager

import pytest
import yaml

from deployments.kserve.render import render_kserve
from deployments.render.overlay import RenderOptions, render
from deployments.rollout import sequence as rollout_module
from deployments.rollout.apply import DeployError
from deployments.rollout.placement import StorageAccess
from deployments.rollout.sequence import Rollout, RolloutError, RolloutResult, roll_out


class NoCluster:
    """An API client no step may touch."""

    def __getattr__(self, name):
        raise AssertionError(f"the cluster was reached ({name})")


@pytest.fixture(scope="module")
def rendered(main_version):
    return render("cpu", RenderOptions(model=main_version, namespace="models", engine="builtin"))


@pytest.fixture
def steps(monkeypatch):
    """The cluster steps `roll_out` takes, in order, each recorded with what it was given."""
    taken: list[tuple] = []

    def apply(api, docs, *, namespace, dry_run=False):
        taken.append(("apply", namespace, dry_run))
        return [f"{doc['kind']}/{doc['metadata']['name']}" for doc in docs]

    def wait_rolled_out(api, *, namespace, name, digests, timeout_s, on_state):
        taken.append(("wait", name, digests, timeout_s))
        on_state("Available")
        return {"state": "Available", "address": {"url": "http://digits-default.models.svc:8000/v2/models/digits/infer"}}

    monkeypatch.setattr(
        rollout_module,
        "preflight",
        lambda api, docs, ns, check_images: taken.append(("preflight", check_images)) or ["a warning"],
    )
    monkeypatch.setattr(rollout_module, "apply", apply)
    monkeypatch.setattr(
        rollout_module,
        "place_models",
        lambda api, placements, storage, check_only: taken.append(
            ("place", [(v.uri, s) for v, s in placements], storage, check_only)
        ),
    )
    monkeypatch.setattr(rollout_module, "wait_rolled_out", wait_rolled_out)
    monkeypatch.setattr(
        rollout_module, "ask_served", lambda api, *, namespace, name, predictors: [f"default: {predictors['default']} answers"]
    )
    return taken


class Recorded:
    def __init__(self):
        self.said: list[tuple] = []

    def warning(self, text):
        self.said.append(("warning", text))

    def applied(self, names, namespace):
        self.said.append(("applied", namespace))

    @contextmanager
    def waiting(self, name, timeout_s):
        self.said.append(("waiting", name, timeout_s))
        yield lambda state: self.said.append(("state", state))

    def rolled_out(self, rendered, url):
        self.said.append(("rolled out", url))


@pytest.mark.parametrize("dry_run", ["client", "all", ""])
def test_a_dry_run_that_is_not_a_rollout_is_refused_naming_the_choices(rendered, dry_run):
    with pytest.raises(RolloutError, match=r"choose one of none, server \(a client dry run renders and validates only"):
        Rollout(rendered=rendered, dry_run=dry_run)


def test_a_rendering_without_one_seldon_deployment_or_inference_service_is_refused_before_the_cluster(main_version):
    kserve = render_kserve("cpu", RenderOptions(model=main_version, engine="builtin"))
    assert Rollout(rendered=kserve).kserve  # one InferenceService: a rollout of its own
    kserve.docs = [doc for doc in kserve.docs if doc["kind"] != "InferenceService"]
    with pytest.raises(RolloutError, match="holds 0 SeldonDeployments and 0 InferenceServices; a rollout applies"):
        roll_out(NoCluster(), Rollout(rendered=kserve))
    assert issubclass(RolloutError, DeployError)  # the CLI's one-line error, as for every step's refusal


def test_a_rollout_checks_everything_uploads_then_applies_and_waits(rendered, steps, main_version):
    progress = Recorded()
    rollout = Rollout(rendered=rendered, wait_s=30, check_images=True, storage_endpoint="http://localhost:9000")
    result = roll_out(NoCluster(), rollout, progress)
    storage = StorageAccess(namespace="models", storage_endpoint="http://localhost:9000")
    assert steps == [
        ("preflight", True),
        ("apply", "models", True),
        ("place", [(main_version.uri, "slipway-model-storage")], storage, False),
        ("apply", "models", False),
        ("wait", "digits", {"default": main_version.digest}, 30),
    ]
    assert progress.said == [
        ("warning", "a warning"),
        ("applied", "models"),
        ("waiting", "digits", 30),
        ("state", "Available"),
        ("rolled out", "http://digits-default.models.svc:8000/v2/models/digits/infer"),
    ]
    assert result == RolloutResult(
        applied=tuple(f"{doc['kind']}/{doc['metadata']['name']}" for doc in rendered.docs),
        dry_run=False,
        waited=True,
        url="http://digits-default.models.svc:8000/v2/models/digits/infer",
        served=("default: digits answers",),
    )


def test_a_server_dry_run_uploads_and_applies_nothing(rendered, steps):
    result = roll_out(NoCluster(), Rollout(rendered=rendered, dry_run="server"))
    assert [step[0] for step in steps] == ["preflight", "apply", "place"]
    assert steps[1] == ("apply", "models", True) and steps[2][-1] is True  # the store looked at, not written
    assert result.dry_run and not result.waited and result.applied


def test_no_wait_applies_and_returns(rendered, steps):
    result = roll_out(NoCluster(), Rollout(rendered=rendered, wait_s=0))
    assert [step[0] for step in steps] == ["preflight", "apply", "place", "apply"]
    assert not result.dry_run and not result.waited and result.url is None and result.served == ()


def test_a_refused_dry_run_apply_uploads_and_applies_nothing(rendered, steps, monkeypatch):
    def refused(api, docs, *, namespace, dry_run=False):
        steps.append(("apply", namespace, dry_run))
        raise DeployError("the admission webhook refuses SeldonDeployment/digits")

    monkeypatch.setattr(rollout_module, "apply", refused)
    with pytest.raises(DeployError, match="admission webhook"):
        roll_out(NoCluster(), Rollout(rendered=rendered))
    assert steps == [("preflight", False), ("apply", "models", True)]


def test_deploy_prints_each_step_as_the_rollout_takes_it(record_files, steps, monkeypatch, tmp_path, capsys):
    import slipway.reports
    from deployments import cli

    monkeypatch.setattr(slipway.reports, "REPORTS_DIR", tmp_path / "reports")
    monkeypatch.setattr(cli, "_connect", lambda nothing_done: NoCluster())
    argv = ["deploy", "--version-record", str(record_files("3")), "--namespace", "models", "--kustomize", "builtin"]
    assert cli.main([*argv, "--out", str(tmp_path / "out"), "--wait", "30", "--storage-endpoint", "http://localhost:9000"]) == 0
    out, err = capsys.readouterr()
    said = [line for line in err.splitlines() if line.strip()]
    applied = ", ".join(
        f"{doc['kind']}/{doc['metadata']['name']}" for doc in yaml.safe_load_all((tmp_path / "out" / "all.yaml").read_text())
    )
    assert said[1:] == [
        "warning: a warning",
        f"applied {applied} to namespace models",
        "digits is Available, its Ready pods serving default v3",
        "inside the cluster: POST http://digits-default.models.svc:8000/v2/models/digits/infer",
        "default: digits answers",
        "inference: POST <your Seldon gateway>/seldon/models/digits/v2/models/digits/infer",
    ]
    assert out == "/seldon/models/digits/v2/models/digits/infer\n"
    assert steps[2][2] == StorageAccess(namespace="models", storage_endpoint="http://localhost:9000")


def test_a_kserve_rollout_takes_the_same_steps_with_kserve_s_checks_secret_and_wait(steps, monkeypatch, main_version):
    from deployments.kserve import rollout as kserve_rollout
    from deployments.kserve.render import STORAGE_SECRET

    kserve = render_kserve("cpu", RenderOptions(model=main_version, namespace="models", engine="builtin"))
    monkeypatch.setattr(kserve_rollout, "check_cluster", lambda api, docs, ns: steps.append(("kserve checks", ns)) or [])

    def wait_ready(api, *, namespace, name, digest, timeout_s, on_state):
        steps.append(("wait", name, digest, timeout_s))
        return {"address": {"url": "http://digits-predictor.models.svc.cluster.local"}}

    monkeypatch.setattr(kserve_rollout, "wait_ready", wait_ready)
    monkeypatch.setattr(rollout_module, "ask_service", lambda api, **target: f"{target['label']}: {target['service']}")
    progress = Recorded()
    result = roll_out(NoCluster(), Rollout(rendered=kserve, wait_s=30), progress)
    assert steps == [
        ("preflight", False),
        ("kserve checks", "models"),
        ("apply", "models", True),
        ("place", [(main_version.uri, STORAGE_SECRET)], StorageAccess(namespace="models"), False),
        ("apply", "models", False),
        ("wait", "digits", main_version.digest, 30),
    ]
    assert result.url == "http://digits-predictor.models.svc.cluster.local/v2/models/digits/infer"
    assert result.served == ("predictor: digits-predictor",)


def test_the_rollout_wait_returns_the_status_once_nothing_is_pending_and_says_what_was_pending_when_late():
    from deployments.rollout.apply import wait_for

    said: list[str] = []
    late = {"late": "SeldonDeployment models/digits has not rolled out", "describe": "kubectl describe sdep digits -n models"}
    served = {"metadata": {"name": "digits"}, "status": {"state": "Available"}}
    assert wait_for(lambda: served, lambda sdep: [], timeout_s=5, done="Available", on_state=said.append, **late) == {
        "state": "Available"
    }
    assert said == ["Available"]
    with pytest.raises(DeployError) as refused:
        wait_for(
            lambda: {},
            lambda sdep: ["a: no pod is Ready", "b: no pod is Ready"],
            timeout_s=0.01,
            done="",
            on_state=said.append,
            **late,
        )
    assert str(refused.value) == (
        "SeldonDeployment models/digits has not rolled out after 0s (a: no pod is Ready; b: no pod is Ready); "
        "see kubectl describe sdep digits -n models"
    )
    assert said[-1] == "a: no pod is Ready; b: no pod is Ready"


def test_seldon_failing_on_the_service_of_a_removed_predictor_names_it_but_not_one_the_spec_keeps():
    from deployments.rollout.apply import _removed_service

    sdep = {"spec": {"predictors": [{"name": "default"}, {"name": "canary"}]}}
    # the shadow left the spec: its Service is one Seldon's status may still list after deleting it
    assert _removed_service(sdep, "digits", 'Service "digits-shadow" not found') == "digits-shadow"
    # a Service the spec still has, another deployment's, or another complaint: a failure as it stands
    assert _removed_service(sdep, "digits", 'Service "digits-canary" not found') is None
    assert _removed_service(sdep, "digits", 'Service "iris-shadow" not found') is None
    assert _removed_service(sdep, "digits", 'Deployment.apps "digits-shadow" is invalid') is None
    assert _removed_service({}, "digits", "") is None
