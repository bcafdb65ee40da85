"""What the tuner may change: model variant, MLServer workers, adaptive batching, ONNX Runtime threads,
the wrappers runtime's run slots and merged rows; on GPUs also the execution provider, the padding
buckets, CUDA graphs and the number of front ends.

A `ServingConfig` is one point of the space; `apply_config` turns it into a real artifact
folder (model-settings.json rewritten, manifest re-hashed) that MLServer serves as it is.
"""

from __future__ import annotations

import itertools
import json
import math
import shutil
from pathlib import Path
from typing import Any, TypedDict

from pydantic import BaseModel, ConfigDict, Field, model_validator

from loadtest.tuning.machine import Provider
from slipway.reports import read_report


class KnownGood(TypedDict, total=False):
    """A known-good setting: the `ServingConfig` fields it sets (the variant and provider come from the space)."""

    parallel_workers: int
    max_batch_size: int
    max_batch_time_ms: float
    intra_op_threads: int
    inter_op_threads: int
    inference_threads: int
    max_batch_rows: int


# What is already known to serve well on few cores (DESIGN.md, the wrappers issue): everything in
# one process, one intra-op thread, no batching window at low load; and, where the space has run
# slots (models that run on inference threads, such as MobileNetV2), two single-threaded slots
# merging up to 4 rows (the tuner's best per core for MobileNetV2 on 2 cores; four slots, which
# `make bench` uses, served as much within 2%).
KNOWN_GOOD: list[KnownGood] = [
    {"parallel_workers": 0, "max_batch_size": 1, "intra_op_threads": 1, "inter_op_threads": 1},
    {"parallel_workers": 0, "max_batch_size": 8, "max_batch_time_ms": 1, "intra_op_threads": 1, "inter_op_threads": 1},
    {
        "parallel_workers": 0,
        "max_batch_size": 1,
        "intra_op_threads": 1,
        "inter_op_threads": 1,
        "inference_threads": 2,
        "max_batch_rows": 4,
    },
]
TUNABLE_VARIANTS = ("fp32", "int8")
GPU_VARIANTS = ("fp32", "fp16", "int8")  # the precisions a GPU space searches (export --target gpu makes S8S8 int8)
PROVIDER_LISTS = {"cuda": ["CUDAExecutionProvider"], "tensorrt": ["TensorrtExecutionProvider", "CUDAExecutionProvider"]}
# The smallest value each dimension's choices may take, and whether it must be strictly above it.
CHOICE_FLOORS = {
    "parallel_workers": (0, False),
    "max_batch_size": (1, False),
    "max_batch_time_ms": (0, True),
    "intra_op_threads": (1, False),
    "inter_op_threads": (1, False),
    "inference_threads": (1, False),
    "max_batch_rows": (1, False),
    "frontends": (1, False),
}


def refused_choices(field: str, values: list[float]) -> tuple[str, str] | None:
    """The choices of `field` below its floor, shown, and the floor they miss (`above 0`); None when all are fine."""
    least, above = CHOICE_FLOORS[field]
    bad = [value for value in values if not math.isfinite(value) or value < least or (above and value == least)]
    if not bad:
        return None
    return ", ".join(f"{value:g}" for value in bad), f"above {least:g}" if above else f"at least {least:g}"


class SpaceError(ValueError):
    """The space cannot be searched (no variant, an artifact folder missing...)."""


class ServingConfig(BaseModel):
    """One serving spec: what a trial serves and how."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    variant: str
    parallel_workers: int = Field(ge=0)
    max_batch_size: int = Field(ge=1, description="1: adaptive batching off")
    max_batch_time_ms: float = Field(default=0, ge=0, description="batching window; 0 when batching is off")
    intra_op_threads: int = Field(ge=1)
    inter_op_threads: int = Field(default=1, ge=1)
    inference_threads: int = Field(default=1, ge=1, description="the wrappers runtime's run slots")
    max_batch_rows: int = Field(default=1, ge=1, description="rows the wrappers runtime merges into one run (1: off)")
    provider: Provider = Field(default="cpu", description="where the graph runs; cpu leaves the runtime's choice alone")
    batch_buckets: tuple[int, ...] = Field(default=(), description="row counts runs are padded to; (): the runtime's default")
    cuda_graph: bool = Field(default=False, description="CUDA provider: capture the graph once and replay it")
    frontends: int = Field(default=1, ge=1, description="serving processes feeding the one session (1: today's single one)")

    @model_validator(mode="after")
    def _batching(self) -> ServingConfig:
        if self.max_batch_size == 1 and self.max_batch_time_ms:
            raise ValueError("max_batch_time_ms only applies when max_batch_size > 1")
        if self.max_batch_size > 1 and not self.max_batch_time_ms:
            raise ValueError("adaptive batching (max_batch_size > 1) needs max_batch_time_ms > 0")
        if self.cuda_graph and self.provider != "cuda":
            raise ValueError("cuda_graph runs on the cuda provider only")
        if self.cuda_graph and not self.batch_buckets:
            raise ValueError("cuda_graph needs fixed shapes: give batch_buckets")
        if any(size < 1 for size in self.batch_buckets):
            raise ValueError("batch_buckets must hold positive row counts")
        return self

    @property
    def on_gpu(self) -> bool:
        return self.provider != "cpu"

    @property
    def key(self) -> str:
        batching = f"b{self.max_batch_size}@{self.max_batch_time_ms:g}ms" if self.max_batch_size > 1 else "b1"
        runs = (
            f"-s{self.inference_threads}r{self.max_batch_rows}" if (self.inference_threads, self.max_batch_rows) != (1, 1) else ""
        )
        gpu = "".join(
            (
                f"-{self.provider}" if self.on_gpu else "",
                f"-k{buckets_text(self.batch_buckets)}" if self.batch_buckets else "",
                "-graph" if self.cuda_graph else "",
                f"-f{self.frontends}" if self.frontends > 1 else "",
            )
        )
        return f"{self.variant}-w{self.parallel_workers}-{batching}-t{self.intra_op_threads}x{self.inter_op_threads}{runs}{gpu}"

    def params(self) -> dict[str, Any]:
        """As Optuna's trial parameters (the batching window only when batching is on; the GPU dimensions only where
        they differ from the CPU's, as `suggest_config` asks for them only in spaces that search them)."""
        data = self.model_dump(exclude={"provider", "batch_buckets", "cuda_graph", "frontends"})
        if self.max_batch_size == 1:
            data.pop("max_batch_time_ms")
        if self.on_gpu:
            data.update(provider=self.provider, batch_buckets=buckets_text(self.batch_buckets), cuda_graph=self.cuda_graph)
        if self.frontends > 1:
            data["frontends"] = self.frontends
        return data


def buckets_text(buckets: tuple[int, ...]) -> str:
    """A bucket set as one categorical value (Optuna's choices are scalars): `8.32`, or `none` for ()."""
    return ".".join(str(size) for size in buckets) or "none"


def parse_buckets(text: str) -> tuple[int, ...]:
    return () if text == "none" else tuple(int(size) for size in text.split("."))


class SearchSpace(BaseModel):
    """The choices for each dimension; the grid is every valid combination."""

    model_config = ConfigDict(extra="forbid")

    variants: dict[str, Path]
    parallel_workers: list[int] = [0, 1]
    max_batch_size: list[int] = [1, 8, 32]
    max_batch_time_ms: list[float] = [1, 5]
    intra_op_threads: list[int] = [1, 2]
    inter_op_threads: list[int] = [1]
    inference_threads: list[int] = [1]
    max_batch_rows: list[int] = [1]
    providers: list[Provider] = ["cpu"]
    batch_buckets: list[tuple[int, ...]] = [()]
    cuda_graphs: list[bool] = [False]
    frontends: list[int] = [1]

    @model_validator(mode="after")
    def _check(self) -> SearchSpace:
        if not self.variants:
            raise ValueError("no model variant to tune: give --variant NAME=ARTIFACT_DIR")
        for name, folder in self.variants.items():
            if not (Path(folder) / "model-settings.json").is_file():
                raise ValueError(f"variant {name}: {folder} is not an artifact folder (no model-settings.json)")
        for field in (
            "parallel_workers",
            "max_batch_size",
            "intra_op_threads",
            "inter_op_threads",
            "inference_threads",
            "max_batch_rows",
        ):
            if not getattr(self, field):
                raise ValueError(f"{field}: give at least one value")
        for field in CHOICE_FLOORS:  # each choice becomes a ServingConfig: refuse it here, named
            refused = refused_choices(field, getattr(self, field))
            if refused:
                shown, floor = refused
                raise ValueError(f"{field}: {shown} is not allowed; every choice must be {floor}")
        if any(size > 1 for size in self.max_batch_size) and not self.max_batch_time_ms:
            raise ValueError("max_batch_time_ms: batching sizes > 1 need at least one batching window")
        self._check_gpu_dimensions()
        return self

    def _check_gpu_dimensions(self) -> None:
        """One objective per search: rows/s per core on the CPU, per GPU on GPUs; GPU-only choices need a GPU provider."""
        for field in ("providers", "batch_buckets", "cuda_graphs", "frontends"):
            if not getattr(self, field):
                raise ValueError(f"{field}: give at least one value")
        if "cpu" in self.providers and len(self.providers) > 1:
            raise ValueError(
                "providers: cpu and GPU providers are judged per core and per GPU, which do not compare: "
                "tune them in separate runs"
            )
        if True in self.cuda_graphs and "cuda" not in self.providers:
            raise ValueError("cuda_graphs: CUDA graphs run on the cuda provider; add cuda to providers or leave them off")
        if True in self.cuda_graphs and not any(self.batch_buckets):
            raise ValueError("cuda_graphs: a captured graph needs fixed shapes; give batch buckets (e.g. 8 or 1.8.32)")
        if any(size < 1 for buckets in self.batch_buckets for size in buckets):
            raise ValueError("batch_buckets: every bucket must be a positive row count")
        if any(count > 1 for count in self.frontends):
            from slipway.runtime_settings import RuntimeSettings

            if "frontends" not in RuntimeSettings.model_fields:
                raise ValueError("frontends: this wrappers runtime has no `frontends` setting yet; tune with 1")

    def grid(self) -> list[ServingConfig]:
        """Every configuration of the space, each once."""
        configs: list[ServingConfig] = []
        # A product of two products, in the order one product of all eleven dimensions takes: typeshed types a product
        # of up to six iterables item by item, and past that as one union of every dimension's type.
        first_six = itertools.product(
            self.variants,
            self.parallel_workers,
            self.max_batch_size,
            self.intra_op_threads,
            self.inter_op_threads,
            self.inference_threads,
        )
        for (variant, workers, size, intra, inter, slots), (rows, provider, buckets, graph, frontends) in itertools.product(
            first_six,
            itertools.product(self.max_batch_rows, self.providers, self.batch_buckets, self.cuda_graphs, self.frontends),
        ):
            graph = graph and provider == "cuda" and bool(buckets)  # a CUDA graph: the cuda provider, fixed shapes
            windows = self.max_batch_time_ms if size > 1 else [0]
            configs.extend(
                ServingConfig(
                    variant=variant,
                    parallel_workers=workers,
                    max_batch_size=size,
                    max_batch_time_ms=window,
                    intra_op_threads=intra,
                    inter_op_threads=inter,
                    inference_threads=slots,
                    max_batch_rows=rows,
                    provider=provider,
                    batch_buckets=buckets,
                    cuda_graph=graph,
                    frontends=frontends,
                )
                for window in windows
            )
        return list(dict.fromkeys(configs))  # a CUDA graph choice that does not apply leaves a config twice

    def known_good(self) -> list[ServingConfig]:
        """The known-good settings that lie in this space, for every variant: the search starts there."""
        found = []
        grid = self.grid()
        for variant in self.variants:
            for seed in KNOWN_GOOD:
                config = ServingConfig(variant=variant, provider=self.providers[0], **seed)
                if config in grid and config not in found:
                    found.append(config)
        return found


def discover_variants(
    fallback: Path, export_report: str = "export", names: tuple[str, ...] = TUNABLE_VARIANTS
) -> dict[str, Path]:
    """The `names` artifact folders from the export report's `variants` (those not rejected), else `fallback` as fp32."""
    report = read_report(export_report) or {}
    found = {
        row["name"]: Path(row["path"])
        for row in report.get("variants", [])
        if isinstance(row, dict)
        and row.get("name") in names
        and row.get("path")
        and row.get("status") != "rejected"
        and (Path(row["path"]) / "model-settings.json").is_file()
    }
    return found or {"fp32": Path(fallback)}


def model_settings_for(config: ServingConfig, base: dict[str, Any]) -> dict[str, Any]:
    """`base` model-settings.json with the config's batching, ONNX Runtime threads and run slots set."""
    settings = json.loads(json.dumps(base))
    if config.max_batch_size > 1:
        settings["max_batch_size"] = config.max_batch_size
        settings["max_batch_time"] = config.max_batch_time_ms / 1000
    else:
        settings.pop("max_batch_size", None)
        settings.pop("max_batch_time", None)
    parameters = settings.setdefault("parameters", {})
    extra = parameters.setdefault("extra", {}) or {}
    extra.update(
        {
            "intra_op_threads": config.intra_op_threads,
            "inter_op_threads": config.inter_op_threads,
            "inference_threads": config.inference_threads,
            "max_batch_rows": config.max_batch_rows,
        }
    )
    if config.on_gpu:  # the CPU's configs keep the artifact's own provider settings, as before
        extra["providers"] = PROVIDER_LISTS[config.provider]
        extra["cuda"] = {**(extra.get("cuda") or {}), "enable_cuda_graph": config.cuda_graph}
        if config.provider == "tensorrt" and "int8" in config.variant:  # a QDQ graph: TensorRT reads its scales
            extra["tensorrt"] = {**(extra.get("tensorrt") or {}), "int8": True}
    if config.batch_buckets:
        extra["batch_buckets"] = list(config.batch_buckets)
    if config.frontends > 1:
        extra["frontends"] = config.frontends
    parameters["extra"] = extra
    return settings


def apply_config(config: ServingConfig, source: Path, target: Path) -> Path:
    """Copy the variant's artifact to `target` with the config's model-settings.json and a fresh manifest."""
    from slipway import atomic
    from slipway.artifact import SETTINGS_FILE, write_manifest

    source = Path(source)
    with atomic.staged_dir(Path(target)) as staging:
        shutil.copytree(source, staging, dirs_exist_ok=True)
        base = json.loads((source / SETTINGS_FILE).read_text())
        (staging / SETTINGS_FILE).write_text(json.dumps(model_settings_for(config, base), indent=2) + "\n")
        write_manifest(staging)
    return Path(target)
