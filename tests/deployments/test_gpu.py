"""The gpu overlay: the variant measured for GPUs, TensorRT's cache on a volume, node placement per cloud."""

from __future__ import annotations

import json
import subprocess

import numpy as np
import onnx
import pytest
import yaml
from onnx import TensorProto, helper, numpy_helper

from deployments.render import autoscaling, gpu, kustomize, seldon
from deployments.render.overlay import OVERLAYS, OVERLAYS_DIR, RenderError
from deployments.render.records import ModelVersion
from deployments.render.validate import validate_documents
from slipway.artifact import RUNTIME_IMPLEMENTATION, write_manifest
from slipway.precision import graph_numerics, read_numerics
from slipway.runtime_settings import TENSORRT_CACHE_ENV
from tests.deployments.canary.series import prometheus_tools  # noqa: F401, F811 (fixture: promtool evaluates the queries)
from tests.deployments.conftest import record
from tests.deployments.rendering import rendering
from tests.graphs import onnx_model

render = rendering()
CACHE_PATH = "/var/cache/slipway/tensorrt"


def _pod(rendered, predictor: int = 0) -> dict:
    return rendered.seldon_deployment["spec"]["predictors"][predictor]["componentSpecs"][0]["spec"]


def _env(container: dict) -> dict:
    return {item["name"]: item.get("value") for item in container.get("env", [])}


def qdq_model(zero_point_type: int | None, weights=np.float32) -> onnx.ModelProto:
    """y = Dequantize(Quantize(x)) @ W: int8 activations of one flavour (None: no zero point, i.e. uint8)."""
    inits = [
        numpy_helper.from_array(np.arange(12).reshape(4, 3).astype(weights), "W"),
        numpy_helper.from_array(np.array(0.1, np.float32), "scale"),
    ]
    quantize_inputs = ["x", "scale"]
    if zero_point_type is not None:
        inits.append(helper.make_tensor("zp", zero_point_type, [], [0]))
        quantize_inputs.append("zp")
    nodes = [
        helper.make_node("QuantizeLinear", quantize_inputs, ["xq"]),
        helper.make_node("DequantizeLinear", ["xq", *quantize_inputs[1:]], ["xd"]),
        helper.make_node("MatMul", ["xd", "W"], ["y"]),
    ]
    return onnx_model(
        helper.make_graph(
            nodes,
            "qdq",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3])],
            inits,
        )
    )


def float_model(dtype) -> onnx.ModelProto:
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    nodes = [helper.make_node("MatMul", ["x", "W"], ["y"])]
    return onnx_model(
        helper.make_graph(
            nodes,
            "mm",
            [helper.make_tensor_value_info("x", elem, ["N", 4])],
            [helper.make_tensor_value_info("y", elem, ["N", 3])],
            [numpy_helper.from_array(np.ones((4, 3), dtype), "W")],
        )
    )


def artifact(folder, model, variant: dict | None = None):
    """An artifact folder as export writes one: model, settings, optional variant.json, manifest."""
    folder.mkdir(parents=True)
    (folder / "model.onnx").write_bytes(model.SerializeToString())
    settings = {"name": "digits", "implementation": RUNTIME_IMPLEMENTATION, "parameters": {"uri": "./model.onnx", "extra": {}}}
    (folder / "model-settings.json").write_text(json.dumps(settings))
    if variant is not None:
        (folder / "variant.json").write_text(json.dumps(variant))
    write_manifest(folder)
    return folder


# ------------------------------------------------------------------ what every overlay serves from


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_overlay_serves_from_mlserver_s_own_process(main_version, canary_version, overlay):
    rendered = render(overlay, model=main_version, canary=canary_version if overlay == "canary" else None)
    for _, _, component in seldon.pod_specs(rendered.seldon_deployment):
        assert _env(component["spec"]["containers"][0])["MLSERVER_PARALLEL_WORKERS"] == "0"


# ------------------------------------------------------------------ 1. the variant measured for GPUs


@pytest.mark.parametrize(
    "model, expected",
    [
        (qdq_model(TensorProto.UINT8), ("int8", "U8S8")),
        (qdq_model(None), ("int8", "U8S8")),  # no zero point: QuantizeLinear quantizes to uint8
        (qdq_model(TensorProto.INT8), ("int8", "S8S8")),
        (float_model(np.float16), ("fp16", None)),
        (float_model(np.float32), ("fp32", None)),
    ],
)
def test_the_graph_says_what_it_computes_in(model, expected):
    assert graph_numerics(model) == expected


def test_export_s_own_int8_flavours_are_read_back_from_their_graphs():
    from export.quantize import Target, quantize_int8

    calibration = {"x": np.random.default_rng(0).normal(size=(32, 4)).astype(np.float32)}
    assert graph_numerics(quantize_int8(float_model(np.float32), calibration, target=Target.cpu)) == ("int8", "U8S8")
    assert graph_numerics(quantize_int8(float_model(np.float32), calibration, target=Target.gpu)) == ("int8", "S8S8")


def test_the_gpu_overlay_refuses_the_cpu_s_u8s8_int8_in_one_line_naming_the_gpu_variant(tmp_path):
    folder = artifact(tmp_path / "int8", qdq_model(TensorProto.UINT8))
    version = ModelVersion.from_artifact(folder, version="3")
    with pytest.raises(RenderError) as caught:
        render("gpu", model=version)
    message = str(caught.value)
    assert "\n" not in message and "digits v3 (predictor default) is the CPU's int8 (U8S8" in message
    assert "python -m export variants --target gpu" in message and "from model.onnx" in message
    assert render("cpu", model=version).warnings == []  # the CPU is what it was made for


@pytest.mark.parametrize(
    "model, variant",
    [
        (qdq_model(TensorProto.INT8), None),  # S8S8, read from the graph
        (float_model(np.float16), {"variant": "fp16", "precision": "fp16"}),
        (float_model(np.float32), {"variant": "slim", "precision": "fp32"}),
    ],
)
def test_the_gpu_overlay_takes_fp32_fp16_and_s8s8_without_a_word(tmp_path, model, variant):
    version = ModelVersion.from_artifact(artifact(tmp_path / "a", model, variant))
    assert render("gpu", model=version).warnings == []


def test_what_export_recorded_in_variant_json_is_read_before_the_graph(tmp_path):
    recorded = {"variant": "pruned-int8", "precision": "int8", "details": {"activations": "uint8", "target": "cpu"}}
    folder = artifact(tmp_path / "a", qdq_model(TensorProto.UINT8), recorded)
    assert read_numerics(folder).as_dict() == {
        "precision": "int8",
        "int8_format": "U8S8",
        "variant": "pruned-int8",
        "source": "variant.json",
    }
    with pytest.raises(RenderError, match=r"\(U8S8: uint8 activations, from variant.json\)"):
        render("gpu", model=ModelVersion.from_artifact(folder))


def test_a_record_in_object_storage_is_judged_by_its_lineage_and_warned_of_without_one(main_version):
    assert render("gpu", model=main_version).warnings == [
        (
            "digits v3 (predictor default): nothing says whether it is fp32, fp16 or int8, and a GPU must not serve the "
            "CPU's U8S8 int8; render from its artifact folder (--model-dir) to have it checked"
        )
    ]
    u8s8 = ModelVersion.model_validate(record("5", lineage={"numerics": {"precision": "int8", "int8_format": "U8S8"}}))
    with pytest.raises(RenderError, match="from the record's lineage"):
        render("gpu", model=u8s8)
    fp16 = ModelVersion.model_validate(record("6", lineage={"numerics": {"precision": "fp16", "variant": "fp16"}}))
    assert render("gpu", model=fp16).warnings == []
    unknown = ModelVersion.model_validate(record("7", lineage={"numerics": {"precision": "int8", "int8_format": None}}))
    assert "int8 of unknown flavour" in render("gpu", model=unknown).warnings[0]


def test_the_store_records_the_numerics_it_publishes(tmp_path):
    from export.store.lineage import gather
    from slipway.artifact import read_manifest

    folder = artifact(tmp_path / "int8", qdq_model(TensorProto.INT8))
    found = gather(folder, read_manifest(folder).digest, reports_dir=tmp_path / "reports")
    assert found.lineage["numerics"] == {"precision": "int8", "int8_format": "S8S8", "variant": None, "source": "model.onnx"}


# ------------------------------------------------------------------ 2. TensorRT's caches on a volume


def test_the_gpu_overlay_keeps_tensorrt_s_caches_on_a_sized_volume_the_runtime_is_pointed_at(main_version):
    spec = _pod(render("gpu", model=main_version))
    container = spec["containers"][0]
    assert _env(container)[TENSORRT_CACHE_ENV] == CACHE_PATH
    assert {"name": "tensorrt-cache", "mountPath": CACHE_PATH} in container["volumeMounts"]
    volumes = {volume["name"]: volume for volume in spec["volumes"]}
    assert volumes["tensorrt-cache"] == {"name": "tensorrt-cache", "emptyDir": {"sizeLimit": "4Gi"}}
    assert TENSORRT_CACHE_ENV not in _env(_pod(render("cpu", model=main_version))["containers"][0])


def test_a_claim_keeps_the_engines_across_pods(main_version):
    rendered = render("gpu", model=main_version, trt_cache_claim="trt-engines")
    volumes = {volume["name"]: volume for volume in _pod(rendered)["volumes"]}
    assert volumes["tensorrt-cache"] == {"name": "tensorrt-cache", "persistentVolumeClaim": {"claimName": "trt-engines"}}
    assert validate_documents(rendered.docs).ok
    with pytest.raises(RenderError, match="--trt-cache-claim 'TRT_Engines' is not a PersistentVolumeClaim name"):
        render("gpu", model=main_version, trt_cache_claim="TRT_Engines")


# ------------------------------------------------------------------ 3. node placement per cloud


def test_by_default_gpu_pods_go_where_gpu_feature_discovery_says_and_tolerate_the_gpu_taint(main_version):
    spec = _pod(render("gpu", model=main_version))
    assert spec["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert spec["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]


@pytest.mark.parametrize(
    "selector, tolerations, expected_selector, expected_tolerations",
    [
        (
            ["cloud.google.com/gke-accelerator=nvidia-l4"],
            [],  # GKE taints GPU nodes nvidia.com/gpu: the default stays
            {"cloud.google.com/gke-accelerator": "nvidia-l4"},
            [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        ),
        (
            ["eks.amazonaws.com/nodegroup=gpu-l4", "node.kubernetes.io/instance-type=g6.xlarge"],
            ["nvidia.com/gpu"],
            {"eks.amazonaws.com/nodegroup": "gpu-l4", "node.kubernetes.io/instance-type": "g6.xlarge"},
            [{"key": "nvidia.com/gpu", "operator": "Exists"}],
        ),
        (
            ["kubernetes.azure.com/accelerator=nvidia"],
            ["sku=gpu:NoSchedule", "nvidia.com/gpu:NoSchedule"],
            {"kubernetes.azure.com/accelerator": "nvidia"},
            [
                {"key": "sku", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"},
                {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
            ],
        ),
    ],
)
def test_a_cloud_s_labels_and_taints_replace_the_overlay_s(
    main_version, selector, tolerations, expected_selector, expected_tolerations
):
    rendered = render("gpu", model=main_version, gpu_node_selector=selector, gpu_tolerations=tolerations)
    assert _pod(rendered)["nodeSelector"] == expected_selector
    assert _pod(rendered)["tolerations"] == expected_tolerations
    assert validate_documents(rendered.docs).ok


@pytest.mark.parametrize(
    "selector, tolerations, message",
    [
        (["gke-accelerator"], [], "--gpu-node-selector 'gke-accelerator' is not KEY=VALUE"),
        (["Cloud.Google.com/gke-accelerator=l4"], [], "key prefix 'Cloud.Google.com' is not a DNS subdomain"),
        (["/accelerator=l4"], [], "key prefix '' is not a DNS subdomain"),
        (["accelerator/=l4"], [], "key name '' must be 1-63 letters"),
        (["a" * 64 + "=l4"], [], "key name 'aaaa"),
        (["accelerator=nvidia l4"], [], "value 'nvidia l4' must be at most 63 letters"),
        (["accelerator=-l4"], [], "value '-l4' must be at most 63"),
        (["a=1", "a=2"], [], "names 'a' twice"),
        ([], ["nvidia.com/gpu:NoScheduled"], "effect 'NoScheduled' is not one of NoSchedule, PreferNoSchedule, NoExecute"),
        ([], ["sku=g p u"], "--gpu-toleration 'sku=g p u': value 'g p u'"),
        ([], ["=gpu"], "key name '' must be"),
    ],
)
def test_labels_and_taints_kubernetes_would_refuse_are_refused_in_one_line(main_version, selector, tolerations, message):
    with pytest.raises(RenderError) as caught:
        render("gpu", model=main_version, gpu_node_selector=selector, gpu_tolerations=tolerations)
    assert message in str(caught.value) and "\n" not in str(caught.value)


@pytest.mark.parametrize(
    "options, named",
    [
        ({"gpu_node_selector": ["cloud.google.com/gke-accelerator=nvidia-l4"]}, "--gpu-node-selector"),
        ({"gpu_tolerations": ["sku=gpu:NoSchedule"], "trt_cache_claim": "trt"}, "--gpu-toleration and --trt-cache-claim"),
    ],
)
def test_gpu_options_without_gpu_pods_are_refused(main_version, options, named):
    with pytest.raises(
        RenderError,
        match=f"{named} place GPU pods, and no container of this rendering asks for nvidia.com/gpu: render the gpu overlay",
    ):
        render("cpu", model=main_version, **options)


def test_tolerations_read_as_kubectl_taint_writes_taints():
    assert gpu.parse_toleration("nvidia.com/gpu") == {"key": "nvidia.com/gpu", "operator": "Exists"}
    assert gpu.parse_toleration("nvidia.com/gpu:NoExecute") == {
        "key": "nvidia.com/gpu",
        "operator": "Exists",
        "effect": "NoExecute",
    }
    assert gpu.parse_toleration("sku=gpu") == {"key": "sku", "operator": "Equal", "value": "gpu"}
    assert gpu.parse_toleration("dedicated=:NoSchedule") == {
        "key": "dedicated",
        "operator": "Equal",
        "value": "",
        "effect": "NoSchedule",
    }


def test_the_command_line_takes_repeated_placement_options_and_refuses_u8s8_in_one_line(tmp_path, reports_env):
    import yaml

    from tests.conftest import run_module

    folder = artifact(tmp_path / "fp16", float_model(np.float16), {"variant": "fp16", "precision": "fp16"})
    out = tmp_path / "out"
    run_module(
        "deployments",
        "render",
        "--overlay",
        "gpu",
        "--model-dir",
        str(folder),
        "--kustomize",
        "builtin",
        "--out",
        str(out),
        "--gpu-node-selector",
        "kubernetes.azure.com/accelerator=nvidia",
        "--gpu-node-selector",
        "pool=gpu",
        "--gpu-toleration",
        "sku=gpu:NoSchedule",
        "--trt-cache-claim",
        "trt-engines",
        env=reports_env,
    )
    sdep = yaml.safe_load((out / "seldondeployment-digits.yaml").read_text())
    spec = sdep["spec"]["predictors"][0]["componentSpecs"][0]["spec"]
    assert spec["nodeSelector"] == {"kubernetes.azure.com/accelerator": "nvidia", "pool": "gpu"}
    assert spec["tolerations"] == [{"key": "sku", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}]
    u8s8 = artifact(tmp_path / "int8", qdq_model(TensorProto.UINT8))
    refused = run_module(
        "deployments",
        "render",
        "--overlay",
        "gpu",
        "--model-dir",
        str(u8s8),
        "--kustomize",
        "builtin",
        "--out",
        str(tmp_path / "refused"),
        env=reports_env,
        check=False,
    )
    assert refused.returncode != 0 and not (tmp_path / "refused").exists()
    assert "python -m export variants --target gpu" in refused.stderr + refused.stdout


# ---- autoscaling on what a GPU pod saturates on (--autoscaling gpu-queue | gpu-util)


def _trigger(rendered) -> dict:
    component = rendered.seldon_deployment["spec"]["predictors"][0]["componentSpecs"][0]
    assert "hpaSpec" not in component
    (trigger,) = component["kedaSpec"]["triggers"]
    return trigger


@pytest.mark.parametrize(
    ("mode", "metric"), [("gpu-queue", f"{autoscaling.QUEUE_HISTOGRAM}_bucket"), ("gpu-util", autoscaling.GPU_UTIL_METRIC)]
)
def test_gpu_autoscaling_renders_valid_keda_on_the_gpu_overlay(mode, metric, main_version, seldon_crd_schema):
    rendered = render("gpu", model=main_version, namespace="ml", autoscaling_mode=mode)
    report = validate_documents(rendered.docs, crd_schema=seldon_crd_schema)
    assert report.ok, report.errors
    trigger = _trigger(rendered)
    assert trigger["type"] == "prometheus" and trigger["metricType"] == "Value"  # a latency or a percentage: not per replica
    query = trigger["metadata"]["query"]
    assert f"{metric}{{" in query and 'namespace="ml"' in query and "$(" not in query


def test_gpu_autoscaling_is_refused_without_gpu_pods(main_version):
    with pytest.raises(RenderError, match=r"^--autoscaling gpu-util scales GPU pods, .* render the gpu overlay"):
        render("cpu", model=main_version, autoscaling_mode="gpu-util")


@pytest.mark.skipif(kustomize.kubectl_binary() is None, reason="kubectl is not installed (make setup installs it)")
@pytest.mark.parametrize("mode", autoscaling.GPU_MODES)
def test_gpu_autoscaling_components_build_as_kubectl_kustomize_builds_them(mode):
    extra = [autoscaling.component_dir(mode)]
    real, _ = kustomize.build(OVERLAYS_DIR / "gpu", extra_components=extra, engine="kubectl")
    assert kustomize.build(OVERLAYS_DIR / "gpu", extra_components=extra, engine="builtin")[0] == real


def test_gpu_autoscaling_queries_compute_what_they_claim(prometheus_tools, main_version, tmp_path):  # noqa: F811
    """promtool evaluates both rendered queries on series shaped as the runtime and DCGM export them: the queue p90
    interpolated in its bucket, no traffic read as 0 (not NaN), the cards of this model's container averaged."""
    queries = {
        mode: _trigger(render("gpu", model=main_version, namespace="ml", autoscaling_mode=mode))["metadata"]["query"]
        for mode in autoscaling.GPU_MODES
    }
    rules = tmp_path / "rules.yaml"
    rules.write_text(
        yaml.safe_dump(
            {
                "groups": [
                    {
                        "name": "keda",
                        "rules": [{"record": f"keda:{mode.replace('-', '_')}", "expr": query} for mode, query in queries.items()],
                    }
                ]
            }
        )
    )
    bucket = f'{autoscaling.QUEUE_HISTOGRAM}_bucket{{namespace="ml",slipway_io_model="digits",slipway_io_predictor="default",'

    def dcgm(card: int, container: str = "digits") -> str:
        return f'{autoscaling.GPU_UTIL_METRIC}{{namespace="ml",container="{container}",gpu="{card}",pod="{container}-{card}"}}'

    # Scraped every 15s (the PodMonitor's): Prometheus 3's 1m windows are left-open, one sample per minute is no rate.
    idle = {
        "interval": "15s",
        "input_series": [{"series": bucket + f'le="{le}"}}', "values": "5+0x20"} for le in ("0.01", "0.05", "+Inf")],
        "promql_expr_test": [
            {"expr": "keda:gpu_queue", "eval_time": "3m", "exp_samples": [{"labels": "keda:gpu_queue", "value": 0}]},
            {"expr": "keda:gpu_util", "eval_time": "3m", "exp_samples": [{"labels": "keda:gpu_util", "value": 0}]},
        ],
    }
    busy = {
        "interval": "15s",
        "input_series": [
            {"series": bucket + 'le="0.01"}', "values": "0+0x20"},
            {"series": bucket + 'le="0.05"}', "values": "0+30x20"},  # every request waited 10-50 ms
            {"series": bucket + 'le="+Inf"}', "values": "0+30x20"},
            {"series": dcgm(0), "values": "60x20"},
            {"series": dcgm(1), "values": "80x20"},
            {"series": dcgm(2, "other"), "values": "0x20"},  # another model's card
        ],
        "promql_expr_test": [
            {
                "expr": "keda:gpu_queue",
                "eval_time": "3m",
                "exp_samples": [{"labels": "keda:gpu_queue", "value": 0.01 + (0.05 - 0.01) * 0.9}],
            },
            {"expr": "keda:gpu_util", "eval_time": "3m", "exp_samples": [{"labels": "keda:gpu_util", "value": 70}]},
        ],
    }
    tests = tmp_path / "tests.yaml"
    tests.write_text(yaml.safe_dump({"rule_files": [str(rules)], "evaluation_interval": "1m", "tests": [idle, busy]}))
    result = subprocess.run(
        [str(prometheus_tools["promtool"]), "test", "rules", str(tests)], capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr


# ------------------------------------------------------------------ several front ends per pod


def test_front_ends_are_set_in_the_model_container_with_cpus_for_them_and_the_host(main_version, seldon_crd_schema):
    from deployments.render.frontends import FRONTEND_MEMORY_MIB, FRONTENDS_ENV, cpu_for
    from wrappers.frontends import FRONTENDS_ENV as RUNTIME_READS

    assert FRONTENDS_ENV == RUNTIME_READS
    plain = _pod(render("gpu", model=main_version))["containers"][0]
    assert (plain["resources"]["requests"]["cpu"], plain["resources"]["limits"]["cpu"]) == tuple(map(str, cpu_for(1)))
    rendered = render("gpu", model=main_version, frontends_count=4)
    report = validate_documents(rendered.docs, crd_schema=seldon_crd_schema)
    assert report.ok, report.errors
    container = _pod(rendered)["containers"][0]
    assert _env(container)[FRONTENDS_ENV] == "4"
    assert plain["resources"]["requests"]["memory"] == "4Gi" and plain["resources"]["limits"]["memory"] == "8Gi"
    memory = {"requests": 4096 + 4 * FRONTEND_MEMORY_MIB, "limits": 8192 + 4 * FRONTEND_MEMORY_MIB}  # four processes more
    assert container["resources"]["requests"] == {"cpu": "5", "memory": f"{memory['requests']}Mi", "nvidia.com/gpu": 1}
    assert container["resources"]["limits"] == {"cpu": "10", "memory": f"{memory['limits']}Mi", "nvidia.com/gpu": 1}
    cpu_pod = _pod(render("cpu", model=main_version, frontends_count=2))["containers"][0]  # allowed: tiny models gain
    assert _env(cpu_pod)[FRONTENDS_ENV] == "2" and cpu_pod["resources"]["limits"]["cpu"] == "6"
    assert cpu_pod["resources"]["limits"]["memory"] == f"{2048 + 2 * FRONTEND_MEMORY_MIB}Mi"
    one = _pod(render("gpu", model=main_version, frontends_count=1))["containers"][0]  # one process: as it was
    assert one["resources"]["requests"]["memory"] == "4Gi"
    assert FRONTENDS_ENV not in _env(plain)


@pytest.mark.parametrize(
    "count, options, message",
    [
        (0, {}, r"^--frontends 0: give a whole number of front ends from 1 to 64$"),
        (65, {}, r"^--frontends 65: give"),
        (2, {"split_mode": "cpu-gpu"}, r"^--frontends and --split are not rendered together yet"),
    ],
)
def test_a_front_end_count_that_cannot_serve_is_refused_in_one_line(main_version, count, options, message):
    with pytest.raises(RenderError, match=message):
        render("gpu", model=main_version, frontends_count=count, **options)


def test_a_model_file_that_is_not_onnx_is_one_line_naming_it_not_a_parser_traceback(tmp_path):
    folder = artifact(tmp_path / "a", float_model(np.float32), {"variant": "int8", "precision": "int8"})
    (folder / "model.onnx").write_bytes(b"\x08\x07not an onnx graph at all")  # variant.json leaves the format to the graph
    write_manifest(folder)
    with pytest.raises(RenderError) as refused:
        render("gpu", model=ModelVersion.from_artifact(folder))
    message = str(refused.value)
    assert "\n" not in message
    assert f"{folder / 'model.onnx'} is not an ONNX model" in message and "export the artifact again" in message
