"""Which channels of a Keras functional model must shrink together, and the narrower model that keeps the strongest.

Removing a filter from a Conv2D removes a channel from every tensor it flows into. A
residual addition ties the channels of its inputs to each other (they must stay
aligned), a concatenation lays its inputs' channels side by side, batch norm and
depthwise convolutions act per channel, and a flatten repeats the channels at every
position. Walking the graph once, each tensor gets a channel map (segments, each of a
channel *group*); groups joined by an addition merge (union-find). A group that reaches
a model input or output, or a layer whose use of channels is unknown, is frozen: it
keeps every channel. Every other group keeps the channels with the largest L1 norm
summed over all the convolutions and dense layers that produce it (each normalised to
its mean, so one large layer does not decide alone), and every layer is sliced to match.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from export.keras_copy import finalize_states

PRODUCERS = ("Conv2D", "Dense")
# Layers that act on each channel by itself: the channel map passes through unchanged.
PER_CHANNEL = (
    "InputLayer",
    "MaxPooling2D",
    "AveragePooling2D",
    "GlobalAveragePooling2D",
    "GlobalMaxPooling2D",
    "Dropout",
    "SpatialDropout2D",
    "ReLU",
    "ZeroPadding2D",
    "Cropping2D",
    "UpSampling2D",
    "BatchNormalization",
    "DepthwiseConv2D",
    "Activation",
    "LeakyReLU",
    "ELU",
    "Identity",
)
MERGES = ("Add", "Subtract", "Multiply", "Maximum", "Minimum", "Average")
ACROSS_CHANNELS = ("softmax", "log_softmax")  # activations that mix channels: their groups cannot shrink


class ChannelGroupError(ValueError):
    """The model cannot be walked as a graph of single-use layers."""


Segments = list[tuple[int, int]]  # (group id, channels) in order along the channel axis


@dataclass
class Groups:
    """Union-find over channel groups, with their size, producers and whether they are frozen."""

    size: list[int] = field(default_factory=list)
    frozen: list[bool] = field(default_factory=list)
    producers: list[list[str]] = field(default_factory=list)
    parent: list[int] = field(default_factory=list)

    def new(self, channels: int, *, frozen: bool = False, producer: str | None = None) -> int:
        self.parent.append(len(self.parent))
        self.size.append(channels)
        self.frozen.append(frozen)
        self.producers.append([producer] if producer else [])
        return len(self.parent) - 1

    def find(self, gid: int) -> int:
        while self.parent[gid] != gid:
            self.parent[gid] = self.parent[self.parent[gid]]
            gid = self.parent[gid]
        return gid

    def union(self, a: int, b: int) -> None:
        a, b = self.find(a), self.find(b)
        if a != b:
            self.parent[b] = a
            self.frozen[a] = self.frozen[a] or self.frozen[b]
            self.producers[a] += self.producers[b]

    def freeze(self, segments: Segments) -> None:
        for gid, _ in segments:
            self.frozen[self.find(gid)] = True


@dataclass
class Plan:
    """The walked graph: channel maps of each layer's input(s) and output, and the channels each group keeps."""

    groups: Groups
    inputs: dict[str, list[Segments]]
    outputs: dict[str, Segments]
    keep: dict[int, np.ndarray]  # root group -> sorted channel indices kept

    def shrinkable(self) -> list[int]:
        return sorted(root for root in self.keep)

    def kept(self, segments: Segments) -> np.ndarray:
        """Indices kept along a tensor's channel axis."""
        parts, offset = [], 0
        for gid, channels in segments:
            root = self.groups.find(gid)
            parts.append((self.keep[root] if root in self.keep else np.arange(channels)) + offset)
            offset += channels
        return np.concatenate(parts) if parts else np.arange(0)


def _channels(tensor) -> int:
    if tensor.shape[-1] is None:  # e.g. token ids of any length: no channel axis to slim
        raise ChannelGroupError(f"tensor {tensor.name!r} has no fixed size on its last axis ({tuple(tensor.shape)})")
    return int(tensor.shape[-1])


def walk(model) -> tuple[Groups, dict[str, list[Segments]], dict[str, Segments]]:
    """Give every tensor a channel map, merging and freezing groups as the layers demand."""
    groups = Groups()
    maps: dict[int, Segments] = {}
    layer_inputs: dict[str, list[Segments]] = {}
    layer_outputs: dict[str, Segments] = {}
    inputs = getattr(model, "inputs", None)  # a subclassed model has none (Keras raises AttributeError)
    if not inputs:
        raise ChannelGroupError(f"{type(model).__name__} is a subclassed model: it has no graph of layers to follow")
    for tensor in inputs:
        maps[id(tensor)] = [(groups.new(_channels(tensor), frozen=True), _channels(tensor))]
    for layer in model.layers:
        if len(layer._inbound_nodes) != 1:
            raise ChannelGroupError(
                f"layer {layer.name!r} is used {len(layer._inbound_nodes)} times; filter pruning needs each layer used once"
            )
        node = layer._inbound_nodes[0]
        kind = type(layer).__name__
        if kind == "InputLayer":
            continue
        taken = [maps.get(id(tensor)) for tensor in node.input_tensors]
        ins = [segments for segments in taken if segments is not None]
        if len(ins) != len(taken):
            raise ChannelGroupError(f"layer {layer.name!r} takes a tensor from outside the model's graph")
        outs = node.output_tensors
        layer_inputs[layer.name] = ins
        config = layer.get_config()
        activation = str(config.get("activation", ""))
        out: Segments | None
        if kind in PRODUCERS and config.get("groups", 1) == 1 and len(ins) == 1:
            out = [
                (groups.new(_channels(outs[0]), frozen=activation in ACROSS_CHANNELS, producer=layer.name), _channels(outs[0]))
            ]
        elif kind == "DepthwiseConv2D" and config.get("depth_multiplier", 1) != 1:
            out = None
        elif (
            kind in PER_CHANNEL
            and len(ins) == 1
            and activation not in ACROSS_CHANNELS
            and _channels(outs[0]) == sum(n for _, n in ins[0])
        ):
            out = ins[0]
        elif kind in MERGES and len({tuple(n for _, n in segments) for segments in ins}) == 1:
            for segments in ins[1:]:
                for (a, _), (b, _) in zip(ins[0], segments):
                    groups.union(a, b)
            out = ins[0]
        elif kind == "Concatenate" and config.get("axis", -1) in (-1, len(outs[0].shape) - 1):
            out = [segment for segments in ins for segment in segments]
        elif kind == "Flatten" and len(ins) == 1:
            out = ins[0] * int(np.prod(node.input_tensors[0].shape[1:-1]))
        else:
            out = None
        if out is None:  # a layer whose use of channels is unknown: nothing around it may shrink
            for segments in ins:
                groups.freeze(segments)
            out = [(groups.new(_channels(outs[0]), frozen=True), _channels(outs[0]))]
            for tensor in outs[1:]:
                maps[id(tensor)] = [(groups.new(_channels(tensor), frozen=True), _channels(tensor))]
        maps[id(outs[0])] = out
        layer_outputs[layer.name] = out
    for tensor in model.outputs:
        groups.freeze(maps[id(tensor)])
    return groups, layer_inputs, layer_outputs


def plan(model, fraction: float) -> Plan:
    """Walk the graph and choose, per shrinkable group, the `1 - fraction` of channels with the largest L1 norm."""
    groups, layer_inputs, layer_outputs = walk(model)
    keep: dict[int, np.ndarray] = {}
    roots = {groups.find(gid) for gid in range(len(groups.parent))}
    for root in sorted(roots):
        if groups.frozen[root] or not groups.producers[root] or groups.size[root] < 2:
            continue
        score = np.zeros(groups.size[root])
        for name in groups.producers[root]:
            kernel = np.asarray(model.get_layer(name).get_weights()[0])
            norms = np.abs(kernel).reshape(-1, kernel.shape[-1]).sum(axis=0)
            score += norms / max(float(norms.mean()), 1e-12)
        count = max(1, int(round(groups.size[root] * (1 - fraction))))
        keep[root] = np.sort(np.argsort(score, kind="stable")[-count:])
    return Plan(groups, layer_inputs, layer_outputs, keep)


def narrow_model(model, narrow: Plan):
    """A copy of `model` with every shrinkable group cut to its kept channels, surviving weights copied."""
    import keras

    def resize(layer):
        config = layer.get_config()
        kind = type(layer).__name__
        if layer.name in narrow.outputs and kind in PRODUCERS:
            width = len(narrow.kept(narrow.outputs[layer.name]))
            config["filters" if kind == "Conv2D" else "units"] = width
        return type(layer).from_config(config)

    slim = keras.models.clone_model(model, clone_function=resize)
    slim.name = f"{model.name}_slim"
    for layer in model.layers:
        weights = [np.asarray(w) for w in layer.get_weights()]
        if not weights or layer.name not in narrow.inputs:
            continue
        kind = type(layer).__name__
        source = narrow.inputs[layer.name][0]
        if kind in PRODUCERS:
            kernel, *rest = weights
            out_keep = narrow.kept(narrow.outputs[layer.name])
            kernel = np.take(np.take(kernel, narrow.kept(source), axis=-2), out_keep, axis=-1)
            weights = [kernel, *(bias[out_keep] for bias in rest)]
        elif kind == "DepthwiseConv2D":
            keep = narrow.kept(source)
            weights = [np.take(weights[0], keep, axis=2), *(bias[keep] for bias in weights[1:])]
        elif kind == "BatchNormalization":
            keep = narrow.kept(source)
            weights = [w[keep] for w in weights]
        slim.get_layer(layer.name).set_weights(weights)
    finalize_states(slim)  # an adapted Normalization's mean and variance, made from the weights just set
    return slim
