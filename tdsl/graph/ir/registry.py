"""The operator registry: for each graph operator its pattern kind (for fusion), default
attributes, type inference and a numpy reference (used by constant folding and tests).
The operators register themselves from the family modules beside this one (ops_math, ops_nn,
ops_tensor, ops_index), which the package imports; the tensor-expression definitions live in
`strategy/topi*.py`, the schedules in `strategy/`.

Pattern kinds, in fusion order: ``elemwise`` < ``broadcast`` < ``injective`` < ``reduce``
< ``anchor`` (conv/dense/matmul: elementwise consumers fuse into them) < ``opaque``.
"""
from __future__ import annotations

from typing import Dict, List

import numpy as np

from ...errors import GraphError

KINDS = ("elemwise", "broadcast", "injective", "reduce", "anchor", "opaque")
FLOATS = ("float16", "float32", "float64")


class OpDef:
    """`ref(*arrays, attrs)`: the operator's numpy meaning. `into(arrays, attrs, out)`, where
    an operator has one: the same meaning written into `out` (the output's shape and dtype,
    operands of the dtypes type inference allows), with no temporary of the output's size."""

    def __init__(self, name, kind, infer, ref, defaults=None, required=(), into=None):
        self.name = name
        self.kind = kind
        self._infer = infer
        self.ref = ref
        self.into = into
        self.defaults = dict(defaults or {})
        self.required = tuple(required)

    def normalize_attrs(self, attrs, call=None):
        out = dict(attrs)
        for k in attrs:
            if k not in self.defaults and k not in self.required:
                where = f" (node '{call.span}')" if call is not None and call.span else ""
                raise GraphError(f"{self.name}{where}: unknown attribute '{k}'; known: "
                                 f"{', '.join(list(self.required) + list(self.defaults)) or 'none'}")
        for k in self.required:
            if k not in out:
                raise GraphError(f"{self.name}: attribute '{k}' is required")
        for k, v in self.defaults.items():
            out.setdefault(k, v)
        return {k: out[k] for k in list(self.required) + list(self.defaults)}

    def infer(self, types, attrs):
        return self._infer(types, attrs)


OPS: Dict[str, OpDef] = {}


def register(name, kind, infer, ref, defaults=None, required=(), into=None):
    OPS[name] = OpDef(name, kind, infer, ref, defaults, required, into)


def get_op(name, span=""):
    try:
        return OPS[name]
    except KeyError:
        where = f" (node '{span}')" if span else ""
        raise GraphError(f"unknown graph operator '{name}'{where}") from None


def check_nargs(types, n, what=""):
    """Raises a GraphError unless an operator got `n` arguments."""
    if len(types) != n:
        raise GraphError(f"expected {n} argument{'s' * (n != 1)}{what}, got {len(types)}")

def broadcast_shape(*shapes):
    rank = max(len(s) for s in shapes)
    out = []
    for d in range(rank):
        dims = {s[d - rank + len(s)] for s in shapes if d - rank + len(s) >= 0}
        dims.discard(1)
        if len(dims) > 1:
            raise GraphError(f"shapes {', '.join(str(tuple(s)) for s in shapes)} do not broadcast")
        out.append(dims.pop() if dims else 1)
    return tuple(out)


def evaluate(call_op, attrs, arrays: List[np.ndarray]):
    """The numpy meaning of one operator (constant folding, tests)."""
    opdef = get_op(call_op)
    with np.errstate(all="ignore"):
        r = np.asarray(opdef.ref(*arrays, attrs))
    if call_op == "transpose":
        # a view: a folded weight transpose (MatMul's weights turned to dense's layout) is
        # read again only by a kernel's weight packing, which copies anyway
        return r
    return r if r.flags.c_contiguous else r.copy(order="C")
