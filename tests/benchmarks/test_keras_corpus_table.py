"""The keras-corpus report as the docs' table and plot: a line per model, refusals said in their row."""

from __future__ import annotations

from benchmarks.keras_corpus import markdown, plot


def variant(status: str, rows_per_s: float, ratio: float | None = None, reason: str = "ok") -> dict:
    figures = {"rows_per_s": rows_per_s, "rows_per_s_rounds": [rows_per_s]}
    if ratio is not None:
        figures = {**figures, "vs_fp32": ratio, "vs_fp32_rounds": [ratio]}
    return {"status": status, "reason": reason, "file_bytes": 2048, "batch_1": figures, "batch_32": figures}


PAYLOAD = {
    "created_at": "2026-12-05T09:00:00Z",
    "cores": 2,
    "load_average": {"before": 3.0, "after": 4.0},
    "rounds": 3,
    "seconds_per_round": 0.2,
    "fine_tune_epochs": 4,
    "models": [
        {
            "model": "mlp",
            "convert_seconds": 1.5,
            "parity": {"max_abs_diff": 2e-8, "identical_predictions": True},
            "onnx_bytes": 1024,
            "chosen": "int8",
            "variants": {
                "fp32": variant("accepted", 1000.0),
                "int8": variant("accepted", 1500.0, 1.5),
                "fp16": variant("rejected", 800.0, 0.8, reason="max abs diff 2e-2 > fp16 tolerance"),
                "pruned": variant("rejected", 1100.0, 1.1, reason="top-1 agreement 60% < 99%"),
            },
        },
        {
            "model": "mixed",
            "convert_seconds": 2.0,
            "parity": {"max_abs_diff": 0.0, "identical_predictions": True},
            "onnx_bytes": 4096,
            "chosen": "fp32",
            "variants": {"fp32": variant("accepted", 500.0)},
            "pruned_skipped": "output label is not floating-point: no gradient to fine-tune a pruned variant on",
        },
        {"model": "words", "convert_error": "StringLookup cannot become ONNX"},
    ],
}


def test_each_model_is_a_row_with_its_figures_and_choice():
    table = markdown(PAYLOAD)
    assert "| mlp | 1.5 | 2.0e-08 | yes | 1.0 | 2.0 | 1,000 | 1,500 (1.50x) | 800 (0.80x) | 1,100 (1.10x) |" in table
    assert "| mixed | 2.0 | 0.0e+00 | yes | 4.0 | n/a | 500 | n/a | n/a | n/a |" in table
    assert "| fp32, int8 | **int8** |" in table
    assert "| words | refused: StringLookup cannot become ONNX |" in table
    assert "- mlp fp16: max abs diff 2e-2 > fp16 tolerance" in table
    assert "- mlp pruned: top-1 agreement 60% < 99%" in table and "fine-tuned 4 epochs" in table
    assert "- mixed: output label is not floating-point" in table
    assert "load average 3.0 before, 4.0 after" in table


def test_the_plot_is_written(tmp_path):
    plot(PAYLOAD, tmp_path / "keras-corpus.png")
    assert (tmp_path / "keras-corpus.png").read_bytes()[:4] == b"\x89PNG"
