"""The rules for a raw gRPC request's contents, as functions of names, datatypes and shapes (no server, no protobuf).

Typed contents lie only in their datatype's field, as Triton reads them (MLServer reads whichever field is
set first, so INT64 in int_contents or FP64 in fp32_contents were served, precision lost), and never beside
raw contents: a raw buffer's input is known only by its place among the inputs without contents. Each rule
returns the one-line message a client gets (gRPC INVALID_ARGUMENT), or None; `wrappers.transport.grpc_raw` applies them.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

# The typed contents each V2 datatype travels in, as Triton reads them. FP16 has none: it travels raw only.
TYPED_FIELDS: dict[str, str | None] = {
    "BOOL": "bool_contents",
    "UINT8": "uint_contents",
    "UINT16": "uint_contents",
    "UINT32": "uint_contents",
    "UINT64": "uint64_contents",
    "INT8": "int_contents",
    "INT16": "int_contents",
    "INT32": "int_contents",
    "INT64": "int64_contents",
    "FP16": None,
    "FP32": "fp32_contents",
    "FP64": "fp64_contents",
    "BYTES": "bytes_contents",
}


def typed_contents_problem(name: str, datatype: str, sent: Sequence[str], *, raw: bool) -> str | None:
    """What is wrong with an input's typed contents (`sent`: the fields set), beside raw contents or not."""
    if raw:
        return (
            f"input {name!r} has typed contents but the request also carries raw_input_contents; "
            "send every input's data in raw_input_contents (one buffer per input, in input order), or none there"
        )
    expected = TYPED_FIELDS.get(datatype, "")  # "": unknown, the runtime names the datatype it takes
    if expected == "" or list(sent) in ([], [expected]):
        return None
    if expected is None:
        return (
            f"input {name!r}: FP16 has no typed contents in the V2 protocol, got {' and '.join(sent)}; "
            "send FP16 data in raw_input_contents (2 bytes per element, little-endian), as tritonclient does"
        )
    return (
        f"input {name!r}: {datatype} data goes in contents.{expected}, got {' and '.join(sent)}; "
        f"send it in {expected} alone (or in raw_input_contents)"
    )


def missing_data_problem(
    name: str, datatype: str, shape: Sequence[int], *, has_contents: bool, in_shared_memory: bool
) -> str | None:
    """In a request without raw contents, an input that carries no data, with where its data goes. Unknown
    datatypes, regions, negative sizes and empty shapes are left for the runtime to name."""
    field = TYPED_FIELDS.get(datatype, "")
    if field == "" or has_contents or in_shared_memory or min(shape, default=1) < 0 or not math.prod(shape):
        return None
    where = "raw_input_contents (FP16 has no typed contents)" if field is None else f"contents.{field} or raw_input_contents"
    return f"input {name!r} ({datatype}, shape {list(shape)}) carries no data; send it in {where}"


def raw_buffers_problem(buffers: int, without_contents: Sequence[str]) -> str | None:
    """One raw buffer per input without contents (outside shared memory), in input order."""
    if buffers == len(without_contents):
        return None
    return (
        f"the request carries {buffers} raw_input_contents for {len(without_contents)} inputs without contents "
        f"({list(without_contents)}); send one raw buffer per input, in input order"
    )


def answers_raw(use_raw: bool, datatypes: Iterable[str]) -> bool:
    """Whether a response goes back as raw contents: as asked, or where an output is FP16, which the V2 protobuf
    has no typed contents for (and where one output is raw, all are), as Triton answers."""
    return use_raw or any(datatype == "FP16" for datatype in datatypes)
