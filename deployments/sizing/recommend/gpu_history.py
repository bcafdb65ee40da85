"""GPU history from NVIDIA's DCGM exporter: query_range answers read into one checked series per GPU.

`make recommend` sizes GPU replicas from `DCGM_FI_DEV_GPU_UTIL` (percent of the time a kernel ran, 0-100) and
checks batch headroom from `DCGM_FI_DEV_FB_USED` and `DCGM_FI_DEV_FB_FREE` (framebuffer MiB). The exporter labels
every series with the card (`gpu`, its index; `UUID`; `Hostname`; `modelName`) and, in its Kubernetes mode, the
pod, namespace and container the card was given to. A series is kept per GPU rather than per pod, since a pod
may hold several cards and a card outlives its pod; the sum over them at each timestamp is the fleet's load.

Where Prometheus scrapes the exporter without `honor_labels`, the workload's labels arrive as `exported_pod`,
`exported_namespace`, `exported_container` and `pod` names the exporter itself: the exported ones win.
Whatever would skew the count (another metric, utilisation outside 0-100, MiB sent as bytes, a series without
a card to name, a card twice) stops with one line saying what to send.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal, overload

import numpy as np

from deployments.sizing.prometheus import Prometheus, PrometheusError
from deployments.sizing.usage import Series, SeriesSet, UsageError, checked_series, matrix_series
from slipway.files import FileProblem, read_json

GpuKind = Literal["gpu-util", "gpu-memory"]
UTIL_METRIC = "DCGM_FI_DEV_GPU_UTIL"
USED_METRIC = "DCGM_FI_DEV_FB_USED"
FREE_METRIC = "DCGM_FI_DEV_FB_FREE"
POD_LABELS = ("exported_pod", "pod", "pod_name")  # exported_pod first: with it, `pod` is the exporter's own pod
MAX_CARD_MIB = 2.0**20  # 1 TiB: no card comes near; larger "MiB" are bytes
MIN_CARD_MIB = 256.0
HINTS = {
    "gpu-util": f'{UTIL_METRIC} per GPU, e.g. {UTIL_METRIC}{{namespace="NS",container="MODEL"}}',
    "gpu-memory": (
        f"{USED_METRIC} and {FREE_METRIC} per GPU in one answer, e.g. "
        f'{{__name__=~"{USED_METRIC}|{FREE_METRIC}",namespace="NS",container="MODEL"}}'
    ),
}


@dataclass(frozen=True)
class GpuUtil(SeriesSet):
    """Utilisation per GPU in percent (0-100); `Series.pod` is the GPU's name, `pods[name]` the pod it served."""

    source: str
    series: list[Series]
    step_s: float
    pods: dict[str, str | None]

    @property
    def gpus(self) -> set[str]:
        return {s.pod for s in self.series}

    def busy(self) -> tuple[np.ndarray, np.ndarray]:
        """(timestamps, busy GPUs): at each timestamp the sum over the GPUs reporting then of utilisation / 100, so
        two cards at 50% and one at 80% are 1.8 GPUs of work; a card absent at a timestamp adds nothing."""
        stamps, percent = self.total()
        return stamps, percent / 100.0

    def cards(self) -> tuple[np.ndarray, np.ndarray]:
        """(timestamps, GPUs reporting at each): the replicas (one card each) the history ran on."""
        stamps, counts = np.unique(np.concatenate([s.times for s in self.series]), return_counts=True)
        return stamps, counts


@dataclass(frozen=True)
class GpuMemory:
    """Framebuffer per GPU in MiB at the timestamps where both used and free were scraped: `used[i]` and `card[i]`
    (used + free, the card's memory) describe the same GPU."""

    source: str
    used: list[Series]
    card: list[Series]
    pods: dict[str, str | None]

    @property
    def gpus(self) -> set[str]:
        return {s.pod for s in self.used}

    def shares(self) -> list[Series]:
        """Used / card per GPU (0-1) at each timestamp."""
        return [Series(used.pod, used.times, used.values / card.values) for used, card in zip(self.used, self.card)]


def gpu_name(labels: dict) -> tuple[str, str | None] | None:
    """(the GPU's name, its pod or None) from DCGM's labels; None when no label names a card."""
    pod = next((str(labels[key]) for key in POD_LABELS if labels.get(key)), None)
    card = labels.get("UUID") or labels.get("uuid")
    index = labels.get("gpu") if labels.get("gpu") not in (None, "") else labels.get("device")
    if not card and index is None:
        return None
    where = pod or labels.get("Hostname") or labels.get("instance")
    parts = [str(where)] if where else []
    parts.append(f"gpu {index}" if index is not None else "gpu")
    if card:
        parts.append(str(card))
    return " ".join(parts), pod


def _matrix(data: object, *, kind: GpuKind, source: str) -> list[dict]:
    """The series of a query_range answer that hold samples; one line for any other shape."""
    return matrix_series(data, hint=HINTS[kind], source=source)


def _named(raw: list[dict], *, kind: GpuKind, source: str) -> list[tuple[str, str | None, dict]]:
    """(GPU name, pod, series) per series; refuses a series that names no card and a card named twice."""
    named, seen = [], set()
    for item in raw:
        labels = item.get("metric", {})
        found = gpu_name(labels)
        if found is None:
            raise UsageError(
                f"{source}: a series without the exporter's gpu or UUID label ({_labels(labels)}): the query "
                f"aggregated the cards away; send one series per GPU: {HINTS[kind]}"
            )
        key = (found[0], str(labels.get("__name__", "")))
        if key in seen:
            raise UsageError(f"{source}: {found[0]} has more than one series; keep one per GPU (max by (pod, gpu, UUID) (...))")
        seen.add(key)
        named.append((found[0], found[1], item))
    return named


def parse_gpu_util(data: object, *, source: str) -> GpuUtil:
    """Validate a query_range answer of DCGM_FI_DEV_GPU_UTIL (or an expression of it in percent) per GPU."""
    raw = _matrix(data, kind="gpu-util", source=source)
    for item in raw:
        name = str(item.get("metric", {}).get("__name__", ""))
        if name and name != UTIL_METRIC:
            raise UsageError(f"{source} holds {name}, not {UTIL_METRIC}: send {HINTS['gpu-util']}")
    named = _named(raw, kind="gpu-util", source=source)
    series, step = checked_series([(gpu, item["values"]) for gpu, _, item in named], source=source)
    for one in series:
        low, high = float(one.values.min()), float(one.values.max())
        if low < 0 or high > 100:
            raise UsageError(
                f"{source}: {one.pod} ranges {low:g} to {high:g}, outside 0-100: GPU utilisation is a percent "
                f"per card; send {HINTS['gpu-util']}, not a sum over cards or a counter"
            )
    return GpuUtil(source=source, series=series, step_s=step, pods={gpu: pod for gpu, pod, _ in named})


def parse_gpu_memory(data: object, *, source: str) -> GpuMemory:
    """Validate a query_range answer holding DCGM_FI_DEV_FB_USED and DCGM_FI_DEV_FB_FREE (MiB) per GPU, and pair them."""
    raw = _matrix(data, kind="gpu-memory", source=source)
    by_metric: dict[str, dict[str, tuple[str | None, dict]]] = {USED_METRIC: {}, FREE_METRIC: {}}
    for gpu, pod, item in _named(raw, kind="gpu-memory", source=source):
        name = str(item.get("metric", {}).get("__name__", ""))
        if name not in by_metric:
            raise UsageError(
                f"{source} holds {name or 'a series without __name__'}, not {USED_METRIC} and {FREE_METRIC}: "
                f"query the two metrics themselves (no arithmetic, so each keeps its name): {HINTS['gpu-memory']}"
            )
        by_metric[name][gpu] = (pod, item)
    used, free = by_metric[USED_METRIC], by_metric[FREE_METRIC]
    for have, lack in ((USED_METRIC, FREE_METRIC), (FREE_METRIC, USED_METRIC)):
        missing = sorted(set(by_metric[have]) - set(by_metric[lack]))
        if missing:
            raise UsageError(
                f"{source}: {missing[0]} has {have} but no {lack} ({len(missing)} GPU(s) so): the card's "
                f"memory is used + free; send {HINTS['gpu-memory']}"
            )
    names = sorted(used)
    used_series, _ = checked_series([(gpu, used[gpu][1]["values"]) for gpu in names], source=source)
    free_series, _ = checked_series([(gpu, free[gpu][1]["values"]) for gpu in names], source=source)
    paired_used, paired_card = [], []
    for one, other in zip(used_series, free_series):
        times, mine, theirs = np.intersect1d(one.times, other.times, return_indices=True)
        if times.size < 2:
            raise UsageError(
                f"{source}: {one.pod}'s {USED_METRIC} and {FREE_METRIC} share fewer than two timestamps; "
                "query both over the same range and step"
            )
        used_mib, card_mib = one.values[mine], one.values[mine] + other.values[theirs]
        if used_mib.min() < 0 or other.values.min() < 0:
            raise UsageError(f"{source}: {one.pod} has negative framebuffer MiB; send {HINTS['gpu-memory']}")
        peak = float(card_mib.max())
        if peak > MAX_CARD_MIB:
            raise UsageError(
                f"{source}: {one.pod}'s card holds {peak:g} 'MiB' (over 1 TiB): the values look like bytes; "
                "DCGM reports MiB, send its metrics as they are"
            )
        if float(card_mib.min()) < MIN_CARD_MIB:
            raise UsageError(
                f"{source}: {one.pod}'s used + free is {float(card_mib.min()):g} MiB at some sample, under "
                f"{MIN_CARD_MIB:g} MiB: the values look like GiB or a share; DCGM reports MiB, send its metrics as they are"
            )
        paired_used.append(Series(one.pod, times, used_mib))
        paired_card.append(Series(one.pod, times, card_mib))
    return GpuMemory(source=source, used=paired_used, card=paired_card, pods={gpu: used[gpu][0] for gpu in names})


@overload
def load_gpu(path: Path, kind: Literal["gpu-util"]) -> GpuUtil: ...
@overload
def load_gpu(path: Path, kind: Literal["gpu-memory"]) -> GpuMemory: ...
def load_gpu(path: Path, kind: GpuKind) -> GpuUtil | GpuMemory:
    """Read a saved query_range JSON file of `kind`."""
    try:
        data = read_json(path)
    except FileProblem as err:
        raise UsageError(f"--{kind}: {err}; save the JSON of /api/v1/query_range for {HINTS[kind]}") from err
    return parse_gpu_util(data, source=str(path)) if kind == "gpu-util" else parse_gpu_memory(data, source=str(path))


@overload
def fetch_gpu(
    server: str | Prometheus, query: str, *, kind: Literal["gpu-util"], start: float, end: float, step_s: float
) -> GpuUtil | None: ...
@overload
def fetch_gpu(
    server: str | Prometheus, query: str, *, kind: Literal["gpu-memory"], start: float, end: float, step_s: float
) -> GpuMemory | None: ...
def fetch_gpu(
    server: str | Prometheus, query: str, *, kind: GpuKind, start: float, end: float, step_s: float
) -> GpuUtil | GpuMemory | None:
    """Run one query_range for `kind`; None when it matched no series (a model not served on GPUs)."""
    try:
        prometheus = server if isinstance(server, Prometheus) else Prometheus.from_env(server)
        answer = prometheus.query_range(query, start=start, end=end, step_s=step_s)
    except PrometheusError as err:
        raise UsageError(f"{kind} query: {err}") from err
    if not any(isinstance(item, dict) and item.get("values") for item in answer["data"].get("result") or []):
        return None
    source = f"{kind} query at {prometheus.url}"
    return parse_gpu_util(answer, source=source) if kind == "gpu-util" else parse_gpu_memory(answer, source=source)


def check_gpu_histories(util: GpuUtil, memory: GpuMemory, cpu_pods: set[str]) -> None:
    """The two GPU histories must describe the same cards, and the cards the pods whose CPU and memory were read."""
    if util.gpus != memory.gpus:
        only_util, only_memory = sorted(util.gpus - memory.gpus)[:3], sorted(memory.gpus - util.gpus)[:3]
        raise UsageError(
            f"GPU utilisation and GPU memory describe different GPUs (only in utilisation {only_util}, only in "
            f"memory {only_memory}); query both with the same selector and range"
        )
    pods = {pod for pod in util.pods.values() if pod}
    if pods and cpu_pods and not pods & cpu_pods:
        raise UsageError(
            f"the GPU series name pods {sorted(pods)[:3]} and the CPU history {sorted(cpu_pods)[:3]}: query "
            "the same workload (scraped without honor_labels, the exporter's labels are exported_pod, "
            "exported_namespace and exported_container: select on those)"
        )


def _labels(labels: dict) -> str:
    text = ", ".join(f"{key}={value}" for key, value in sorted(labels.items())[:4])
    return text or "no labels"
