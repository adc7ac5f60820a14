"""The table of ONNX converters (`@converter("OpType")` registers one; the family modules
use it) and what every converter works with: the conversion context `Ctx`, constant folding
of its inputs and small shape helpers."""
from __future__ import annotations

import numpy as np

from ...errors import GraphError
from ..ir import Call, Const, Expr, Function
from ..ir.registry import evaluate

CONVERTERS = {}


def converter(*names):
    def deco(fn):
        for n in names:
            CONVERTERS[n] = fn
        return fn
    return deco


def supported_operators():
    return sorted(CONVERTERS)


class Ctx:
    def __init__(self, opset):
        self.opset = opset
        self.node = None
        self._fold_memo = {}

    def call(self, op, args, **attrs):
        return Call(op, args, attrs, span=self.node.name or self.node.op_type if self.node is not None else "")

    def fold(self, e: Expr):
        """The value of `e` when it is computable from constants, else None."""
        return fold_value(e, self._fold_memo)

    def static(self, e: Expr, what="input") -> np.ndarray:
        """The value of `e`, which must be computable from constants."""
        v = self.fold(e)
        if v is None:
            raise GraphError(f"{what} must be known at compile time (a constant or computed from "
                             "constants and shapes), but it depends on a graph input")
        return v


def fold_value(e, memo):
    """Evaluates `e` if it depends on constants only; None otherwise."""
    if isinstance(e, Const):
        return e.data
    if not isinstance(e, Call) or isinstance(e.op, Function):
        return None
    if e in memo:
        return memo[e]
    vals = []
    for a in e.args:
        v = fold_value(a, memo)
        if v is None:
            memo[e] = None
            return None
        vals.append(v)
    out = evaluate(e.op, e.attrs, vals)
    memo[e] = out
    return out


# ---------------------------------------------------------------------------- helpers

def np_dtype(elem_type):
    """The numpy dtype name of an ONNX element type."""
    import onnx
    try:
        return str(np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem_type)))
    except Exception:
        raise GraphError(f"unsupported ONNX element type {elem_type}") from None


def norm_axis(ax, ndim):
    """ONNX axis `ax` (negative: from the end) as an index into `ndim` dimensions."""
    ax = int(ax)
    if not -ndim <= ax < max(ndim, 1):
        raise GraphError(f"axis {ax} out of range for rank {ndim}")
    return ax + ndim if ax < 0 else ax


def reshape_to(ctx, x, shape):
    """`x` reshaped to `shape` (itself when it has that shape)."""
    shape = [int(s) for s in shape]
    if tuple(shape) == x.type.shape:
        return x
    return ctx.call("reshape", [x], newshape=shape)


def const_like(value, dtype):
    """A constant of `value` in `dtype`."""
    return Const(np.asarray(value, dtype=dtype))
