"""`deployments recommend` with GPU histories (DCGM exporter series): replicas from how busy the cards were, a warning
where their memory came near full, the sums over several cards and pods, refusals of histories it cannot trust,
and the gpu overlay it writes rendering and validating."""

from __future__ import annotations

import json
import math
import os
import urllib.parse

import numpy as np
import pytest
import yaml

from deployments.sizing.recommend.gpu_history import FREE_METRIC, USED_METRIC, UTIL_METRIC, parse_gpu_memory, parse_gpu_util
from deployments.sizing.recommend.gpu_sizing import GpuSettings, recommend_gpu
from deployments.sizing.recommend.sizing import recommend, with_gpu
from deployments.sizing.usage import UsageError, parse_query_range
from slipway.paths import PROJECT_ROOT
from tests.commands import run_command
from tests.conftest import json_http_server
from tests.deployments.traces import MIB, dcgm, dcgm_answer, diurnal, matrix, times, write

PODS = ("digits-a", "digits-b")
CARD_MIB = 23034.0  # an L4's framebuffer as DCGM reports it (used + free)
MARGIN, TARGET = 0.15, 0.70


def flat(value):
    return lambda stamps: np.full(stamps.shape, float(value))


def gpu_util(cards, days=1.0, **labels):
    """cards: {(pod, gpu index): utilisation(stamps) in percent}."""
    stamps = times(days)
    return dcgm_answer(dcgm(UTIL_METRIC, {card: (stamps, level(stamps)) for card, level in cards.items()}, **labels))


def gpu_memory(cards, days=1.0, **labels):
    """cards: {(pod, gpu index): used MiB(stamps)} on cards of CARD_MIB."""
    stamps = times(days)
    used = {card: (stamps, level(stamps)) for card, level in cards.items()}
    free = {card: (stamps, CARD_MIB - values) for card, (stamps, values) in used.items()}
    return dcgm_answer(dcgm(USED_METRIC, used, **labels), dcgm(FREE_METRIC, free, **labels))


def one_card_each(level, pods=PODS):
    return {(pod, 0): level for pod in pods}


def sized(util_level, used_level=flat(6000), pods=PODS, **knobs):
    util = parse_gpu_util(gpu_util(one_card_each(util_level, pods)), source="util")
    memory = parse_gpu_memory(gpu_memory(one_card_each(used_level, pods)), source="memory")
    return recommend_gpu(util, memory, margin=MARGIN, **knobs)


def test_a_busy_gpu_asks_for_more_replicas_and_sets_the_gpu_overlays_range():
    busy = sized(flat(90))  # two cards at 90%: 1.8 GPUs of work, each replica's card at 70% at the peak
    assert busy.gpus_per_replica == 1 and busy.peak_busy_gpus == pytest.approx(1.8)
    assert (busy.min_replicas, busy.max_replicas) == (math.ceil(1.8 / TARGET), math.ceil(1.8 * (1 + MARGIN) / TARGET)) == (3, 3)
    assert any("whole cards" in line and "MIG" in line and "time-slicing" in line for line in busy.reasoning)
    # a daily wave: the peak is the p99 of the busy sum, the trough its lowest value
    wave = sized(lambda t: diurnal(t, 10, 80))
    stamps = times(1)
    peak = float(np.quantile(2 * diurnal(stamps, 10, 80) / 100, 0.99))
    assert wave.peak_busy_gpus == pytest.approx(peak, rel=1e-3)
    assert (wave.min_replicas, wave.max_replicas) == (1, math.ceil(peak * (1 + MARGIN) / TARGET)) == (1, 3)
    # the request rate asks for 1-2 replicas at 50 req/s each; the GPUs ask for more: the gpu overlay takes the larger
    history = {
        kind: parse_query_range(matrix({pod: (stamps, level(stamps)) for pod in PODS}), kind=kind, source=kind)
        for kind, level in (("cpu", flat(0.5)), ("memory", flat(300 * MIB)), ("rps", flat(20)))
    }
    rec = recommend(history["cpu"], history["memory"], history["rps"], capacity_rps=50)
    assert (rec.min_replicas, rec.max_replicas) == (2, 2)
    combined = with_gpu(rec, busy)
    assert (combined.min_replicas, combined.max_replicas) == (3, 3) == (combined.hpa["minReplicas"], combined.hpa["maxReplicas"])
    assert combined.as_dict()["gpu"]["max_replicas"] == 3 and "the max set by the GPUs" in combined.reasoning[-1]
    # a stricter target asks for more cards
    assert sized(flat(90), settings=GpuSettings(target_utilization=0.5)).max_replicas == math.ceil(1.8 * 1.15 / 0.5)


def test_an_idle_gpu_gets_the_minimum_and_a_note_that_whole_cards_sit_unused():
    idle = sized(flat(2))
    assert (idle.min_replicas, idle.max_replicas) == (1, 1)
    assert any("nearly idle" in warning and "MIG" in warning for warning in idle.warnings)
    assert (sized(flat(2), min_floor=2).min_replicas, sized(flat(2), min_floor=2).max_replicas) == (2, 2)
    assert not any("idle" in warning for warning in sized(flat(50)).warnings)


def test_memory_near_the_cards_size_warns_and_names_what_frees_memory():
    full = sized(flat(60), used_level=flat(0.95 * CARD_MIB))
    assert full.memory_peak_share == pytest.approx(0.95, abs=1e-4) and full.memory_card_mib == pytest.approx(CARD_MIB)
    (warning,) = [line for line in full.warnings if "GPU memory" in line]
    for fix in ("cannot take a larger batch", "max_batch_rows", "gpu_mem_limit_bytes", "fp16", "--gpu-node-selector"):
        assert fix in warning
    assert "2 of 2 card(s)" in warning

    # one short spike to 92% counts (memory is sized from its peak); 60% of the card does not warn
    def spike(stamps):
        values = np.full(stamps.shape, 0.6 * CARD_MIB)
        values[40] = 0.92 * CARD_MIB
        return values

    assert any("GPU memory reached 92%" in line for line in sized(flat(60), used_level=spike).warnings)
    assert not [line for line in sized(flat(60), used_level=flat(0.6 * CARD_MIB)).warnings if "GPU memory" in line]
    assert not sized(flat(60), used_level=spike, settings=GpuSettings(memory_warning=0.95)).warnings


def test_several_cards_and_pods_are_summed_per_timestamp():
    stamps = times(1)
    half = stamps.size // 2
    cards = {
        ("digits-a", 0): (stamps, np.full(stamps.shape, 60.0)),
        ("digits-a", 1): (stamps, np.full(stamps.shape, 30.0)),
        ("digits-b", 0): (stamps, np.full(stamps.shape, 50.0)),
        ("digits-c", 0): (stamps[half:], np.full(stamps.size - half, 40.0)),
    }  # a third pod, for the second half
    util = parse_gpu_util(dcgm_answer(dcgm(UTIL_METRIC, cards, pod_label="exported_pod")), source="util")
    # relabelled by a scrape without honor_labels: the workload's pod is exported_pod, not the exporter's pod
    assert set(util.pods.values()) == {"digits-a", "digits-b", "digits-c"} and len(util.gpus) == 4
    when, busy = util.busy()
    assert np.allclose(busy[:half], 1.4) and np.allclose(busy[half:], 1.8)
    assert list(util.cards()[1][[0, -1]]) == [3, 4]
    used = {card: (t, np.full(t.shape, 8000.0)) for card, (t, _) in cards.items()}
    free = {card: (t, CARD_MIB - v) for card, (t, v) in used.items()}
    memory = parse_gpu_memory(
        dcgm_answer(dcgm(USED_METRIC, used, pod_label="exported_pod"), dcgm(FREE_METRIC, free, pod_label="exported_pod")),
        source="memory",
    )
    rec = recommend_gpu(util, memory, margin=MARGIN)
    assert rec.peak_busy_gpus == pytest.approx(1.8) and rec.trough_busy_gpus == pytest.approx(1.4)
    assert (rec.min_replicas, rec.max_replicas) == (math.ceil(1.4 / TARGET), math.ceil(1.8 * 1.15 / TARGET)) == (2, 3)
    assert rec.cards_seen == 4 and rec.memory_peak_share == pytest.approx(8000 / CARD_MIB)


def _cli(tmp_path, env_extra, *args):
    env = {key: value for key, value in os.environ.items() if key != "PROMETHEUS_URL"}
    env.update({**env_extra, "SLIPWAY_REPORTS_DIR": str(tmp_path / "reports")})
    command = ("deployments", "recommend", "--model", "digits", *args, "--out-dir", str(tmp_path / "out"))  # no cluster to ask
    return run_command(*command, cwd=PROJECT_ROOT, env=env, timeout=120)


def _histories(tmp_path, util_level=flat(90), used_level=flat(6000)):
    """CPU, memory and requests/s files of two pods, and their GPU files: the command line that reads them."""
    stamps = times(1)
    bodies = {
        "cpu": {pod: (stamps, np.full(stamps.shape, 0.4)) for pod in PODS},
        "memory": {pod: (stamps, np.full(stamps.shape, 900.0 * MIB)) for pod in PODS},
        "rps": {pod: (stamps, np.full(stamps.shape, 20.0)) for pod in PODS},
    }
    args = [arg for kind, body in bodies.items() for arg in (f"--{kind}", str(write(tmp_path, kind, matrix(body))))]
    files = {"gpu-util": gpu_util(one_card_each(util_level)), "gpu-memory": gpu_memory(one_card_each(used_level))}
    return args + [arg for kind, body in files.items() for arg in (f"--{kind}", str(write(tmp_path, kind, body)))]


def test_the_command_writes_a_gpu_overlay_that_renders_and_validates(tmp_path, reports_env, seldon_crd_schema):
    from deployments.render.overlay import RenderOptions, render
    from deployments.render.records import ModelVersion
    from deployments.render.validate import validate_documents

    result = _cli(
        tmp_path, reports_env, *_histories(tmp_path, used_level=flat(0.93 * CARD_MIB)), "--capacity-rps", "50", "--json"
    )
    assert result.returncode == 0, result.stderr
    report = json.loads((tmp_path / "reports" / "recommend.json").read_text())
    assert json.loads(result.stdout)["gpu"] == report["gpu"]
    gpu = report["gpu"]
    assert (gpu["gpus_per_replica"], gpu["resource"], gpu["min_replicas"], gpu["max_replicas"]) == (1, "nvidia.com/gpu", 3, 3)
    assert (report["min_replicas"], report["max_replicas"], report["overlay_base"]) == (3, 3, "gpu")
    assert any("max_batch_rows" in line for line in report["warnings"]) and "max_batch_rows" in " ".join(result.stderr.split())
    ops = yaml.safe_load((tmp_path / "out" / "overlay" / "patch.yaml").read_text())
    (resources,) = [op["value"] for op in ops if op["path"].endswith("/resources")]
    assert resources["requests"]["nvidia.com/gpu"] == resources["limits"]["nvidia.com/gpu"] == 1
    kustomization = yaml.safe_load((tmp_path / "out" / "overlay" / "kustomization.yaml").read_text())
    assert kustomization["resources"][0].endswith("overlays/gpu")
    version = ModelVersion(name="digits", version="1", uri="s3://m/digits/1", digest="sha256:" + "ab" * 32)
    rendered = render(tmp_path / "out" / "overlay", RenderOptions(model=version, engine="builtin"))
    checked = validate_documents(rendered.docs, crd_schema=seldon_crd_schema)
    assert checked.ok, checked.errors
    component = rendered.seldon_deployment["spec"]["predictors"][0]["componentSpecs"][0]
    container = component["spec"]["containers"][0]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == container["resources"]["requests"]["nvidia.com/gpu"] == 1
    assert container["resources"]["requests"]["memory"] == f"{math.ceil(900 * 1.15)}Mi"  # the sizing still applies
    assert (component["hpaSpec"]["minReplicas"], component["hpaSpec"]["maxReplicas"]) == (3, 3)
    assert component["spec"]["nodeSelector"] == {"nvidia.com/gpu.present": "true"}  # the gpu overlay's placement stays
    assert (tmp_path / "reports" / "recommend.png").read_bytes().startswith(b"\x89PNG")
    # the same pods without GPU histories: the cpu overlay, and no gpu key
    result = _cli(tmp_path, reports_env, *_histories(tmp_path)[:6], "--capacity-rps", "50")
    assert result.returncode == 0, result.stderr
    report = json.loads((tmp_path / "reports" / "recommend.json").read_text())
    assert report["gpu"] is None and report["overlay_base"] == "cpu" and report["max_replicas"] == 2


def _spoil_util(name):
    def spoil(data):
        for item in data["data"]["result"]:
            item["metric"]["__name__"] = name
        return data

    return spoil


def _drop_free(data):
    data["data"]["result"] = [item for item in data["data"]["result"] if item["metric"]["__name__"] == USED_METRIC]
    return data


def _in_bytes(data):
    for item in data["data"]["result"]:
        item["values"] = [[t, f"{float(v) * MIB:.6g}"] for t, v in item["values"]]
    return data


def _aggregated(data):
    for item in data["data"]["result"]:
        item["metric"] = {"pod": item["metric"]["pod"]}  # sum by (pod) (...): no card left to name
    return data


BAD = {
    "memory metric as utilisation": ("gpu-util", _spoil_util(USED_METRIC), f"holds {USED_METRIC}, not {UTIL_METRIC}"),
    "cpu metric as utilisation": ("gpu-util", _spoil_util("container_cpu_usage_seconds_total"), "not DCGM_FI_DEV_GPU_UTIL"),
    "empty utilisation": (
        "gpu-util",
        lambda d: {"status": "success", "data": {"resultType": "matrix", "result": []}},
        "has no samples: the query matched no series",
    ),
    "empty memory": (
        "gpu-memory",
        lambda d: {"status": "success", "data": {"resultType": "matrix", "result": []}},
        "has no samples: the query matched no series",
    ),
    "utilisation over 100": ("gpu-util", lambda d: json.loads(json.dumps(d).replace('"90"', '"180"')), "outside 0-100"),
    "cards aggregated away": ("gpu-util", _aggregated, "aggregated the cards away"),
    "used without free": ("gpu-memory", _drop_free, f"has {USED_METRIC} but no {FREE_METRIC}"),
    "bytes for MiB": ("gpu-memory", _in_bytes, "look like bytes"),
    "not a query_range": (
        "gpu-memory",
        lambda d: {"status": "success", "data": {"resultType": "vector", "result": []}},
        "not an instant query",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_gpu_history_it_cannot_trust_is_one_line_and_exit_2(tmp_path, reports_env, case):
    kind, spoil, message = BAD[case]
    args = _histories(tmp_path)
    path = args[args.index(f"--{kind}") + 1]
    with open(path) as handle:
        data = spoil(json.load(handle))
    with open(path, "w") as handle:
        json.dump(data, handle)
    result = _cli(tmp_path, reports_env, *args, "--capacity-rps", "50")
    assert result.returncode == 2, result.stderr
    assert message in " ".join(result.stderr.split()) and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "reports" / "recommend.json").exists()


@pytest.mark.parametrize(
    "extra, message",
    [
        ("drop memory", "give both GPU histories: --gpu-memory missing"),
        ("--gpu-target=70", "--gpu-target: Input should be less than or equal to 1 (got 70.0)"),
        ("--gpu-memory-warning=1.5", "--gpu-memory-warning: Input should be less than 1"),
    ],
)
def test_a_missing_gpu_file_or_a_bad_gpu_flag_names_it(tmp_path, reports_env, extra, message):
    args = _histories(tmp_path)
    args = args[:-2] if extra == "drop memory" else [*args, extra]
    result = _cli(tmp_path, reports_env, *args, "--capacity-rps", "50")
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert message in " ".join(result.stderr.split()) and len(result.stderr.strip().splitlines()) == 1


def test_gpu_and_cpu_histories_of_different_pods_are_refused():
    util = parse_gpu_util(gpu_util(one_card_each(flat(50), ("other-a",))), source="util")
    memory = parse_gpu_memory(gpu_memory(one_card_each(flat(6000), ("other-a",))), source="memory")
    from deployments.sizing.recommend.gpu_history import check_gpu_histories

    with pytest.raises(UsageError, match="exported_pod"):
        check_gpu_histories(util, memory, set(PODS))
    other = parse_gpu_memory(gpu_memory(one_card_each(flat(6000), ("other-b",))), source="memory")
    with pytest.raises(UsageError, match="describe different GPUs"):
        check_gpu_histories(util, other, {"other-a"})


def test_gpu_series_are_queried_from_prometheus_where_they_exist(tmp_path, reports_env):
    stamps = times(1)
    plain = {
        kind: matrix({pod: (stamps, np.full(stamps.shape, value)) for pod in PODS})
        for kind, value in (("cpu", 0.3), ("memory", 100.0 * MIB), ("rps", 10.0))
    }
    answers = {
        "container_cpu_usage_seconds_total": plain["cpu"],
        "container_memory_working_set_bytes": plain["memory"],
        "model_infer_request_success_total": plain["rps"],
        UTIL_METRIC: gpu_util(one_card_each(flat(90))),
        USED_METRIC: gpu_memory(one_card_each(flat(6000))),
    }
    nothing = {"status": "success", "data": {"resultType": "matrix", "result": []}}
    asked: list[str] = []

    def prometheus(with_gpus):
        def answer(path):
            query = urllib.parse.parse_qs(urllib.parse.urlsplit(path).query)["query"][0]
            asked.append(query)
            return next((data for name, data in answers.items() if name in query and (with_gpus or "DCGM" not in name)), nothing)

        return answer

    for with_gpus in (True, False):
        asked.clear()
        with json_http_server(prometheus(with_gpus)) as url:
            result = _cli(tmp_path, {**reports_env, "PROMETHEUS_URL": url}, "--capacity-rps", "50", "--namespace", "prod")
        assert result.returncode == 0, result.stderr
        dcgm_queries = [query for query in asked if "DCGM" in query]
        assert len(dcgm_queries) == 2 and all('namespace="prod",container="digits"' in query for query in dcgm_queries)
        report = json.loads((tmp_path / "reports" / "recommend.json").read_text())
        # a model on CPUs: its DCGM queries match nothing, and the recommendation is the CPU one
        assert (report["gpu"] is not None, report["overlay_base"]) == ((True, "gpu") if with_gpus else (False, "cpu"))
