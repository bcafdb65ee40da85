"""`python -m localcluster build|up|down|status|prove-hpa|load-image` (`make cluster`): the local control
plane from a checkout's command line."""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from pathlib import Path

from slipway.cli import UserError, console, dispatch
from slipway.cluster_names import DEFAULT_NAMESPACE

PROG = "python -m localcluster"


def _folder(args: argparse.Namespace) -> Path:
    from localcluster.control_plane import default_state_dir

    return args.dir or default_state_dir()


def cmd_up(args: argparse.Namespace) -> int:
    from deployments.render.records import DEFAULT_STORAGE_ROOT
    from deployments.rollout.storage_secret import DEFAULT_SECRET
    from localcluster.build import BuildError
    from localcluster.components import KEDA_VERSION, KSERVE, KUBERNETES_VERSION, SELDON_OPERATOR_VERSION
    from localcluster.control_plane import ClusterError, up
    from localcluster.node import NODE_LABEL, NODE_LABEL_VALUE
    from localcluster.objects import NODES

    began = time.monotonic()
    try:
        with console.status("starting the local cluster") as status:
            state = up(
                _folder(args),
                api_port=args.port,
                real_node=args.real_node,
                with_keda=args.keda,
                with_kserve=args.kserve,
                on_step=lambda step: status.update(step),
            )
    except (ClusterError, BuildError) as err:
        raise UserError(str(err)) from err
    console.print(
        f"[green]local cluster ready[/] in {time.monotonic() - began:.0f}s: Kubernetes {KUBERNETES_VERSION} at "
        f"{state.server}, {len(NODES)} kwok nodes, Seldon Core operator {SELDON_OPERATOR_VERSION} with its "
        f"webhooks, metrics-server, {f'KEDA {KEDA_VERSION} (operator, metrics API server, webhooks), ' if args.keda else ''}"
        f"{f'KServe {KSERVE.version} (controller, webhooks; RawDeployment), ' if args.kserve else ''}"
        f"an S3 store (versitygw) at {state.object_store['endpoint']}; "
        f"{len(state.processes)} processes, logs in {state.folder / 'logs'}",
        soft_wrap=True,
    )
    if "unavailable" in state.node:  # one line, and the kwok cluster is up regardless
        console.print(f"[yellow]no real node[/]: {state.node['unavailable']}", soft_wrap=True)
    elif state.node:
        console.print(
            f"real node {state.node['name']} Ready: kubelet {KUBERNETES_VERSION}, {state.node['containerd']}, "
            f"{state.node['runc']}; pods on {state.node['subnet']} (bridge {state.node['bridge']}); only pods that "
            f"tolerate the taint {NODE_LABEL}={NODE_LABEL_VALUE}:NoSchedule land there; they reach the S3 store at "
            f"{state.object_store['pods_endpoint']}, which Secret {DEFAULT_SECRET} names",
            soft_wrap=True,
        )
    console.print(
        f"namespace {DEFAULT_NAMESPACE} holds Secret {DEFAULT_SECRET} for {DEFAULT_STORAGE_ROOT}: `make deploy` uploads "
        f"the model there and deploys it while the cluster runs; kubectl: export KUBECONFIG={state.kubeconfig}",
        soft_wrap=True,
    )
    print(state.kubeconfig)
    return 0


def cmd_build(args: argparse.Namespace) -> int:
    from localcluster.build import BuildError, build_all
    from localcluster.components import COMPONENTS

    began = time.monotonic()
    try:
        # an opt-in component (keda, kserve) when its flag of the same name asks for it
        folders = build_all(
            tuple(component for component in COMPONENTS if not component.optional or getattr(args, component.name))
        )
    except BuildError as err:
        raise UserError(str(err)) from err
    console.print(
        f"{len(folders)} components built or cached in {time.monotonic() - began:.0f}s: "
        f"{', '.join(str(folder) for folder in folders.values())}",
        soft_wrap=True,
    )
    return 0


def cmd_down(args: argparse.Namespace) -> int:
    from localcluster.control_plane import down

    folder = _folder(args)
    began = time.monotonic()
    stopped = down(folder)
    if stopped:
        console.print(f"stopped {', '.join(stopped)} and removed {folder} in {time.monotonic() - began:.1f}s", soft_wrap=True)
    else:
        console.print(f"no local cluster runs from {folder}: nothing to stop", soft_wrap=True)
    return 0


def cmd_prove_hpa(args: argparse.Namespace) -> int:
    from kubernetes import client

    from localcluster.autoscaling_proof import ProofFailed, prove, write
    from localcluster.control_plane import running_cluster
    from localcluster.objects import client as api_client

    state = running_cluster(_folder(args))
    if state is None:
        raise UserError(
            f"no local cluster runs from {_folder(args)}: its simulated usage is what this drives; "
            "start one with `make cluster` and deploy a model (make deploy AUTOSCALING=behavior)"
        )
    api = api_client(state.kubeconfig)
    names = [
        meta.name
        for hpa in client.AutoscalingV2Api(api).list_namespaced_horizontal_pod_autoscaler(args.namespace).items
        if (meta := hpa.metadata) is not None
    ]
    hpa = args.hpa or (names[0] if len(names) == 1 else None)
    if hpa is None or hpa not in names:
        raise UserError(f"namespace {args.namespace} has HPAs {names or 'none'}: name one with --hpa (deploy a model first)")
    try:
        result = prove(
            api,
            namespace=args.namespace,
            hpa_name=hpa,
            container=args.container,
            timeout_s=args.timeout,
            on_sample=lambda s: console.print(
                f"{s.seconds:6.1f}s usage {s.phase:4} replicas {s.replicas} ready {s.ready} utilization {s.utilization}%"
            ),
        )
    except ProofFailed as err:
        raise UserError(str(err)) from err
    path = write(result)
    console.print(
        f"[green]HPA {args.namespace}/{hpa} scaled {result['min_replicas']} -> {result['max_replicas']} -> "
        f"{result['min_replicas']}[/]; {path} and {path.with_suffix('.png')}",
        soft_wrap=True,
    )
    return 0


def cmd_load_image(args: argparse.Namespace) -> int:
    """Import a serving image `make image` built into the real node's containerd, where no registry holds it."""
    from deployments.rollout import image_build
    from localcluster.control_plane import running_cluster
    from localcluster.node import NodeError, load_image

    state = running_cluster(_folder(args))
    if state is None:
        raise UserError(f"no local cluster runs from {_folder(args)}: start one with a real node (make cluster NODE=real)")
    if not state.node or "unavailable" in state.node:
        why = f" ({state.node['unavailable']})" if state.node else ""
        raise UserError(f"the local cluster in {state.folder} has no real node{why}: start it with make cluster NODE=real")
    try:
        image_build.buildah(image_build.CACHE_DIR, "images", "--quiet", args.image)
    except image_build.ImageBuildError as err:
        raise UserError(
            f"{args.image} is not in the image store {image_build.CACHE_DIR / 'storage'}: build it with make image"
        ) from err
    try:
        seconds = load_image(state.node, args.image, state.folder / "node" / "image-import")
    except NodeError as err:
        raise UserError(str(err)) from err
    console.print(
        f"imported {args.image} into {state.node['name']}'s containerd in {seconds:.0f}s; deploy onto the node with "
        f"IMAGE={args.image} IMAGE_PULL_POLICY=IfNotPresent (docs/local-cluster.md)",
        soft_wrap=True,
    )
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    from localcluster.control_plane import ClusterState

    state = ClusterState.load(_folder(args))
    if state is None or not state.processes:
        console.print(f"no local cluster recorded in {_folder(args)}; start one with `make cluster`", soft_wrap=True)
        return 1
    alive = {process.pid for process in state.alive()}
    for process in state.processes:
        console.print(f"{process.name:24} pid {process.pid:<8} {'running' if process.pid in alive else '[red]stopped[/]'}")
    console.print(f"KUBECONFIG={state.kubeconfig}", soft_wrap=True)
    if state.object_store:
        pods = (
            f", for the real node's pods at {state.object_store['pods_endpoint']}"
            if "pods_endpoint" in state.object_store
            else ""
        )
        console.print(
            f"S3 store at {state.object_store['endpoint']}{pods} (keys in {state.folder / 'state.json'})", soft_wrap=True
        )
    return 0 if len(alive) == len(state.processes) else 1


def register(actions: argparse._SubParsersAction) -> None:
    """Add the local cluster's actions (build, up, down, status, prove-hpa, load-image) to its parser's `actions`."""
    from localcluster.control_plane import DEFAULT_API_PORT

    for name, func, text in (
        ("build", cmd_build, "build the binaries from Go modules into the cache (once)"),
        ("up", cmd_up, "build what is missing, start everything, write the kubeconfig"),
        ("down", cmd_down, "stop every process by its PID and remove the cluster's folder"),
        ("status", cmd_status, "which processes run (exit 1 when any is missing)"),
    ):
        action = actions.add_parser(name, help=text, description=text)
        if name != "build":  # the binaries' cache is one per machine (SLIPWAY_CLUSTER_CACHE)
            action.add_argument("--dir", type=Path, help="the cluster's folder (default build/cluster, or SLIPWAY_CLUSTER_DIR)")
        action.set_defaults(func=func)
        if name in ("build", "up"):
            action.add_argument(
                "--keda",
                action="store_true",
                help="also KEDA's operator, metrics API server and admission webhooks (make cluster KEDA=1; its first "
                "build takes long, docs/local-cluster.md)",
            )
            action.add_argument(
                "--kserve",
                action="store_true",
                help="also KServe's controller and admission webhooks, RawDeployment mode (make cluster KSERVE=1 or "
                "ENGINE=kserve; its first build takes long, docs/local-cluster.md)",
            )
        if name == "up":
            action.add_argument(
                "--port",
                type=int,
                default=DEFAULT_API_PORT,
                help=f"the API server's port on 127.0.0.1 (default {DEFAULT_API_PORT})",
            )
            action.add_argument(
                "--real-node",
                action="store_true",
                help="also one node that runs containers (kubelet, containerd, runc, CNI bridge; as root), tainted so "
                "that only pods tolerating it land there (make cluster NODE=real)",
            )
    prove_hpa = actions.add_parser(
        "prove-hpa",
        help="drive a deployed model's simulated CPU usage up and down and record "
        "its HPA's replicas (reports/cluster-hpa.json + PNG; cluster-hpa-kserve.json for a KServe model)",
        description="Simulated CPU usage (kwok) high until the HPA reaches its maximum, then "
        "low until it is back at its minimum, within the HPA's own behaviour.",
    )
    prove_hpa.add_argument("--dir", type=Path, help="the cluster's folder (default build/cluster, or SLIPWAY_CLUSTER_DIR)")
    prove_hpa.add_argument("--namespace", default=DEFAULT_NAMESPACE, help="where the model runs")
    prove_hpa.add_argument("--hpa", help="the HPA (default: the namespace's only one)")
    prove_hpa.add_argument(
        "--container",
        help="the container whose usage rises (default: the one the HPA's CPU "
        "ContainerResource metric reads, else the pod's first)",
    )
    prove_hpa.add_argument("--timeout", type=float, default=240.0, help="seconds each phase may take (default 240)")
    prove_hpa.set_defaults(func=cmd_prove_hpa)
    load = actions.add_parser(
        "load-image",
        help="import a serving image `make image` built into the real node's containerd (make cluster-image)",
        description="Copy an image from the store `make image` builds into (~/.cache/slipway/images) into the real "
        "node's containerd, which pulls from no registry here; pods then run it with imagePullPolicy IfNotPresent.",
    )
    load.add_argument("--dir", type=Path, help="the cluster's folder (default build/cluster, or SLIPWAY_CLUSTER_DIR)")
    load.add_argument(
        "--image",
        default="localhost/slipway/mlserver-onnx:0.1.0",
        help="the image's reference in that store (default localhost/slipway/mlserver-onnx:0.1.0, what make image builds)",
    )
    load.set_defaults(func=cmd_load_image)


def main(argv: Sequence[str] | None = None) -> int:
    return dispatch(
        PROG,
        "Start, stop or inspect the local Kubernetes control plane that `deploy` is tested on: real components "
        "on loopback, from a checkout of Slipway (not part of the installed package).",
        register,
        argv,
    )
