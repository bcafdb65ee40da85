"""`python -m deployments`: render, validate, apply and remove the manifests for one model version.

Each subcommand registers itself through one `register_*` function listed in REGISTRARS;
a new subcommand is one more function there.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from deployments.delivery.alerts.command import add_command as register_alerts
from deployments.delivery.canary.command import add_canary_commands as register_canary
from deployments.delivery.canary.command import add_command as register_canary_judge
from deployments.render.autoscaling import ALL_MODES, METRIC_SOURCES, busy_cpu_warning
from deployments.render.kustomize import KustomizeError
from deployments.render.overlay import (
    DEFAULT_INGRESS_NAMESPACE,
    DEFAULT_MONITORING_NAMESPACE,
    OVERLAYS,
    Rendered,
    RenderError,
    RenderOptions,
    namespace_argument,
    render,
    write_manifests,
)
from deployments.render.records import DEFAULT_STORAGE_ROOT, ModelVersion, RecordError
from deployments.rollout.apply import UNDEPLOY_TIMEOUT_S, ClusterUnavailable, DeployError, apply, connect, delete, wait_gone
from deployments.rollout.deployed import ModelNotFound, deployed_model
from deployments.rollout.image_build import add_command as register_image
from deployments.rollout.placement import add_storage_arguments, place_models
from deployments.rollout.preflight import check_namespace_exists
from deployments.rollout.sequence import DEFAULT_WAIT_S, Rollout, roll_out
from deployments.rollout.storage_secret import DEFAULT_SECRET, SCHEMES, SecretError, secret_manifest, settings_from_environment
from deployments.sizing.recommend import add_command as add_recommend
from slipway.cli import UserError, console, dispatch
from slipway.cluster_names import DEFAULT_NAMESPACE
from slipway.files import FileProblem
from slipway.paths import BUILD_DIR, DEMO_ARTIFACT_DIR
from slipway.reports import write_report
from slipway.runtime_settings import SettingsError

PROG = "python -m deployments"

MANIFESTS_DIR = BUILD_DIR / "manifests"


# ---------------------------------------------------------------- render


def _add_render_arguments(command: argparse.ArgumentParser) -> None:
    command.add_argument(
        "--engine",
        default="seldon",
        choices=("seldon", "kserve"),
        help="what serves the model: seldon (a SeldonDeployment, default) or kserve (a ServingRuntime and an "
        "InferenceService in RawDeployment mode, with an HPA and a PodDisruptionBudget; one version, cpu or gpu overlay)",
    )
    command.add_argument(
        "--overlay", default="cpu", help=f"{', '.join(OVERLAYS)}, or the folder of your own overlay (default cpu)"
    )
    source = command.add_mutually_exclusive_group()
    source.add_argument(
        "--version-record",
        type=Path,
        help="the model store's version record (`python -m export versions show REF --json`): pins URI, version and digest",
    )
    source.add_argument("--model-dir", type=Path, help=f"an unpublished artifact folder (default {DEMO_ARTIFACT_DIR})")
    command.add_argument("--version", help="with --model-dir: the version to call it (default: its digest's first 12 hex)")
    command.add_argument(
        "--model-uri", help="where the cluster pulls the main version from, replacing the record's (s3://, gs://, pvc://)"
    )
    command.add_argument(
        "--storage-root",
        default=DEFAULT_STORAGE_ROOT,
        help="where a version without a URI of its "
        f"own is uploaded and pulled from, as <root>/<name>/<version> (default {DEFAULT_STORAGE_ROOT})",
    )
    command.add_argument("--canary-record", type=Path, help="version record of the canary (OVERLAY=canary)")
    command.add_argument("--canary-model-uri", help="where the cluster pulls the canary from, replacing its record's")
    command.add_argument("--canary-percent", type=int, help="share of traffic for the canary, 0-100 (default: the overlay's)")
    command.add_argument(
        "--autoscaling",
        default="cpu",
        choices=ALL_MODES,
        help="cpu (hpaSpec on CPU utilization), rps (requests/s per replica via prometheus-adapter), "
        "keda (kedaSpec), behavior (a standalone autoscaling/v2 HPA with scaling behaviour); "
        "gpu overlay only: gpu-queue (KEDA on the p90 queue time), gpu-util (KEDA on DCGM GPU "
        "utilization)",
    )
    command.add_argument(
        "--hpa-metric-source",
        default="container",
        choices=METRIC_SOURCES,
        help="where the HPA reads CPU and memory utilization: container (default; ContainerResource on "
        "the model container, so a sidecar such as Istio's does not skew it) or pod (Resource, "
        "summed over every container of the pod) for clusters before Kubernetes 1.30, where "
        "ContainerResource is not GA (feature gate HPAContainerMetrics: alpha and off by default "
        "in 1.20-1.26, beta and on by default in 1.27-1.29)",
    )
    command.add_argument("--image", help="the MLServer + wrappers image (default: the overlay's)")
    command.add_argument(
        "--image-pull-policy",
        choices=("Always", "IfNotPresent", "Never"),
        help="the model container's (default: the base's Always, so a moved tag never serves a stale "
        "image); IfNotPresent for images loaded into kind or minikube by hand",
    )
    command.add_argument(
        "--shared-memory",
        metavar="SIZE",
        help="mount a memory-backed emptyDir of SIZE (e.g. 1Gi) "
        "at /dev/shm in every container, for tensors in shared memory (the model needs "
        "parameters.extra.shared_memory: true)",
    )
    command.add_argument(
        "--node-selector",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="every pod only on nodes with this label (repeatable; added to the overlay's), e.g. "
        "slipway.dev/node=real for the local cluster's real node",
    )
    command.add_argument(
        "--toleration",
        action="append",
        default=[],
        metavar="KEY[=VALUE][:EFFECT]",
        help="every pod tolerates this taint, as `kubectl taint` writes it (repeatable; added to the overlay's), "
        "e.g. slipway.dev/node=real:NoSchedule",
    )
    command.add_argument(
        "--gpu-node-selector",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="GPU pods only on nodes with this label (repeatable; replaces the gpu overlay's "
        "nvidia.com/gpu.present=true), e.g. cloud.google.com/gke-accelerator=nvidia-l4 (GKE), "
        "eks.amazonaws.com/nodegroup=gpu (EKS), kubernetes.azure.com/accelerator=nvidia (AKS)",
    )
    command.add_argument(
        "--gpu-toleration",
        action="append",
        default=[],
        metavar="KEY[=VALUE][:EFFECT]",
        help="GPU pods tolerate this taint, as `kubectl taint` writes it (repeatable; replaces the gpu "
        "overlay's nvidia.com/gpu:NoSchedule), e.g. sku=gpu:NoSchedule (AKS)",
    )
    command.add_argument(
        "--trt-cache-claim",
        metavar="PVC",
        help="keep TensorRT's engines on this "
        "PersistentVolumeClaim (ReadWriteMany for several replicas) instead of the gpu overlay's "
        "per-pod emptyDir, so restarted and new pods skip the engine build",
    )
    command.add_argument(
        "--repository-api",
        default="closed",
        choices=("closed", "open"),
        help="MLServer's model repository API (index, load, unload): closed (default; HTTP 403, gRPC "
        "PERMISSION_DENIED) or open to loopback callers and bearer-token holders (needs "
        "--repository-token-secret)",
    )
    command.add_argument(
        "--repository-token-secret",
        metavar="NAME",
        help="the Secret (in --namespace) whose key "
        "'token' holds the repository API's bearer token; the pods read it through secretKeyRef",
    )
    command.add_argument("--namespace", type=namespace_argument, default=DEFAULT_NAMESPACE, help="where the model runs")
    command.add_argument(
        "--ingress-namespace",
        type=namespace_argument,
        default=DEFAULT_INGRESS_NAMESPACE,
        help="where the gateway that calls the model runs: the NetworkPolicy admits the inference "
        f"ports from there and from the model's own namespace (default {DEFAULT_INGRESS_NAMESPACE})",
    )
    command.add_argument(
        "--monitoring-namespace",
        type=namespace_argument,
        default=DEFAULT_MONITORING_NAMESPACE,
        help=f"where Prometheus runs: the only source admitted on the metrics port (default {DEFAULT_MONITORING_NAMESPACE})",
    )
    command.add_argument(
        "--split",
        choices=("cpu-gpu",),
        help="cpu-gpu: decoding and top-k in pods of their own "
        "around the model's, each scaled on its own (a Seldon graph; docs/manifests.md)",
    )
    command.add_argument(
        "--frontends",
        type=int,
        metavar="N",
        help="N serving processes per pod feeding one session "
        "host ($SLIPWAY_FRONTENDS over the model's frontends setting), the pod's CPU request and limit "
        "raised to N+1 and 2(N+1) (docs/manifests.md); for a GPU one event loop cannot keep busy",
    )
    command.add_argument(
        "--dashboard",
        action="store_true",
        help="also render the model's Grafana dashboard: a "
        "ConfigMap labelled grafana_dashboard=1, which Grafana's dashboard sidecar loads",
    )
    command.add_argument(
        "--kustomize",
        default="auto",
        choices=("auto", "kubectl", "builtin"),
        help="build with kubectl kustomize (auto: where installed) or Slipway's own renderer",
    )
    command.add_argument(
        "--out",
        type=Path,
        help="output folder (default build/manifests/<overlay>, kserve-<overlay> for --engine kserve; "
        "for an overlay folder, its last two parts: build/tune/overlay -> tune-overlay)",
    )


def _models(args: argparse.Namespace):

    root = args.storage_root
    if args.version_record:
        main = ModelVersion.from_record_file(args.version_record, uri=args.model_uri, storage_root=root)
    else:
        main = ModelVersion.from_artifact(
            args.model_dir or DEMO_ARTIFACT_DIR, version=args.version, uri=args.model_uri, storage_root=root
        )
    canary = (
        ModelVersion.from_record_file(args.canary_record, uri=args.canary_model_uri, storage_root=root)
        if args.canary_record
        else None
    )
    return main, canary


def _folder_name(overlay: str) -> str:
    """Where under build/manifests an overlay renders: its name, or for a folder of one's own its last two
    parts (`build/tune/overlay` -> `tune-overlay`), so that the tuner's and the recommender's do not collide."""

    return overlay if overlay in OVERLAYS else "-".join(Path(overlay).resolve().parts[-2:])


def _render_options(args: argparse.Namespace, main, canary):
    """The arguments' `RenderOptions`, made once for either engine's renderer."""

    return RenderOptions(
        model=main,
        canary=canary,
        canary_percent=args.canary_percent,
        image=args.image,
        image_pull_policy=args.image_pull_policy,
        namespace=args.namespace,
        ingress_namespace=args.ingress_namespace,
        monitoring_namespace=args.monitoring_namespace,
        autoscaling_mode=args.autoscaling,
        engine=args.kustomize,
        shared_memory=args.shared_memory,
        hpa_metric_source=args.hpa_metric_source,
        gpu_node_selector=tuple(args.gpu_node_selector),
        gpu_tolerations=tuple(args.gpu_toleration),
        node_selector=tuple(args.node_selector),
        tolerations=tuple(args.toleration),
        trt_cache_claim=args.trt_cache_claim,
        repository_api=args.repository_api,
        repository_token_secret=args.repository_token_secret,
        dashboard=args.dashboard,
        split_mode=args.split,
        frontends_count=args.frontends,
    )


def render_validated(args: argparse.Namespace):
    """Render and validate; write the manifests and `reports/manifests.json` only when they are valid."""
    from deployments.render.validate import validate_documents

    try:
        main, canary = _models(args)
        options = _render_options(args, main, canary)
        rendering: Callable[[str | Path, RenderOptions], Rendered] = render
        if getattr(args, "engine", "seldon") == "kserve":
            from deployments.kserve.render import render_kserve

            rendering = render_kserve
        rendered = rendering(args.overlay, options)
        warnings = [
            warning
            for predictor, version in rendered.models.items()
            if (warning := busy_cpu_warning(rendered.docs, predictor, version.local_dir))
        ] + rendered.warnings
    except (RecordError, RenderError, KustomizeError) as err:
        raise UserError(str(err)) from err
    except (SettingsError, FileProblem) as err:
        raise UserError(f"{err}: the model would not load, nothing written") from err
    for warning in warnings:
        console.print(f"[yellow]warning:[/] {warning}", soft_wrap=True)
    if getattr(args, "engine", "seldon") == "kserve":
        from deployments.kserve.validate import validate_kserve

        report = validate_kserve(rendered.docs)
    else:
        report = validate_documents(rendered.docs)
    for skipped in report.skipped:
        console.print(f"[yellow]skipped:[/] {skipped}", soft_wrap=True)
    if not report.ok:
        raise UserError("rendered manifests are invalid, nothing written: " + "; ".join(report.errors))
    folder = _folder_name(str(args.overlay))
    out = args.out or MANIFESTS_DIR / (f"kserve-{folder}" if getattr(args, "engine", "seldon") == "kserve" else folder)
    paths = write_manifests(rendered, out)
    write_report(
        "manifests",
        {
            **rendered.summary(),
            "out_dir": str(out),
            "files": [str(p) for p in paths],
            "validation": report.as_dict(),
            "warnings": warnings,
        },
    )
    versions = ", ".join(f"{p} -> {m.name} v{m.version}" for p, m in rendered.models.items())
    console.print(
        f"{len(rendered.docs)} resources ({versions}; autoscaling {rendered.autoscaling}, "
        f"kustomize {rendered.engine}) -> {out}, valid ({len(report.checked)} checked"
        f"{f', {len(report.skipped)} skipped' if report.skipped else ''})",
        soft_wrap=True,
    )
    return rendered


def cmd_render(args: argparse.Namespace) -> int:
    render_validated(args)
    return 0


def register_render(commands) -> None:
    command = commands.add_parser(
        "render",
        help="render and validate the manifests into --out",
        description="Render an overlay for one model version and validate it.",
    )
    _add_render_arguments(command)
    command.set_defaults(func=cmd_render)


# ---------------------------------------------------------------- deploy / undeploy


def _connect(nothing_done: str):
    """The cluster's API client; without one, one line saying what did not happen (`nothing_done`) and what to do."""

    try:
        return connect(on_note=lambda note: console.print(note, soft_wrap=True))
    except ClusterUnavailable as err:
        raise UserError(f"{err}: {nothing_done}. A local cluster: `make cluster`") from err


class _ConsoleProgress:
    """A rollout's progress on the console: warnings, what was applied, a spinner while it waits."""

    def warning(self, text: str) -> None:
        console.print(f"[yellow]warning:[/] {text}", soft_wrap=True)

    def applied(self, names: list[str], namespace: str) -> None:
        console.print(f"applied {', '.join(names)} to namespace {namespace}", soft_wrap=True)

    @contextmanager
    def waiting(self, name: str, timeout_s: float) -> Iterator[Callable[[str], None]]:
        with console.status(f"waiting up to {timeout_s:.0f}s for {name} to serve the new version") as status:
            yield lambda state: status.update(f"{name}: {state}")

    def rolled_out(self, rendered, url: str | None) -> None:
        state = "Ready" if rendered.summary().get("serving_engine") == "kserve" else "Available"
        console.print(
            f"[green]{rendered.name} is {state}[/], its Ready pods serving "
            f"{', '.join(f'{p} v{m.version}' for p, m in rendered.models.items())}",
            soft_wrap=True,
        )
        if url:
            console.print(f"inside the cluster: POST {url}", soft_wrap=True)


def cmd_deploy(args: argparse.Namespace) -> int:
    # no cluster: one line, before any work
    api = None if args.dry_run == "client" else _connect("nothing was applied. To render only, run `make manifests`")
    rendered = render_validated(args)
    if api is None:
        console.print(
            f"client dry run, nothing sent: would apply {', '.join(_names(rendered.docs))} to namespace {args.namespace}",
            soft_wrap=True,
        )
        return 0
    try:
        rollout = Rollout(
            rendered=rendered,
            dry_run=args.dry_run,
            wait_s=args.wait,
            check_images=args.check_image,
            storage_endpoint=args.storage_endpoint,
            pvc_mount=args.pvc_mount,
        )
        result = roll_out(api, rollout, _ConsoleProgress())
    except DeployError as err:
        raise UserError(str(err)) from err
    if result.dry_run:
        console.print(f"server dry run passed, nothing applied: {', '.join(result.applied)}", soft_wrap=True)
        return 0
    for line in result.served:
        console.print(line, soft_wrap=True)
    if args.engine == "kserve":  # RawDeployment: the predictor's Service is the address, no gateway in front
        console.print(f"inference inside the cluster: POST {rendered.inference_path}", soft_wrap=True)
    else:
        console.print(f"inference: POST <your Seldon gateway>{rendered.inference_path}", soft_wrap=True)
    print(rendered.inference_path)
    return 0


def _names(docs: list[dict]) -> list[str]:
    return [f"{doc['kind']}/{doc['metadata']['name']}" for doc in docs]


def register_deploy(commands) -> None:
    command = commands.add_parser(
        "deploy",
        help="render, validate, server-side apply to the current kubectl context, wait",
        description="Render and validate, then server-side apply and wait until Available.",
    )
    _add_render_arguments(command)
    add_storage_arguments(command)
    command.add_argument(
        "--dry-run",
        choices=("none", "server", "client"),
        default="none",
        help="server: the API server checks everything, nothing is stored; client: render and validate only",
    )
    command.add_argument(
        "--wait",
        type=float,
        default=DEFAULT_WAIT_S,
        metavar="SECONDS",
        help=f"how long to wait for the SeldonDeployment to be Available, or the InferenceService Ready, with the "
        f"version on every pod (default {DEFAULT_WAIT_S:.0f}; 0: do not wait)",
    )
    command.add_argument(
        "--check-image",
        action="store_true",
        help="before anything is applied, check that every model container's image resolves in its "
        "registry, with the `docker login` credentials of the Docker config (not a client dry run)",
    )
    command.set_defaults(func=cmd_deploy)


def cmd_upload(args: argparse.Namespace) -> int:
    try:
        version = _models(argparse.Namespace(**{**vars(args), "canary_record": None, "canary_model_uri": None}))[0]
    except RecordError as err:
        raise UserError(str(err)) from err
    try:
        api = connect(on_note=lambda note: console.print(note, soft_wrap=True))
    except ClusterUnavailable:
        api = None  # no cluster to read the Secret from: the environment's credentials
    place_models(api, [(version, args.secret)], args)
    print(version.uri)
    return 0


def register_upload(commands) -> None:
    command = commands.add_parser(
        "upload",
        help="put a version's artifact folder at its modelUri and verify it",
        description="Upload a version where the cluster's storage initializer pulls it "
        "(deploy does this itself), with the storage Secret's credentials.",
    )
    source = command.add_mutually_exclusive_group()
    source.add_argument("--version-record", type=Path, help="the model store's version record")
    source.add_argument("--model-dir", type=Path, help=f"an unpublished artifact folder (default {DEMO_ARTIFACT_DIR})")
    command.add_argument("--version", help="with --model-dir: the version to call it (default: its digest's first 12 hex)")
    command.add_argument("--model-uri", help="where to put it, replacing the record's (s3://, gs://, pvc://)")
    command.add_argument(
        "--storage-root",
        default=DEFAULT_STORAGE_ROOT,
        help=f"without a URI of its own: <root>/<name>/<version> (default {DEFAULT_STORAGE_ROOT})",
    )
    command.add_argument("--namespace", type=namespace_argument, default=DEFAULT_NAMESPACE, help="where the Secret is")
    command.add_argument("--secret", default=DEFAULT_SECRET, help=f"the storage Secret (default {DEFAULT_SECRET})")
    add_storage_arguments(command)
    command.set_defaults(func=cmd_upload)


def cmd_secret(args: argparse.Namespace) -> int:
    try:
        if args.engine == "kserve":
            from deployments.kserve.render import STORAGE_SECRET
            from deployments.kserve.storage import s3_secret

            if args.scheme != "s3":
                raise SecretError(f"--engine kserve writes the Secret for s3:// URIs only, not {args.scheme}://")
            args.name = args.name or STORAGE_SECRET
            manifest, used = s3_secret(args.name, args.namespace, os.environ)
        else:
            settings, used = settings_from_environment(args.scheme, os.environ)
            args.name = args.name or DEFAULT_SECRET
            manifest = secret_manifest(args.name, args.namespace, settings)
    except SecretError as err:
        raise UserError(str(err)) from err
    keys = ", ".join(sorted(manifest["data"]))
    source = f"from {', '.join(used)}" if used else "no keys in the environment: pods authenticate as their service account"
    if args.dry_run == "client":
        console.print(
            f"client dry run, nothing sent: Secret {args.namespace}/{args.name} would hold {keys} ({source})", soft_wrap=True
        )
        return 0
    api = _connect("no Secret was written")
    try:
        check_namespace_exists(api, args.namespace)
        apply(api, [manifest], namespace=args.namespace, dry_run=args.dry_run == "server")
    except DeployError as err:
        raise UserError(str(err)) from err
    done = "server dry run passed, nothing stored" if args.dry_run == "server" else "wrote"
    console.print(f"{done}: Secret {args.namespace}/{args.name} with {keys} ({source})", soft_wrap=True)
    return 0


def register_secret(commands) -> None:
    command = commands.add_parser(
        "secret",
        help="write the storage Secret the pods pull models with, from your environment",
        description="Write the rclone settings Seldon's storage initializer reads "
        "(RCLONE_CONFIG_<SCHEME>_*) from AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, "
        "AWS_SESSION_TOKEN, AWS_REGION, AWS_ENDPOINT_URL (s3) or "
        "GOOGLE_APPLICATION_CREDENTIALS (gs) straight to the cluster, never to a file.",
    )
    command.add_argument("--scheme", choices=SCHEMES, default="s3", help="the modelUri scheme it serves (default s3)")
    command.add_argument(
        "--engine",
        default="seldon",
        choices=("seldon", "kserve"),
        help="seldon: rclone's RCLONE_CONFIG_* keys (default); kserve: AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY with "
        "KServe's s3-endpoint, s3-usehttps and s3-region annotations, the Secret the rendered ServiceAccount lists",
    )
    command.add_argument(
        "--name",
        help=f"the Secret (default {DEFAULT_SECRET}, the base's envSecretRefName; with --engine kserve "
        "slipway-model-storage-kserve)",
    )
    command.add_argument("--namespace", type=namespace_argument, default=DEFAULT_NAMESPACE, help="where the Secret goes")
    command.add_argument(
        "--dry-run",
        choices=("none", "server", "client"),
        default="none",
        help="client: say which keys it would hold; server: the API server checks it, nothing stored",
    )
    command.set_defaults(func=cmd_secret)


def cmd_undeploy(args: argparse.Namespace) -> int:
    if args.wait < 0:
        raise UserError(f"--wait {args.wait:g}: give the seconds to wait, 0 or more (0: do not wait); nothing was deleted")
    api = _connect(
        f"nothing was deleted. Point kubectl's current context (or KUBECONFIG) at the cluster where "
        f"{args.name or 'the model'} runs in namespace {args.namespace}"
    )
    try:
        name = args.name or deployed_model(args.namespace, flag="--name", target="undeploy", api=api)
    except ModelNotFound as err:
        raise UserError(str(err)) from err
    deleted = delete(api, namespace=args.namespace, model=name)
    if not deleted.names:
        console.print(f"nothing of Slipway's for model {name} in namespace {args.namespace}", soft_wrap=True)
        return 0
    console.print(f"deleting {', '.join(deleted.names)} from namespace {args.namespace}", soft_wrap=True)
    if not args.wait:
        console.print("not waiting (--wait 0): the operator's objects and the pods may still be going", soft_wrap=True)
        return 0
    try:
        waited = wait_gone(api, namespace=args.namespace, deleted=deleted, timeout_s=args.wait)
    except DeployError as err:
        raise UserError(str(err)) from err
    console.print(
        f"gone after {waited:.0f}s: what deploy applied, the operator's Deployments, Services, HPAs and budgets, and the pods",
        soft_wrap=True,
    )
    return 0


def register_undeploy(commands) -> None:
    command = commands.add_parser(
        "undeploy",
        help="delete what deploy applied for one model",
        description="Delete the SeldonDeployment (or KServe's InferenceService and ServingRuntime), HPA, budget, "
        "PodMonitor, NetworkPolicy and ServiceAccount Slipway applied for one model (found by its labels), and wait "
        "until they, the operator's Deployments, Services, HPAs and budgets, and the pods are gone.",
    )
    command.add_argument(
        "--name", help="the model (default: the one model Slipway deployed in the namespace, found by its labels)"
    )
    command.add_argument("--namespace", type=namespace_argument, default=DEFAULT_NAMESPACE, help="where the model runs")
    command.add_argument(
        "--wait",
        type=float,
        default=UNDEPLOY_TIMEOUT_S,
        metavar="SECONDS",
        help=f"how long to wait until the operator's objects and the pods are gone (default {UNDEPLOY_TIMEOUT_S:.0f}; "
        "0: do not wait)",
    )
    command.set_defaults(func=cmd_undeploy)


def _deployed_model_for_recommend(namespace: str) -> str:
    """recommend's --model default, from the cluster (sizing asks none itself: the import layers keep it off rollout)."""
    try:
        return deployed_model(
            namespace, flag="--model", target="recommend", on_note=lambda note: console.print(note, soft_wrap=True)
        )
    except ModelNotFound as err:
        raise UserError(str(err)) from err


def register_recommend(commands) -> None:
    add_recommend(commands, find_model=_deployed_model_for_recommend)


REGISTRARS: list[Callable] = [
    register_render,
    register_deploy,
    register_upload,
    register_secret,
    register_undeploy,
    register_recommend,
    register_canary_judge,
    register_canary,
    register_image,
    register_alerts,
]


def register(commands: argparse._SubParsersAction) -> None:
    """Add `python -m deployments`'s subcommands to `commands` (the `slipway` command reaches them through slipway.command)."""
    for register in REGISTRARS:
        register(commands)


def main(argv: Sequence[str] | None = None) -> int:
    return dispatch(PROG, __doc__.splitlines()[0], register, argv)
