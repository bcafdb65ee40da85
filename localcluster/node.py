"""One real node beside the kwok nodes: containerd (with runc and the CNI plugins) and a kubelet that runs containers.

Opt-in (`make cluster NODE=real`, `cluster up --real-node`). Everything it writes lives under the cluster's folder
(`<folder>/node/`); what it makes outside it is recorded in `state.json` before it is made, so that `down` (and a
failed `up`) undoes it: a Linux bridge with the node's pod subnet and a cgroup root of its own. The settings, each
with the reason it is there, are in `kubelet_config` and `containerd_config` below and in docs/local-cluster.md.

Where this machine's kernel cannot run containers (no overlayfs, no cgroup controllers, no namespaces, not root),
`NodeUnavailable` names the missing feature or syscall in one line and the kwok cluster comes up without the node;
any other failure is a `NodeError` and stops the cluster like any component's.

The node's parts: kubelet and kube-proxy from the same k8s.io/kubernetes module as the control plane (components.py),
containerd, runc, the CNI plugins and iptables from the distribution's packages (`make node-tools`: Debian's
containerd 1.6, runc 1.1, containernetworking-plugins 1.1, iptables 1.8), and the pause image built from Kubernetes'
own pause.c in that module. kube-proxy (iptables mode) writes the machine's nat and filter tables, which are one per
machine: one real node runs at a time, and `down` removes its chains (and the kubelet's) when it stops.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import ipaddress
import json
import os
import random
import shutil
import signal
import subprocess
import tarfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from localcluster.pki import ClusterPKI
from localcluster.processes import Process, last_lines, running, stop
from slipway import atomic

NODE_NAME = "slipway-node"
NODE_LABEL = "slipway.dev/node"
NODE_LABEL_VALUE = "real"
# Only pods that tolerate this taint (and select the label) land on the real node; the rest stay on kwok's.
NODE_TAINT = {"key": NODE_LABEL, "value": NODE_LABEL_VALUE, "effect": "NoSchedule"}
PAUSE_VERSION = "3.10.1"  # build/pause/Makefile's TAG in k8s.io/kubernetes v1.35.4
PAUSE_IMAGE = f"registry.k8s.io/pause:{PAUSE_VERSION}"
RUNTIME_TOOLS = ("containerd", "containerd-shim-runc-v2", "runc", "ctr", "iptables", "iptables-save", "iptables-restore")
CNI_PLUGINS = ("bridge", "host-local", "loopback")
CNI_DIRS = (Path("/usr/lib/cni"), Path("/opt/cni/bin"))  # Debian's containernetworking-plugins, upstream's tarball
CGROUP_ROOT = Path("/sys/fs/cgroup")
CGROUP_V1_CONTROLLERS = ("cpu", "cpuacct", "cpuset", "memory", "pids")  # what the kubelet's container manager needs
POD_SUBNETS = ipaddress.IPv4Network("10.244.0.0/16")  # one /24 of it per node, unused by any route here
START_TIMEOUT_S = 60.0
READY_TIMEOUT_S = 120.0
DRAIN_TIMEOUT_S = 30.0
CAP_SYS_RESOURCE = 24  # linux/capability.h
# What `kube-proxy --cleanup` leaves in the machine's tables: the kubelet's chains (KUBE-FIREWALL, jumped to from
# INPUT and OUTPUT; its canary; the hint that tells iptables-nft from legacy), which kube-proxy also makes, and
# kube-proxy's own canary in mangle.
LEFTOVER_CHAINS = ("KUBE-FIREWALL", "KUBE-KUBELET-CANARY", "KUBE-PROXY-CANARY", "KUBE-IPTABLES-HINT")


class NodeError(RuntimeError):
    """The real node failed to start or stop: a bug or a broken installation, never hidden."""


class NodeUnavailable(NodeError):
    """This machine cannot run containers; the message names the kernel feature or syscall, in one line."""


# ------------------------------------------------------------------ what the machine needs


def check_kernel() -> None:
    """Raise NodeUnavailable naming the first kernel feature (or privilege) a real node needs and does not have."""
    if os.geteuid() != 0:
        raise NodeUnavailable("a real node needs root: mount(2), cgroups and network namespaces are root's (run as root)")
    if "overlay" not in Path("/proc/filesystems").read_text().split():
        raise NodeUnavailable("the kernel has no overlay filesystem (containerd's overlayfs snapshotter): modprobe overlay")
    if not (CGROUP_ROOT / "cgroup.controllers").exists():  # cgroup v1 (or hybrid): a hierarchy per controller
        missing = [name for name in CGROUP_V1_CONTROLLERS if not (CGROUP_ROOT / name / "tasks").exists()]
        if missing:
            raise NodeUnavailable(f"cgroup v1 controllers {', '.join(missing)} are not mounted under {CGROUP_ROOT}")
    else:
        enabled = (CGROUP_ROOT / "cgroup.controllers").read_text().split()
        missing = [name for name in ("cpu", "memory", "pids") if name not in enabled]
        if missing:
            raise NodeUnavailable(f"cgroup v2 controllers {', '.join(missing)} are not enabled in {CGROUP_ROOT}")
    # what runc does for each container: new mount, network, PID, IPC and UTS namespaces
    unshare = shutil.which("unshare")
    if unshare:
        result = subprocess.run(
            [unshare, "--mount", "--net", "--pid", "--ipc", "--uts", "--fork", "true"], capture_output=True, text=True
        )
        if result.returncode != 0:
            raise NodeUnavailable(f"unshare(CLONE_NEWNS|CLONE_NEWNET|CLONE_NEWPID|...) failed: {result.stderr.strip()}")


def check_overlay(folder: Path) -> None:
    """Mount an overlay in `folder` as containerd's snapshotter will: overlayfs refuses some upper file systems (an
    overlay itself, as in some containers), which /proc/filesystems does not tell."""
    layers = {name: folder / name for name in ("lower", "upper", "work", "merged")}
    for path in layers.values():
        path.mkdir(parents=True)
    options = f"lowerdir={layers['lower']},upperdir={layers['upper']},workdir={layers['work']}"
    result = subprocess.run(
        ["mount", "-t", "overlay", "overlay", "-o", options, str(layers["merged"])], capture_output=True, text=True
    )
    if result.returncode != 0:
        raise NodeUnavailable(f"mount(2) of an overlay under {folder} failed: {result.stderr.strip() or result.returncode}")
    subprocess.run(["umount", str(layers["merged"])], capture_output=True)
    shutil.rmtree(folder, ignore_errors=True)


def tools() -> dict[str, Path]:
    """containerd's, runc's and the CNI plugins' paths, or a NodeError saying how to install them."""
    found: dict[str, Path] = {}
    missing = []
    for name in RUNTIME_TOOLS:
        path = shutil.which(name) or shutil.which(name, path="/usr/sbin:/sbin")
        if path:
            found[name] = Path(path)
        else:
            missing.append(name)
    cni = next((folder for folder in CNI_DIRS if all((folder / name).is_file() for name in CNI_PLUGINS)), None)
    if cni is None:
        missing.append(f"the CNI plugins {', '.join(CNI_PLUGINS)} (in {' or '.join(map(str, CNI_DIRS))})")
    else:
        found["cni"] = cni
    if missing:
        raise NodeError(
            f"{', '.join(missing)} not installed: `make node-tools` installs Debian's containerd, runc, "
            "containernetworking-plugins and iptables (as root)"
        )
    return found


def check_iptables(iptables: Path) -> None:
    """kube-proxy's iptables mode needs the nat table (ip_tables/nf_tables with NAT); NodeUnavailable if it is not
    there."""
    result = subprocess.run([str(iptables), "-w", "5", "-t", "nat", "-S", "POSTROUTING"], capture_output=True, text=True)
    if result.returncode != 0:
        message = (result.stderr.strip().splitlines() or [f"exit {result.returncode}"])[-1]
        raise NodeUnavailable(f"`iptables -t nat` failed, so kube-proxy cannot route Services: {message}")


def processes_named(name: str) -> list[int]:
    """The PIDs of processes whose program is `name` (a kube-proxy or kubelet of another cluster on this machine)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                argv0 = (entry / "cmdline").read_bytes().split(b"\0")[0]
                if argv0 and os.path.basename(argv0) == os.fsencode(name) and not _zombie(int(entry.name)):
                    pids.append(int(entry.name))
    return pids


def check_no_other_node() -> None:
    """kube-proxy's chains are the machine's: a NodeError naming the running kube-proxy, if there is one."""
    if others := processes_named("kube-proxy"):
        raise NodeError(
            f"kube-proxy (pid {others[0]}) already runs on this machine and owns its iptables Service chains: stop its "
            "cluster (`make cluster-down`) before starting another real node"
        )


def has_capability(bit: int) -> bool:
    """Whether this process holds capability `bit` (root in a container or a VM's sandbox may not hold them all)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("CapEff:"):
            return bool(int(line.split()[1], 16) >> bit & 1)
    return False


def versions(found: dict[str, Path]) -> dict[str, str]:
    """The runtime's versions as its binaries report them, for the report and the start line."""
    out = {}
    for name, args in (("containerd", ["--version"]), ("runc", ["--version"])):
        result = subprocess.run([str(found[name]), *args], capture_output=True, text=True)
        out[name] = (result.stdout.strip().splitlines() or ["?"])[0]
    return out


# ------------------------------------------------------------------ the pause image


def pause_image(cache: Path, kubernetes_source: Callable[[], Path]) -> Path:
    """A docker-archive of the pause image (the pod sandbox containerd holds the pod's namespaces with), built once
    into `cache`: Kubernetes' own build/pause/linux/pause.c compiled static, as its Makefile does, in an image of one
    layer running as 65535 like upstream's. `kubernetes_source` gives the k8s.io/kubernetes module's folder."""
    folder = cache / f"pause-{PAUSE_VERSION}"
    archive = folder / "pause.tar"
    if archive.is_file():
        return archive
    gcc = shutil.which("gcc")
    if gcc is None:
        raise NodeError(
            "gcc is not installed: the pause image is compiled from Kubernetes' pause.c (apt-get install gcc libc6-dev)"
        )
    folder.mkdir(parents=True, exist_ok=True)
    binary = folder / "pause"
    source = kubernetes_source() / "build" / "pause" / "linux" / "pause.c"
    result = subprocess.run(
        [gcc, "-Os", "-Wall", "-Werror", "-static", f"-DVERSION=v{PAUSE_VERSION}", "-o", str(binary), str(source)],
        capture_output=True,
        text=True,
    )
    if result.returncode != 0:
        raise NodeError(f"gcc {source} failed: {(result.stderr.strip().splitlines() or ['no output'])[-1]}")
    subprocess.run(["strip", str(binary)], check=False)
    atomic.write_bytes(archive, docker_archive(PAUSE_IMAGE, {"/pause": binary.read_bytes()}, ["/pause"], "65535:65535"))
    return archive


def docker_archive(
    reference: str,
    files: dict[str, bytes],
    entrypoint: list[str],
    user: str,
    *,
    env: tuple[str, ...] = (),
    directories: tuple[str, ...] = (),
    labels: dict[str, str] | None = None,
) -> bytes:
    """An image of one layer in the `docker save` layout, which `ctr images import` names by its RepoTags and skopeo
    pushes: `files` executable (0755), `directories` world-writable and sticky (as /tmp is), `env` as KEY=VALUE,
    `labels` in its configuration."""
    layer_buffer = io.BytesIO()
    with tarfile.open(fileobj=layer_buffer, mode="w", format=tarfile.PAX_FORMAT) as layer:
        for name in directories:
            info = tarfile.TarInfo(name.lstrip("/"))
            info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o1777, 0
            layer.addfile(info)
        for name, data in files.items():
            info = tarfile.TarInfo(name.lstrip("/"))
            info.size, info.mode, info.mtime = len(data), 0o755, 0
            layer.addfile(info, io.BytesIO(data))
    layer_bytes = layer_buffer.getvalue()
    diff_id = hashlib.sha256(layer_bytes).hexdigest()
    config = json.dumps(
        {
            "architecture": "amd64",
            "os": "linux",
            "config": {
                "Entrypoint": entrypoint,
                "User": user,
                **({"Env": list(env)} if env else {}),
                **({"Labels": labels} if labels else {}),
            },
            "rootfs": {"type": "layers", "diff_ids": [f"sha256:{diff_id}"]},
        },
        sort_keys=True,
    ).encode()
    config_name = f"{hashlib.sha256(config).hexdigest()}.json"
    manifest = json.dumps([{"Config": config_name, "RepoTags": [reference], "Layers": [f"{diff_id}/layer.tar"]}]).encode()
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as archive:
        for name, data in ((config_name, config), (f"{diff_id}/layer.tar", layer_bytes), ("manifest.json", manifest)):
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), 0o644, 0
            archive.addfile(info, io.BytesIO(data))
    return out.getvalue()


# ------------------------------------------------------------------ network and cgroups


def _pick_subnet() -> ipaddress.IPv4Network:
    """A /24 of POD_SUBNETS that no address or route on this machine overlaps (another cluster's node included)."""
    routes = subprocess.run(["ip", "-4", "route", "show", "table", "all"], capture_output=True, text=True).stdout
    addresses = subprocess.run(["ip", "-4", "-o", "addr"], capture_output=True, text=True).stdout
    used = []
    for word in (routes + " " + addresses).split():
        with contextlib.suppress(ValueError):
            used.append(ipaddress.ip_network(word, strict=False))
    candidates = [net for net in POD_SUBNETS.subnets(new_prefix=24) if net.network_address.packed[2] >= 64]
    random.shuffle(candidates)
    for subnet in candidates:
        if not any(subnet.overlaps(net) for net in used if net.version == 4):
            return subnet
    raise NodeError(f"every /24 of {POD_SUBNETS} is routed on this machine already")


def _ip(*args: str) -> None:
    result = subprocess.run(["ip", *args], capture_output=True, text=True)
    if result.returncode != 0:
        message = result.stderr.strip()
        if "Operation not supported" in message or "Unknown device type" in message:
            raise NodeUnavailable(f"`ip {' '.join(args)}` failed: the kernel has no bridge device ({message})")
        raise NodeError(f"`ip {' '.join(args)}` failed: {message}")


def _make_bridge(name: str, gateway: str, prefix: int) -> None:
    """The CNI bridge, made before the kubelet starts: its gateway address is the node's InternalIP, which the
    kubelet must find on an interface (it refuses loopback), and the only address it listens on."""
    _ip("link", "add", "name", name, "type", "bridge")
    _ip("addr", "add", f"{gateway}/{prefix}", "dev", name)
    _ip("link", "set", name, "up")


def _cgroup_folders(root: str) -> list[Path]:
    """The cgroup root's folder in each hierarchy: one per mounted v1 controller (and the unified one), or v2's."""
    if (CGROUP_ROOT / "cgroup.controllers").exists():
        return [CGROUP_ROOT / root.lstrip("/")]
    folders = []
    for hierarchy in sorted(CGROUP_ROOT.iterdir()):
        if hierarchy.is_dir() and not hierarchy.is_symlink() and (hierarchy / "cgroup.procs").exists():
            folders.append(hierarchy / root.lstrip("/"))
    return folders


def _make_cgroup_root(root: str) -> None:
    """The kubelet's --cgroup-root, which it requires to exist: a cgroup of this node's own in every hierarchy, so
    that its pods' cgroups (<root>/kubepods/...) never meet another kubelet's on the same machine."""
    for folder in _cgroup_folders(root):
        folder.mkdir(exist_ok=True)
        for name in ("cpuset.cpus", "cpuset.mems"):  # a v1 cpuset starts empty: no task could join it
            if (folder / name).exists() and not (folder / name).read_text().strip():
                (folder / name).write_text((folder.parent / name).read_text())


def _remove_cgroup_root(root: str) -> None:
    for folder in _cgroup_folders(root):
        if not folder.is_dir():
            continue
        for path in sorted((p for p in folder.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True):
            with contextlib.suppress(OSError):
                path.rmdir()
        with contextlib.suppress(OSError):
            folder.rmdir()


# ------------------------------------------------------------------ configuration


def containerd_config(folder: Path, cni: Path, runc: Path, *, restrict_oom_score_adj: bool = False) -> str:
    """containerd 1.6's configuration (version 2), every path under `folder`: a second containerd on the machine (or
    another cluster's) shares nothing with this one. `restrict_oom_score_adj`: where root lacks CAP_SYS_RESOURCE,
    runc cannot lower a process's oom_score_adj (the pod sandbox's -998, a Guaranteed pod's -997) and every pod
    fails to start ("failed to update /proc/self/oom_score_adj: Permission denied"); containerd then raises each
    to its own score instead."""
    return f"""version = 2
root = "{folder / "root"}"
state = "{folder / "state"}"
# plugins that need block devices or filesystems this node does not use
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.devmapper"]

[grpc]
  address = "{folder / "containerd.sock"}"
[ttrpc]
  address = "{folder / "containerd.sock.ttrpc"}"
[metrics]
  address = ""
[plugins."io.containerd.internal.v1.opt"]
  path = "{folder / "opt"}"
[plugins."io.containerd.grpc.v1.cri"]
  # the pod sandbox: Kubernetes' pause.c, built here and imported at start (no registry is reachable)
  sandbox_image = "{PAUSE_IMAGE}"
  # exec, attach and port-forward streams: on loopback only, a free port
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_selinux = false
  restrict_oom_score_adj = {str(restrict_oom_score_adj).lower()}
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = "{runc}"
        # runc's own state (default /run/containerd/runc/<namespace>, shared by every containerd): in the folder, so
        # that a killed run's containers leave no state behind once the folder is removed
        Root = "{folder / "runc"}"
        # cgroupfs, as the kubelet's cgroupDriver: no systemd manages cgroups here (and both must agree)
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{cni}"
    conf_dir = "{folder / "net.d"}"
    max_conf_num = 1
"""


def cni_config(bridge: str, subnet: ipaddress.IPv4Network, gateway: str, data_dir: Path) -> dict:
    """One bridge network: each pod a veth on the node's bridge with an address of its /24 (host-local IPAM, its
    leases under the cluster's folder). No masquerading and no portmap: nothing is written to iptables, and pods are
    reached from the host through the bridge (the kubelet's probes, the tests)."""
    return {
        "cniVersion": "1.0.0",
        "name": "slipway",
        "plugins": [
            {
                "type": "bridge",
                "bridge": bridge,
                "isGateway": True,
                "ipMasq": False,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": str(subnet), "gateway": gateway}]],
                    "routes": [{"dst": "0.0.0.0/0"}],
                    "dataDir": str(data_dir),
                },
            }
        ],
    }


def kubelet_config(
    *,
    address: str,
    port: int,
    healthz_port: int,
    ca: Path,
    serving: tuple[Path, Path],
    runtime: Path,
    cgroup_root: str,
    logs: Path,
) -> dict:
    """The kubelet's KubeletConfiguration; each setting that differs from its default says why."""
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        # cgroup v1 (this machine's, and many CI runners'): Kubernetes 1.35's kubelet refuses it unless told not to
        "failCgroupV1": False,
        # no systemd runs cgroups here; containerd's runc is told the same (SystemdCgroup = false)
        "cgroupDriver": "cgroupfs",
        # a cgroup of this node's own (made before the kubelet starts): pod cgroups never meet another kubelet's
        "cgroupRoot": cgroup_root,
        "cgroupsPerQOS": True,
        "enforceNodeAllocatable": ["pods"],
        # a developer's machine may have swap: run anyway, and give containers none (the kubelet's default behaviour)
        "failSwapOn": False,
        "memorySwap": {"swapBehavior": "NoSwap"},
        "containerRuntimeEndpoint": f"unix://{runtime}",
        # served on the bridge's gateway address only (not 0.0.0.0), with a certificate from the cluster's CA that
        # the API server and metrics-server check; callers must hold a client certificate from that CA
        "address": address,
        "port": port,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": healthz_port,
        "tlsCertFile": str(serving[0]),
        "tlsPrivateKeyFile": str(serving[1]),
        "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": False}, "x509": {"clientCAFile": str(ca)}},
        # every client certificate the CA signs is an administrator's or a component's: no per-request check
        "authorization": {"mode": "AlwaysAllow"},
        "registerWithTaints": [NODE_TAINT],
        "podLogsDir": str(logs),
        # a shared disk is someone else's to fill: evict only when nearly full, and never delete images on its own
        # (the node's images are imported, not pulled: a deleted one could not come back)
        "evictionHard": {
            "memory.available": "100Mi",
            "nodefs.available": "1%",
            "imagefs.available": "1%",
            "nodefs.inodesFree": "1%",
        },
        "imageGCHighThresholdPercent": 100,
        "maxPods": 20,
        "serializeImagePulls": False,
        "resolvConf": "/etc/resolv.conf",
        "staticPodPath": "",
        "shutdownGracePeriod": "0s",
    }


def kube_proxy_config(*, kubeconfig: Path, cluster_cidr: str, node_ip: str, healthz_port: int, metrics_port: int) -> dict:
    """kube-proxy's KubeProxyConfiguration; each setting that differs from its default says why."""
    return {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "clientConnection": {"kubeconfig": str(kubeconfig)},
        "hostnameOverride": NODE_NAME,  # the Node it reads its addresses from, as the kubelet registered it
        # iptables (not nftables): Debian's iptables (its nf_tables backend) is what `make node-tools` installs and
        # what the kubelet already uses; the nftables mode needs the `nft` tool besides
        "mode": "iptables",
        # traffic to a ClusterIP from outside the node's pod /24 (the host, the tests) is masqueraded to the bridge's
        # address, so that the pod's reply comes back through the node
        "detectLocalMode": "ClusterCIDR",
        "clusterCIDR": cluster_cidr,
        # NodePorts on the node's own address only (default: every address of the machine)
        "nodePortAddresses": [f"{node_ip}/32"],
        # no NodePorts on 127.0.0.1: they need route_localnet=1, a machine-wide sysctl
        "iptables": {"localhostNodePorts": False},
        # 0: leave the machine's conntrack table size and timeouts as they are (machine-wide sysctls)
        "conntrack": {"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s"},
        # served on loopback, on free ports (defaults: 0.0.0.0:10256 and 127.0.0.1:10249)
        "healthzBindAddress": f"127.0.0.1:{healthz_port}",
        "metricsBindAddress": f"127.0.0.1:{metrics_port}",
        # root without CAP_SYS_RESOURCE cannot lower it to the default -999
        "oomScoreAdj": 0,
    }


def _kubeconfig(path: Path, server: str, ca: Path, client: tuple[Path, Path]) -> None:
    atomic.write_json(
        path,
        {
            "apiVersion": "v1",
            "kind": "Config",
            "current-context": "node",
            "clusters": [{"name": "local", "cluster": {"server": server, "certificate-authority": str(ca)}}],
            "users": [{"name": "node", "user": {"client-certificate": str(client[0]), "client-key": str(client[1])}}],
            "contexts": [{"name": "node", "context": {"cluster": "local", "user": "node"}}],
        },
    )
    path.chmod(0o600)


# ------------------------------------------------------------------ start


def ctr(record: dict, *args: str, timeout_s: float = 600.0, namespace: str = "k8s.io") -> subprocess.CompletedProcess:
    """`ctr` against this node's containerd, in the namespace the CRI plugin (so the kubelet) uses."""
    return subprocess.run(
        [record["ctr"], "--address", record["socket"], "--namespace", namespace, *args],
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )


def import_archive(record: dict, archive: Path) -> None:
    """Import a docker-archive or OCI archive into the node's containerd (unpacked for the overlayfs snapshotter)."""
    result = ctr(record, "images", "import", str(archive))
    if result.returncode != 0:
        raise NodeError(f"ctr images import {archive} failed: {(result.stderr.strip().splitlines() or ['?'])[-1]}")


def load_image(record: dict, reference: str, work: Path) -> float:
    """Copy `reference` (e.g. localhost/slipway/mlserver-onnx:0.1.0) from the image store `make image` builds into
    (deployments/rollout/image_build.py) into the node's containerd, through a docker-archive; the seconds it took."""
    from deployments.rollout import image_build

    began = time.monotonic()
    work.mkdir(parents=True, exist_ok=True)
    archive = work / "image.tar"
    try:
        try:
            image_build.buildah(image_build.CACHE_DIR, "push", "--quiet", reference, f"docker-archive:{archive}:{reference}")
        except image_build.ImageBuildError as err:
            raise NodeError(f"copying {reference} out of {image_build.CACHE_DIR / 'storage'} failed: {err}") from err
        import_archive(record, archive)
    finally:
        archive.unlink(missing_ok=True)
    return time.monotonic() - began


def _wait(process: Process, ready: Callable[[], bool], what: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not running(process):
            raise NodeError(f"{process.name} exited while starting: {last_lines(process)} (log: {process.log})")
        with contextlib.suppress(Exception):
            if ready():
                return
        time.sleep(0.5)
    raise NodeError(f"{process.name} did not become {what} within {timeout_s:.0f}s: {last_lines(process)} (log: {process.log})")


def start(
    *,
    folder: Path,
    server: str,
    pki: ClusterPKI,
    kubelet: Path,
    kube_proxy: Path,
    pause_archive: Callable[[], Path],
    launch: Callable[[str, Path, list[str]], Process],
    record: dict,
    save: Callable[[], None],
    free_port: Callable[[], int],
    api,
    on_step: Callable[[str], None] = lambda step: None,
) -> None:
    """Start containerd and the kubelet, wait until the node is Ready, then start kube-proxy and wait until it has
    written its chains. `record` (the state's `node`) is filled and saved before each thing is made outside `folder`,
    so that `clean_up` finds it; `launch` starts and records a process."""
    check_kernel()
    found = tools()
    check_iptables(found["iptables"])
    check_no_other_node()
    node = folder / "node"
    node.mkdir(mode=0o700)
    check_overlay(node / "overlay-check")
    identity = hashlib.sha256(str(folder.resolve()).encode()).hexdigest()[:8]
    subnet = _pick_subnet()
    gateway = str(next(subnet.hosts()))
    record.update(
        name=NODE_NAME,
        bridge=f"slw{identity}",  # Linux's 15-character limit; one per cluster folder
        subnet=str(subnet),
        address=gateway,
        cgroup_root=f"/slipway-{identity}",
        socket=str(node / "containerd" / "containerd.sock"),
        ctr=str(found["ctr"]),
        # the kubelet writes iptables chains too: `clean_up` removes them, and kube-proxy's, with this binary
        kube_proxy=str(kube_proxy),
        **versions(found),
    )
    save()
    on_step(f"making the real node's bridge {record['bridge']} ({subnet}) and cgroup {record['cgroup_root']}")
    _make_bridge(record["bridge"], gateway, subnet.prefixlen)
    _make_cgroup_root(record["cgroup_root"])

    on_step("starting containerd")
    runtime = node / "containerd"
    (runtime / "net.d").mkdir(parents=True)
    atomic.write_json(
        runtime / "net.d" / "10-slipway.conflist", cni_config(record["bridge"], subnet, gateway, node / "cni-leases")
    )
    config = runtime / "config.toml"
    config.write_text(
        containerd_config(runtime, found["cni"], found["runc"], restrict_oom_score_adj=not has_capability(CAP_SYS_RESOURCE))
    )
    # the shims (containerd-shim-runc-v2) are found on PATH, beside containerd
    containerd = launch("containerd", found["containerd"], [f"--config={config}", "--log-level=warn"])
    _wait(containerd, lambda: ctr(record, "version", timeout_s=5).returncode == 0, "serving", START_TIMEOUT_S)
    import_archive(record, pause_archive())

    on_step("starting the kubelet")
    client, serving = pki.sign_node(NODE_NAME, gateway)
    kubeconfig = node / "kubelet.kubeconfig"
    _kubeconfig(kubeconfig, server, pki.ca.cert, (client.cert, client.key))
    record["kubelet_port"] = str(free_port())
    kubelet_file = node / "kubelet.json"
    atomic.write_json(
        kubelet_file,
        kubelet_config(
            address=gateway,
            port=int(record["kubelet_port"]),
            healthz_port=(healthz := free_port()),
            ca=pki.ca.cert,
            serving=(serving.cert, serving.key),
            runtime=Path(record["socket"]),
            cgroup_root=record["cgroup_root"],
            logs=node / "pod-logs",
        ),
    )
    save()
    process = launch(
        "kubelet",
        kubelet,
        [
            f"--config={kubelet_file}",
            f"--kubeconfig={kubeconfig}",
            f"--root-dir={node / 'kubelet'}",  # not /var/lib/kubelet: pods' volumes and checkpoints stay in the folder
            f"--cert-dir={node / 'kubelet-pki'}",
            f"--node-ip={gateway}",
            f"--hostname-override={NODE_NAME}",
            f"--node-labels={NODE_LABEL}={NODE_LABEL_VALUE}",
            "--v=1",
        ],
    )
    import urllib.request

    _wait(
        process,
        lambda: urllib.request.urlopen(f"http://127.0.0.1:{healthz}/healthz", timeout=2).status == 200,
        "healthy",
        START_TIMEOUT_S,
    )
    _wait(process, lambda: node_ready(api), "a Ready node", READY_TIMEOUT_S)
    _start_kube_proxy(node, server, pki, kube_proxy, launch, record, free_port, found["iptables"], on_step)


def _start_kube_proxy(
    node: Path,
    server: str,
    pki: ClusterPKI,
    binary: Path,
    launch: Callable[[str, Path, list[str]], Process],
    record: dict,
    free_port: Callable[[], int],
    iptables: Path,
    on_step: Callable[[str], None],
) -> None:
    on_step("starting kube-proxy")
    client = pki.sign_kube_proxy()
    kubeconfig = node / "kube-proxy.kubeconfig"
    _kubeconfig(kubeconfig, server, pki.ca.cert, (client.cert, client.key))
    config = node / "kube-proxy.json"
    atomic.write_json(
        config,
        kube_proxy_config(
            kubeconfig=kubeconfig,
            cluster_cidr=record["subnet"],
            node_ip=record["address"],
            healthz_port=(healthz := free_port()),
            metrics_port=free_port(),
        ),
    )
    process = launch("kube-proxy", binary, [f"--config={config}", "--v=1"])
    import urllib.request

    def synced() -> bool:
        healthy = urllib.request.urlopen(f"http://127.0.0.1:{healthz}/healthz", timeout=2).status == 200
        chains = subprocess.run([str(iptables), "-w", "5", "-t", "nat", "-S"], capture_output=True, text=True).stdout
        return healthy and "-N KUBE-SERVICES" in chains

    _wait(process, synced, "synced (its KUBE-SERVICES chain in the nat table)", START_TIMEOUT_S)


def node_ready(api) -> bool:
    from kubernetes import client

    try:
        node: Any = client.CoreV1Api(api).read_node(NODE_NAME)
    except client.ApiException:
        return False
    return any(c.type == "Ready" and c.status == "True" for c in (node.status.conditions or []))


# ------------------------------------------------------------------ stop


def drain(record: dict, api, processes: list[Process]) -> list[str]:
    """Before the processes stop: delete the node's pods (the kubelet stops their sandboxes, which tears their
    network down through CNI), then stop the kubelet, then remove any container containerd still runs, so that no
    shim outlives containerd."""
    if api is not None:
        from kubernetes import client

        core = client.CoreV1Api(api)
        with contextlib.suppress(Exception):
            pods: list[Any] = core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={NODE_NAME}").items
            for pod in pods:
                with contextlib.suppress(client.ApiException):
                    core.delete_namespaced_pod(pod.metadata.name, pod.metadata.namespace, grace_period_seconds=0)
            deadline = time.monotonic() + DRAIN_TIMEOUT_S
            while time.monotonic() < deadline and _tasks(record):
                time.sleep(0.5)
    stopped = stop([process for process in processes if process.name == "kubelet"])
    for task in _tasks(record):
        ctr(record, "tasks", "kill", "--all", "--signal", "SIGKILL", task, timeout_s=10)
    deadline = time.monotonic() + DRAIN_TIMEOUT_S
    while time.monotonic() < deadline and _tasks(record):
        for task in _tasks(record):
            ctr(record, "tasks", "delete", "--force", task, timeout_s=10)
        time.sleep(0.2)
    return stopped


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def _tasks(record: dict) -> list[str]:
    if not record.get("socket") or not Path(record["socket"]).exists():
        return []
    try:
        result = ctr(record, "tasks", "list", "--quiet", timeout_s=10)
    except subprocess.TimeoutExpired:
        return []
    return result.stdout.split() if result.returncode == 0 else []


def _leftover_pids(record: dict) -> set[int]:
    """Processes of this node that outlived containerd (its run was killed, not stopped): every process in the node's
    cgroups (the containers), and the shims this containerd started (their `-address` is its socket)."""
    pids: set[int] = set()
    if record.get("cgroup_root"):
        for folder in _cgroup_folders(record["cgroup_root"]):
            for procs in folder.rglob("cgroup.procs") if folder.is_dir() else ():
                with contextlib.suppress(OSError, ValueError):
                    pids.update(int(pid) for pid in procs.read_text().split())
    if record.get("socket"):
        address = os.fsencode(record["socket"])
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                with contextlib.suppress(OSError):
                    argv = (entry / "cmdline").read_bytes().split(b"\0")
                    if argv[0].endswith(b"containerd-shim-runc-v2") and address in argv:
                        pids.add(int(entry.name))
    pids.discard(os.getpid())
    return pids


def pinned_netns(pids: set[int]) -> list[Path]:
    """The files under /run/netns (containerd's `cni-*`) that pin the network namespace of one of `pids`: only the
    node's own sandboxes' (the host's namespace is never one)."""
    inodes = set()
    for pid in pids:
        with contextlib.suppress(OSError):
            inodes.add(os.stat(f"/proc/{pid}/ns/net").st_ino)
    inodes.discard(os.stat("/proc/self/ns/net").st_ino)
    found = []
    for path in Path("/run/netns").glob("cni-*") if inodes else ():
        with contextlib.suppress(OSError):
            if path.stat().st_ino in inodes:
                found.append(path)
    return found


def remove_chains(kube_proxy: str) -> None:
    """kube-proxy's chains (`kube-proxy --cleanup`: its Service, endpoint, masquerade and firewall chains in nat and
    filter) and what that leaves (LEFTOVER_CHAINS), in the IPv4 and IPv6 tables; nothing while another kubelet or
    kube-proxy on this machine still runs (the chains are the machine's, and would be theirs too)."""
    if processes_named("kube-proxy") or processes_named("kubelet"):
        return
    if Path(kube_proxy).is_file():
        # its exit status is not relied on (IPVS or nftables teardown can fail where those are absent); the chains
        # that remain are removed by name below
        with contextlib.suppress(subprocess.TimeoutExpired):
            subprocess.run([kube_proxy, "--cleanup"], capture_output=True, timeout=60)
    for name in ("iptables", "ip6tables"):
        tool = shutil.which(name) or shutil.which(name, path="/usr/sbin:/sbin")
        if tool is None:
            continue
        for chain in ("INPUT", "OUTPUT"):
            for _ in range(5):  # one jump each, unless a run that was killed while adding it added it twice
                if subprocess.run([tool, "-w", "5", "-D", chain, "-j", "KUBE-FIREWALL"], capture_output=True).returncode:
                    break
        for table in ("mangle", "nat", "filter"):
            for chain in LEFTOVER_CHAINS:
                subprocess.run([tool, "-w", "5", "-t", table, "-F", chain], capture_output=True)
                subprocess.run([tool, "-w", "5", "-t", table, "-X", chain], capture_output=True)


def clean_up(record: dict, folder: Path) -> None:
    """After the processes stopped: kill what outlived them (`_leftover_pids`), unmount what the kubelet and
    containerd left mounted under `folder`, remove the bridge and the cgroup root recorded in `record`, and the
    iptables chains kube-proxy and the kubelet wrote."""
    leftovers = _leftover_pids(record)
    pinned = pinned_netns(leftovers)
    for pid in leftovers:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + DRAIN_TIMEOUT_S
    while leftovers and time.monotonic() < deadline:
        leftovers = {pid for pid in leftovers if Path(f"/proc/{pid}").exists() and not _zombie(pid)}
        time.sleep(0.1)
    mounts = []
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            point = line.split()[4].replace("\\040", " ")
            if Path(point).is_relative_to(folder.resolve()):
                mounts.append(point)
    for point in sorted(mounts, key=len, reverse=True):
        subprocess.run(["umount", "--lazy", point], capture_output=True)
    for path in pinned:  # a killed sandbox's network namespace, which containerd pins outside the folder
        subprocess.run(["umount", str(path)], capture_output=True)
        path.unlink(missing_ok=True)
    if record.get("bridge"):
        subprocess.run(["ip", "link", "delete", record["bridge"]], capture_output=True)
    if record.get("cgroup_root"):
        _remove_cgroup_root(record["cgroup_root"])
    if record.get("kube_proxy"):
        remove_chains(record["kube_proxy"])
