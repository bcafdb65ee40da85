"""Slim an fp32 ONNX graph offline, keeping it standard ONNX that any runtime loads.

Two passes, each doing what the other does not: onnxslim folds the shape arithmetic
converters emit around reshapes (Shape -> Gather -> Concat chains) and drops dead
nodes; ONNX Runtime's BASIC level then applies its portable fusions (MatMul + Add ->
Gemm, Conv + BatchNormalization). EXTENDED and ALL would add ORT- and CPU-specific
operators, so the shipped file stays at BASIC and the server applies the rest at load.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import onnx

STANDARD_DOMAINS = ("", "ai.onnx", "ai.onnx.ml")


class OptimizeError(Exception):
    """The slimmed graph is no longer plain, valid ONNX."""


def optimize_graph(model: onnx.ModelProto) -> onnx.ModelProto:
    """onnxslim, then ORT BASIC offline, then strip doc strings, unused initializers and opset imports."""
    import onnxslim

    slimmed = onnxslim.slim(model)
    optimized = _ort_basic(slimmed)
    optimized.ir_version = model.ir_version  # ORT may stamp its own; keep what readers of the source accept
    strip(optimized)
    nonstandard = sorted({node.domain for node in optimized.graph.node if node.domain not in STANDARD_DOMAINS})
    if nonstandard:
        raise OptimizeError(f"the optimized graph uses non-standard operator domains {nonstandard}")
    onnx.checker.check_model(optimized)
    return optimized


def _ort_basic(model: onnx.ModelProto) -> onnx.ModelProto:
    import onnxruntime as ort

    with tempfile.TemporaryDirectory(prefix="slipway-ort-") as tmp:
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
        options.optimized_model_filepath = str(Path(tmp) / "basic.onnx")
        ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
        return onnx.load(options.optimized_model_filepath)


def all_nodes(graph: onnx.GraphProto):
    """Every node of `graph` and of the subgraphs its nodes hold (a Loop's or an If's body), depth first."""
    for node in graph.node:
        yield node
        for attribute in node.attribute:
            for subgraph in [attribute.g] if attribute.HasField("g") else list(attribute.graphs):
                yield from all_nodes(subgraph)


def strip(model: onnx.ModelProto) -> None:
    """Remove what only costs bytes: doc strings, initializers nothing reads, opsets nothing uses.

    A node inside a subgraph (a recurrent layer's Loop body) may read an initializer of the
    main graph by name: those count as read, or the body would lose its constants.
    """
    model.doc_string = ""
    model.graph.doc_string = ""
    used_inputs: set[str] = set()
    used_domains: set[str] = set()
    for node in all_nodes(model.graph):
        node.doc_string = ""
        used_inputs.update(node.input)
        used_domains.add(node.domain or "")
    used_inputs.update(output.name for output in model.graph.output)
    unused = [init for init in model.graph.initializer if init.name not in used_inputs]
    for init in unused:
        model.graph.initializer.remove(init)
    unused_names = {init.name for init in unused}
    for value in [v for v in model.graph.input if v.name in unused_names]:
        model.graph.input.remove(value)
    keep = [opset for opset in model.opset_import if (opset.domain or "") in used_domains or opset.domain in ("", "ai.onnx")]
    del model.opset_import[:]
    model.opset_import.extend(keep)
