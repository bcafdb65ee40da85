"""The benchmark's figures to reach, computed from two export reports."""

from export.bench import targets
from export.report import Chosen, ExportReport, Row


def row(name: str, *, file_bytes=1000, p50=1.0, throughput=100.0, drop=0.0, status="accepted") -> Row:
    return Row(
        name=name,
        status=status,
        reason="",
        path=None,
        precision="fp32",
        file_bytes=file_bytes,
        gzip_bytes=file_bytes,
        parameters=10,
        nonzero_parameters=10,
        accuracy=0.98,
        accuracy_drop_points=drop,
        top1_agreement=1.0,
        max_abs_diff=0.0,
        latency_batch=1,
        p50_latency_ms=p50,
        p95_latency_ms=p50,
        throughput_batch=32,
        throughput=throughput,
    )


def report(model: str, baseline: Row, variants: list[Row]) -> ExportReport:
    return ExportReport(
        model=model,
        source={},
        source_model=None,
        data_fingerprint=None,
        evaluation={},
        calibration={},
        budget={},
        optimize_for="latency",
        measurement={},
        baseline=baseline,
        variants=variants,
        chosen=Chosen(name=variants[0].name, path="x", reason="r"),
        out_dir="x",
    )


def test_targets_are_ratios_of_rows_measured_in_the_same_run():
    digits = report(
        "digits",
        row("keras", status="baseline", p50=1.0),
        [
            row("fp32", file_bytes=600, p50=0.04, throughput=50_000),
            row("int8", file_bytes=160, p50=0.03, throughput=120_000, drop=0.6),  # too much accuracy lost
            row("slim", file_bytes=150, p50=0.02, throughput=200_000, drop=0.3),
        ],
    )
    mobilenet = report(
        "mobilenetv2",
        row("keras", status="baseline", p50=30.0),
        [
            row("fp32", p50=20.0, throughput=100.0),
            row("int8", p50=10.0, throughput=120.0),
        ],
    )
    found = {t.figure: t for t in targets(digits, mobilenet)}
    assert (
        found["digits: int8 file size vs fp32 (x smaller)"].value == 600 / 160
        and found["digits: int8 file size vs fp32 (x smaller)"].met
    )
    assert not found["digits: int8 accuracy drop (points)"].met
    assert (
        found["mobilenetv2: int8 vs fp32 throughput at batch 32"].value == 1.2
        and not found["mobilenetv2: int8 vs fp32 throughput at batch 32"].met
    )
    assert found["digits: fp32 ONNX Runtime vs Keras tf.function, p50 at batch 1"].value == 25.0
    assert found["mobilenetv2: fp32 ONNX Runtime vs Keras tf.function, p50 at batch 1"].value == 1.5
    assert found["digits: slim (half the filters) vs fp32, throughput at batch 32"].value == 4.0
    assert found["digits: slim accuracy drop (points)"].met
