"""The canary package's commands: `canary-judge` (one decision), `canary` (the controller loop), `shadow`.

canary-judge exit status: 0 promote-step, 1 fail (the SLO lines it broke on stderr), 3 wait (too few samples),
2 a user error. canary: 0 promoted, 1 rolled back (the line that failed on stderr), 2 refused, nothing changed.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from deployments.delivery.canary import predictors
from deployments.delivery.canary.controller import SETTLE_S
from deployments.render.overlay import CANARY_PREDICTOR, namespace_argument
from deployments.render.records import DEFAULT_STORAGE_ROOT, RecordError
from deployments.render.seldon import MODEL_LABEL
from deployments.rollout.apply import ClusterUnavailable, DeployError, connect, wait_rolled_out
from deployments.rollout.deployed import ModelNotFound, deployed_model
from deployments.rollout.placement import add_storage_arguments, place_models
from deployments.sizing.prometheus import Prometheus, PrometheusError
from slipway.cli import UserError, console
from slipway.cluster_names import DEFAULT_NAMESPACE
from slipway.paths import EXAMPLE_SLO, MODEL_STORE_DIR

EXIT_STATUS = {"promote-step": 0, "fail": 1, "wait": 3}


def add_command(commands) -> None:
    from deployments.delivery.canary.judge import DEFAULT_WINDOW
    from deployments.delivery.canary.queries import DEFAULT_LATENCY_HISTOGRAM

    parser = commands.add_parser(
        "canary-judge",
        help="judge a canary predictor against its stable one and the SLO, from Prometheus",
        description=__doc__.split("\n\n")[0] + " " + __doc__.split("\n\n")[1].strip(),
    )
    parser.add_argument(
        "--slo",
        required=True,
        help="the SLO file `make loadtest SLO=` takes (its `canary:` section sets the tolerances and min_requests)",
    )
    parser.add_argument(
        "--prometheus-url",
        help="default: $PROMETHEUS_URL; credentials from $PROMETHEUS_TOKEN (bearer) "
        "or $PROMETHEUS_USERNAME and $PROMETHEUS_PASSWORD (basic auth)",
    )
    parser.add_argument("--namespace", default=DEFAULT_NAMESPACE, help=f"where the model runs (default {DEFAULT_NAMESPACE})")
    parser.add_argument(
        "--deployment",
        help="the SeldonDeployment (render names it after the model; default: the one model Slipway deployed in the "
        "namespace, asked of the current context's cluster)",
    )
    parser.add_argument("--stable", default="default", help="the stable predictor (default: default)")
    parser.add_argument("--canary", default=CANARY_PREDICTOR, help=f"the canary predictor (default: {CANARY_PREDICTOR})")
    parser.add_argument("--window", default=DEFAULT_WINDOW, help=f"trailing window judged (default {DEFAULT_WINDOW})")
    parser.add_argument("--at", type=float, help="judge the window ending at this Unix time (default now)")
    parser.add_argument(
        "--latency-histogram",
        default=DEFAULT_LATENCY_HISTOGRAM,
        help=f"the histogram latency is read from (default {DEFAULT_LATENCY_HISTOGRAM})",
    )
    parser.add_argument("--json", action="store_true", help="print the verdict as JSON on stdout")
    parser.set_defaults(func=cmd_canary_judge)


def cmd_canary_judge(args) -> int:

    from deployments.delivery.canary.judge import judge
    from slipway.slo import ConfigError, load_slo

    try:
        slo = load_slo(Path(args.slo))
        server = Prometheus.from_env(args.prometheus_url)
        deployment = args.deployment or deployed_model(
            args.namespace,
            flag="--deployment",
            target=None,
            engines=("seldon",),
            on_note=console_print,
        )
        verdict = judge(
            server,
            slo,
            namespace=args.namespace,
            deployment=deployment,
            stable=args.stable,
            canary=args.canary,
            window=args.window,
            at=args.at,
            latency_histogram=args.latency_histogram,
        )
    except (ConfigError, PrometheusError, ValueError, ModelNotFound) as err:
        raise UserError(str(err)) from err
    if args.json:
        sys.stdout.write(json.dumps(verdict.as_dict(), indent=2) + "\n")
    colour = {"promote-step": "green", "wait": "yellow", "fail": "red"}[verdict.decision]
    console.print(f"[{colour}]{verdict.decision}[/]")
    for line in verdict.lines():
        console.print(f"  {line}", markup=False)
    return EXIT_STATUS[verdict.decision]


# ---------------------------------------------------------------- canary, shadow

_DURATION = {"s": 1, "m": 60, "h": 3600}


def settle_s(text: str) -> float:
    """A duration, or 0 (`0`, `0s`): no settling, for an ingress that follows Endpoints itself."""
    return 0.0 if text.rstrip("smh") in {"0", "0.0"} else duration_s(text)


def duration_s(text: str) -> float:
    """`90s`, `5m`, `1h` or a number of seconds."""

    unit = text[-1:] if text[-1:] in _DURATION else "s"
    number = text[:-1] if text[-1:] in _DURATION else text
    try:
        seconds = float(number) * _DURATION[unit]
    except ValueError:
        seconds = -1.0
    if seconds <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration: give one such as 30s, 5m or 1h")
    return seconds


def _steps(text: str) -> tuple[int, ...]:

    from deployments.delivery.canary.controller import check_steps

    try:
        return check_steps([int(part) for part in text.split(",")])
    except ValueError as err:
        message = str(err) if "must be" in str(err) else f"steps {text!r} must be whole percentages, e.g. 5,10,25,50,100"
        raise argparse.ArgumentTypeError(message) from None


def _add_target_arguments(parser) -> None:

    parser.add_argument("--ref", help="the new version in the model store: NAME:NUMBER (digits:4) or NAME@TAG")
    parser.add_argument("--store", type=Path, default=MODEL_STORE_DIR, help=f"the model store (default {MODEL_STORE_DIR})")
    parser.add_argument("--namespace", type=namespace_argument, default=DEFAULT_NAMESPACE, help="where the SeldonDeployment runs")
    parser.add_argument(
        "--deployment",
        help="the SeldonDeployment (default: the version's model name, as render names it; without --ref, the one model "
        "Slipway deployed in the namespace, found by its labels)",
    )
    parser.add_argument(
        "--storage-root",
        default=DEFAULT_STORAGE_ROOT,
        help=f"where a version without a URI of its own is uploaded and pulled from (default {DEFAULT_STORAGE_ROOT})",
    )
    parser.add_argument(
        "--wait", type=float, default=300.0, metavar="SECONDS", help="how long a predictor may take to roll out (default 300)"
    )
    parser.add_argument(
        "--engine",
        choices=("seldon", "kserve"),
        default="seldon",
        help="what serves the model (default seldon); kserve is refused in one line: RawDeployment has no traffic split",
    )
    add_storage_arguments(parser)


def _refuse_kserve(args, what: str) -> None:
    """The one line a canary or shadow of a KServe InferenceService gets, before anything is read or changed."""
    if args.engine == "kserve":
        raise UserError(
            f"{what} --engine kserve is not built, nothing was changed: KServe's RawDeployment has no traffic split or "
            "mirror (its canaryTrafficPercent needs Knative Serving), and two InferenceServices behind one route need "
            "a weighted Gateway API HTTPRoute or ingress, which the local cluster does not run; use --engine seldon"
        )


def add_canary_commands(commands) -> None:
    from deployments.delivery.canary.controller import DEFAULT_STEPS

    parser = commands.add_parser(
        "canary",
        help="SLO-gated canary: step a new version's traffic up, then promote it or roll it back",
        description="Add the new version as a canary predictor and step its share of traffic up while it holds the "
        "SLO against the stable predictor (from Prometheus); promote it (the store's tag moves) or roll "
        "it back at the first broken line. Resumable: its state is on the SeldonDeployment. "
        "Exit 0 promoted, 1 rolled back, 2 refused (nothing changed).",
    )
    _add_target_arguments(parser)
    parser.add_argument(
        "--steps",
        type=_steps,
        default=DEFAULT_STEPS,
        help=f"canary weights in percent, the last 100 (default {','.join(map(str, DEFAULT_STEPS))})",
    )
    parser.add_argument(
        "--interval", type=duration_s, default=duration_s("5m"), help="how long each step runs before it is judged (default 5m)"
    )
    parser.add_argument("--window", help="the trailing window judged (default: the interval)")
    parser.add_argument(
        "--slo",
        type=Path,
        default=EXAMPLE_SLO,
        help="the SLO file (latency and error limits, and its canary: section; default: the example "
        "shipped as loadtest/slo.example.yaml)",
    )
    parser.add_argument(
        "--promote-tag", default="champion", help="the store tag moved to the version when promoted (default champion)"
    )
    parser.add_argument(
        "--prometheus-url",
        help="default: $PROMETHEUS_URL; credentials from $PROMETHEUS_TOKEN or $PROMETHEUS_USERNAME and $PROMETHEUS_PASSWORD",
    )
    parser.add_argument(
        "--max-waits",
        type=int,
        default=6,
        help="judgements in a row with too few samples before the canary is rolled back (default 6)",
    )
    parser.add_argument(
        "--drain",
        type=duration_s,
        default=10.0,
        help="how long a predictor set to 0%% keeps its pods before it is removed, for requests in flight (default 10s)",
    )
    parser.add_argument(
        "--settle",
        type=settle_s,
        default=SETTLE_S,
        help="how long a predictor whose pods just became Ready stays at 0%% before it takes traffic, while each "
        f"node's kube-proxy learns of them (default {SETTLE_S:g}s; 0 for an ingress that follows Endpoints itself)",
    )
    parser.add_argument("--abort", action="store_true", help="roll back the canary in progress now (--ref not needed)")
    parser.set_defaults(func=cmd_canary)

    shadow = commands.add_parser(
        "shadow",
        help="run a new version as a shadow: a copy of every request, its answers dropped",
        description="Add the new version as a `shadow: true` predictor beside the stable one. Its answers are "
        "dropped; its metrics (labelled predictor=shadow) show its latency and, for a classifier, how "
        "its answers differ (`make canary` of the same version judges that before any traffic moves).",
    )
    _add_target_arguments(shadow)
    shadow.add_argument("--remove", action="store_true", help="remove the shadow (--ref not needed)")
    shadow.set_defaults(func=cmd_shadow)


def _target(args, *, need_ref: bool, target: str):
    """(api, live deployment, version or None), each refusal one line before anything changes; without --ref or
    --deployment, the deployment is the one model Slipway deployed in the namespace (`target`: the make target that
    takes NAME= for it, named where there is none or several)."""
    from deployments.delivery.canary.live import LiveDeployment, LiveError
    from deployments.delivery.model_store import StoreRefused, version

    model = None
    if need_ref:
        if not args.ref:
            raise UserError("say which version: --ref NAME:NUMBER or NAME@TAG (make ... VERSION=4 or TAG=challenger)")
        try:
            model = version(args.ref, args.store, storage_root=args.storage_root)
        except (StoreRefused, RecordError) as err:
            raise UserError(f"{err}") from err
    try:
        api = connect(on_note=lambda note: console_print(note))
    except ClusterUnavailable as err:
        raise UserError(f"{err}: nothing was changed. A local cluster: `make cluster`") from err
    try:
        name = args.deployment or (
            model.name
            if model is not None
            else deployed_model(args.namespace, flag="--deployment", target=target, engines=("seldon",), api=api)
        )
    except ModelNotFound as err:
        raise UserError(str(err)) from err
    live = LiveDeployment(api, args.namespace, name)
    try:
        sdep = live.read()
    except LiveError as err:
        raise UserError(str(err)) from err
    serves = (sdep["metadata"].get("labels") or {}).get(MODEL_LABEL)
    if model is not None and serves != model.name:
        raise UserError(
            f"{args.ref} is a version of model {model.name!r}, but SeldonDeployment "
            f"{live.namespace}/{live.name} serves model {serves!r}: give a version of {serves!r}"
        )
    return api, live, sdep, model


def console_print(text: str) -> None:

    console.print(text, soft_wrap=True, markup=False)


def _wait(api, live, args):

    def wait(digests: dict[str, str], on_poll) -> None:
        wait_rolled_out(
            api,
            namespace=live.namespace,
            name=live.name,
            digests=digests,
            timeout_s=args.wait,
            on_state=lambda state: on_poll(),
            routed=True,
        )

    return wait


def cmd_canary(args) -> int:
    import getpass

    from rich.live import Live

    from deployments.delivery.canary.controller import CanaryRefused, Controller, Plan, RolledBack
    from deployments.delivery.canary.drift import judge_drift
    from deployments.delivery.canary.judge import judge
    from deployments.delivery.canary.live import LiveError
    from deployments.delivery.canary.predictors import SHADOW_PREDICTOR, STABLE_PREDICTOR
    from deployments.delivery.canary.queries import PredictorQueries
    from deployments.delivery.canary.report import DecisionLog
    from deployments.delivery.model_store import StoreRefused, move_tag
    from slipway.slo import ConfigError, load_slo

    _refuse_kserve(args, "canary")
    window = args.window or f"{round(args.interval)}s"
    try:
        slo = load_slo(args.slo)
        PredictorQueries(args.namespace, "check", "check", window)  # a window PromQL refuses, refused here
        prometheus = None if args.abort else Prometheus.from_env(args.prometheus_url)  # an abort judges nothing
    except (ConfigError, PrometheusError, ValueError) as err:
        raise UserError(str(err)) from err

    def reader() -> Prometheus:
        if prometheus is None:
            raise AssertionError("an abort never judges")
        return prometheus

    api, live, sdep, model = _target(args, need_ref=not args.abort, target="canary-abort")
    log = DecisionLog()
    secret = next((p["graph"].get("envSecretRefName") for p in sdep["spec"]["predictors"] if p["name"] == STABLE_PREDICTOR), None)
    scope = {"namespace": live.namespace, "deployment": live.name, "stable": STABLE_PREDICTOR, "window": window}
    controller = Controller(
        live=live,
        log=log,
        plan=Plan(
            version=model,
            steps=args.steps,
            interval_s=args.interval,
            promote_tag=args.promote_tag,
            max_waits=args.max_waits,
            drain_s=args.drain,
            settle_s=args.settle,
        ),
        judge=lambda: judge(reader(), slo, canary=CANARY_PREDICTOR, **scope),
        judge_drift=lambda: judge_drift(reader(), slo, shadow=SHADOW_PREDICTOR, **scope),
        place=lambda: place_models(api, [(model, secret)], args),
        wait_rolled_out=_wait(api, live, args),
        move_tag=lambda: move_tag(args.promote_tag, model.name, model.version, args.store),
        say=console_print,
    )
    display = Live(console=console, auto_refresh=False)  # shown from the first change: a refusal stays one line

    def show() -> None:
        if not display.is_started:
            display.start()
        display.update(log.table(), refresh=True)

    log.on_change = show
    try:
        try:
            if args.abort:
                controller.abort(getpass.getuser())
            else:
                controller.run()
        finally:
            display.stop()
    except RolledBack as err:
        console.print(f"[bold red]rolled back:[/] {err}", soft_wrap=True, markup=True)
        return 1
    except (CanaryRefused, LiveError, DeployError, StoreRefused, PrometheusError) as err:
        state = controller.current
        left = (
            (f"; the canary stays at {state.position()} ({state.phase}): run the same command to resume it, or make canary-abort")
            if state is not None
            else ""
        )
        raise UserError(f"{err}{left}") from err
    except KeyboardInterrupt:
        state = controller.current
        if state is not None:
            console.print(
                f"interrupted: the canary stays at {state.position()} ({state.phase}); run the same command "
                "to resume it, or make canary-abort",
                soft_wrap=True,
                markup=False,
            )
        return 130
    console.print(
        f"[green]promoted:[/] {live.name} v{model.version} serves alone; {model.name}@{args.promote_tag} -> v{model.version}",
        soft_wrap=True,
    )
    return 0


def cmd_shadow(args) -> int:

    from deployments.delivery.canary import live as patches
    from deployments.delivery.canary.live import LiveError
    from deployments.delivery.canary.state import SHADOW_ANNOTATION, STATE_ANNOTATION

    _refuse_kserve(args, "shadow")
    api, live, sdep, model = _target(args, need_ref=not args.remove, target="shadow-off")
    annotations = sdep["metadata"].get("annotations") or {}
    index = patches.predictor_index(sdep, predictors.SHADOW_PREDICTOR)
    guard = {"op": "test", "path": "/metadata/resourceVersion", "value": sdep["metadata"]["resourceVersion"]}
    try:
        if args.remove:
            if index is None:
                console_print(f"no shadow on {live.namespace}/{live.name}: nothing removed")
                return 0
            live.patch(
                [
                    guard,
                    *patches.at_index(sdep, predictors.SHADOW_PREDICTOR),
                    {"op": "remove", "path": f"/spec/predictors/{index}"},
                    *(
                        [{"op": "remove", "path": patches.annotation_path(SHADOW_ANNOTATION)}]
                        if SHADOW_ANNOTATION in annotations
                        else []
                    ),
                ]
            )
            console_print(f"shadow removed from {live.namespace}/{live.name}")
            return 0
        if STATE_ANNOTATION in annotations:
            raise UserError(
                f"a canary is in progress on {live.namespace}/{live.name}: a shadow runs before a canary, not beside one"
            )
        stable_index = patches.predictor_index(sdep, predictors.STABLE_PREDICTOR)
        if stable_index is None:
            raise UserError(f"{live.namespace}/{live.name} has no predictor {predictors.STABLE_PREDICTOR!r} to shadow")
        stable = sdep["spec"]["predictors"][stable_index]
        stable_version, stable_digest = predictors.served_version(stable)
        if stable_digest == model.digest:
            raise UserError(f"{live.namespace}/{live.name} already serves v{model.version}: nothing to shadow")
        if index is not None:
            running = predictors.served_version(sdep["spec"]["predictors"][index])
            if running[1] == model.digest:
                console_print(f"v{model.version} already runs as the shadow of {live.namespace}/{live.name}")
                return 0
            raise UserError(
                f"a shadow of v{running[0]} already runs on {live.namespace}/{live.name}: remove it first (make shadow-off)"
            )
        place_models(api, [(model, stable["graph"].get("envSecretRefName"))], args)
        since = json.dumps({"version": model.version, "digest": model.digest, "since": time.time()}, separators=(",", ":"))
        live.patch(
            [
                guard,
                {"op": "add", "path": "/spec/predictors/-", "value": predictors.shadow(stable, model, namespace=live.namespace)},
                {"op": "add", "path": patches.annotation_path(SHADOW_ANNOTATION), "value": since},
            ]
        )
        _wait(api, live, args)(
            {predictors.STABLE_PREDICTOR: stable_digest, predictors.SHADOW_PREDICTOR: model.digest}, lambda: None
        )
    except (LiveError, DeployError, predictors.PredictorError) as err:
        raise UserError(str(err)) from err
    console_print(
        f"v{model.version} runs as a shadow beside v{stable_version} on {live.namespace}/{live.name}: it gets "
        f"a copy of every request, its answers are dropped. Judge it with make canary VERSION={model.version}"
    )
    return 0
