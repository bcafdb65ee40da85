"""GPU sizing for `make recommend`: replicas from GPU utilisation history, batch headroom from GPU memory.

One GPU per replica, always: `nvidia.com/gpu` is an extended resource that Kubernetes hands out in whole units
(request = limit), so a pod cannot take half a card. Sharing one needs the cluster to cut it first: MIG gives
slices their own resource names (e.g. `nvidia.com/mig-1g.10gb`), time-slicing advertises one card several times
with no memory isolation; both are the cluster's choice, not a number this history can set. What the history
does set is how many cards: at the peak, the GPUs of all replicas together were this busy, and each replica
should run its card at the target utilisation, as CPU replicas run at 70% of their measured capacity.

Memory is the other limit and more replicas do not lift it: a card near full cannot take a larger batch, so the
throughput each replica adds stops growing with load; the warning names what frees memory instead.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from deployments.sizing.recommend.gpu_history import GpuMemory, GpuUtil

GPUS_PER_REPLICA = 1
FLAGS = {"target_utilization": "--gpu-target", "memory_warning": "--gpu-memory-warning"}


class GpuSettings(BaseModel):
    """How the GPU history is read (flags in FLAGS)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    target_utilization: float = Field(
        default=0.70, gt=0.05, le=1.0, description="each replica's card should be this busy at the peak"
    )
    memory_warning: float = Field(
        default=0.90, gt=0.5, lt=1.0, description="warn where a card's used memory reaches this share of it"
    )
    peak_percentile: float = Field(
        default=0.99, ge=0.5, le=1.0, description="the peak is this percentile of the busy GPUs over the history"
    )
    idle_share: float = Field(
        default=0.10, ge=0.0, lt=1.0, description="a card whose peak stays under this share of the target is called idle"
    )


@dataclass
class GpuRecommendation:
    """GPUs per replica, the replica range the GPU history asks for, and what the memory history says."""

    gpus_per_replica: int
    min_replicas: int
    max_replicas: int
    peak_busy_gpus: float
    trough_busy_gpus: float
    cards_seen: int
    memory_peak_share: float
    memory_card_mib: float
    settings: GpuSettings
    reasoning: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    inputs: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "gpus_per_replica": self.gpus_per_replica,
            "resource": "nvidia.com/gpu",
            "min_replicas": self.min_replicas,
            "max_replicas": self.max_replicas,
            "target_utilization": self.settings.target_utilization,
            "peak_percentile": self.settings.peak_percentile,
            "peak_busy_gpus": round(self.peak_busy_gpus, 3),
            "trough_busy_gpus": round(self.trough_busy_gpus, 3),
            "cards_seen": self.cards_seen,
            "memory_peak_share": round(self.memory_peak_share, 4),
            "memory_card_mib": round(self.memory_card_mib),
            "memory_warning_share": self.settings.memory_warning,
            "reasoning": self.reasoning,
            "warnings": self.warnings,
            "inputs": self.inputs,
        }


def recommend_gpu(
    util: GpuUtil, memory: GpuMemory, *, settings: GpuSettings | None = None, margin: float = 0.15, min_floor: int = 1
) -> GpuRecommendation:
    """Replicas so that each card runs at the target at the peak (the `peak_percentile` of the busy-GPU sum, plus
    `margin`) and at the trough; and a warning where a card's memory came near full."""
    settings = settings or GpuSettings()
    target = settings.target_utilization
    times, busy = util.busy()
    _, cards = util.cards()
    peak = float(np.quantile(busy, settings.peak_percentile))
    trough = float(busy.min())
    max_replicas = max(min_floor, math.ceil(round(peak * (1 + margin) / target, 9)))
    min_replicas = min(max_replicas, max(min_floor, math.ceil(round(trough / target, 9))))
    hours = (times[-1] - times[0]) / 3600
    why = [
        (
            f"GPUs per replica: {GPUS_PER_REPLICA} (nvidia.com/gpu comes in whole cards, request = limit; a fraction needs "
            "MIG slices or time-slicing set up in the cluster's device plugin)"
        ),
        (
            f"GPU: {len(util.series)} card(s) over {hours:.1f} h, up to {int(cards.max())} at once; busy GPUs (the sum of "
            f"utilisation / 100 over the cards) p{settings.peak_percentile * 100:g} {peak:.2f}, lowest {trough:.2f}"
        ),
        (
            f"GPU replicas: each card at {target:.0%} at the peak: max = ceil({peak:.2f} x {1 + margin:.2f} / {target:.2f}) "
            f"= {max_replicas}, min = ceil({trough:.2f} / {target:.2f}) = {min_replicas}"
            + (f" (floor {min_floor})" if min_floor > 1 else "")
        ),
    ]
    warnings = []
    if peak < settings.idle_share * target:
        warnings.append(
            f"the GPUs were nearly idle (p{settings.peak_percentile * 100:g} {peak:.2f} busy GPUs over {len(util.series)} "
            f"card(s)): {min_replicas} whole card(s) sit mostly unused; serve from the cpu overlay if the latency "
            "allows, or share cards through MIG or time-slicing"
        )
    share, card_mib, memory_why, memory_warnings = _memory(memory, settings)
    inputs = {
        "gpu_util": {
            "source": util.source,
            "gpus": sorted(util.gpus),
            "pods": sorted({p for p in util.pods.values() if p}),
            "step_s": util.step_s,
            "start": util.start,
            "end": util.end,
        },
        "gpu_memory": {"source": memory.source, "gpus": sorted(memory.gpus)},
    }
    return GpuRecommendation(
        gpus_per_replica=GPUS_PER_REPLICA,
        min_replicas=min_replicas,
        max_replicas=max_replicas,
        peak_busy_gpus=peak,
        trough_busy_gpus=trough,
        cards_seen=len(util.series),
        memory_peak_share=share,
        memory_card_mib=card_mib,
        settings=settings,
        reasoning=why + memory_why,
        warnings=warnings + memory_warnings,
        inputs=inputs,
    )


def _memory(memory: GpuMemory, settings: GpuSettings) -> tuple[float, float, list[str], list[str]]:
    """(highest share of a card used, that card's MiB, reasoning, warnings): memory is sized from its peak, as a
    pod's memory limit is, since an allocation that does not fit fails the request rather than slowing it."""
    peaks = [
        (float(share.values.max()), share.pod, float(card.values[int(np.argmax(share.values))]))
        for share, card in zip(memory.shares(), memory.card)
    ]
    share, gpu, card_mib = max(peaks)
    why = [
        (
            f"GPU memory: the fullest card peaked at {share:.0%} of {card_mib / 1024:.1f} GiB ({gpu}); warning from "
            f"{settings.memory_warning:.0%}"
        )
    ]
    warnings = []
    if share >= settings.memory_warning:
        full = sum(1 for peak, _, _ in peaks if peak >= settings.memory_warning)
        warnings.append(
            f"GPU memory reached {share:.0%} of the {card_mib / 1024:.1f} GiB card on {gpu} ({full} of {len(peaks)} card(s) "
            f"at {settings.memory_warning:.0%} or more): the model cannot take a larger batch there, and more replicas do "
            "not give a card more memory; lower parameters.extra.max_batch_rows (and MLServer's max_batch_size) in "
            "model-settings.json, cap ONNX Runtime's CUDA arena with parameters.extra.cuda.gpu_mem_limit_bytes (the "
            "arena keeps what it once took, so the share may be the arena's), serve the fp16 variant (`python -m "
            "export variants --target gpu`), or place the pods on larger cards (--gpu-node-selector)"
        )
    return share, card_mib, why, warnings
