"""The table of ONNX converters (`@converter("OpType")` registers one; the family modules
use it) and what every converter works with: the conversion context `Ctx`, constant folding
of its inputs and small shape helpers."""
from __future__ import annotations

import numpy as np

from ...errors import GraphError
from ..ir import Call, Const, DimValues, Expr, Function
from ..ir.dims import as_dim
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
        # size variable name -> the largest size the model can run at: a slice of a
        # constant table (positions 0..sequence of 512 embeddings) bounds its end
        self.upper_bounds = {}

    def slice_end(self, end, size):
        """min(end, size) for a slice of an axis of `size` elements: a size variable that
        ends a slice of a fixed axis is taken to be at most that axis (the network cannot
        run beyond it), recorded in `upper_bounds` and checked per call."""
        import sympy
        if isinstance(end, sympy.Symbol) and isinstance(size, int):
            self.upper_bounds[end.name] = min(size, self.upper_bounds.get(end.name, size))
            return end
        return dmin(end, size)

    def call(self, op, args, **attrs):
        return Call(op, args, attrs, span=self.node.name or self.node.op_type if self.node is not None else "")

    def fold(self, e: Expr):
        """The value of `e` when it is computable from constants, else None."""
        return fold_value(e, self._fold_memo)

    def static(self, e: Expr, what="input") -> np.ndarray:
        """The value of `e`, which must be computable from constants and shapes: a numpy
        array, of object dtype where it holds symbolic sizes (`dims`)."""
        v = self.fold(e)
        if v is None:
            raise GraphError(f"{what} must be known at compile time (a constant or computed from "
                             "constants and shapes), but it depends on a graph input")
        return v

    def dims(self, e: Expr, what="input") -> list:
        """`static(e)` as a list of dimensions (ints and symbolic sizes)."""
        return [as_dim(d) for d in np.asarray(self.static(e, what)).reshape(-1).tolist()]

    def value(self, arr):
        """A graph value for a folded array: a constant, or symbolic sizes (DimValues)."""
        return DimValues(arr, "int64") if arr.dtype == object else Const(arr)


def fold_value(e, memo):
    """Evaluates `e` if it depends on constants and shapes only; None otherwise. Shape
    arithmetic on symbolic sizes runs on numpy object arrays of sympy expressions, and
    a result whose entries all came out as numbers is an int64 array again."""
    if isinstance(e, (Const, DimValues)):
        return e.data
    if not isinstance(e, Call) or isinstance(e.op, Function) or not e.type.static:
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
    if any(v.dtype == object for v in vals):
        out = _fold_symbolic(e, vals)
    else:
        out = evaluate(e.op, e.attrs, vals)
    memo[e] = out
    return out


def _fold_symbolic(e, vals):
    """`evaluate` on symbolic sizes; None where the operator has no meaning on them
    (a float op of a size is computed at run time instead)."""
    import sympy
    if e.op == "cast":
        if not e.attrs["dtype"].startswith("int"):
            return None
        out = vals[0]
    else:
        # numpy gives a bare sympy value, not an array, for a 0-d object array
        vals = [v.reshape(1) if v.ndim == 0 and v.dtype == object else v for v in vals]
        try:
            out = np.asarray(evaluate(e.op, e.attrs, vals)).reshape(e.type.shape)
        except (TypeError, ValueError, AttributeError, ZeroDivisionError):
            return None
    if out.dtype == bool or out.dtype != object:
        return out
    flat = [sympy.sympify(x) for x in out.reshape(-1).tolist()]
    if any(x in (sympy.true, sympy.false) or x.is_Relational for x in flat):
        if all(x in (sympy.true, sympy.false) for x in flat):
            return np.asarray([bool(x) for x in flat]).reshape(out.shape)
        return None
    if all(x.is_Integer for x in flat):
        return np.asarray([int(x) for x in flat], np.int64).reshape(out.shape)
    return np.asarray(flat + [None], dtype=object)[:-1].reshape(out.shape)


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


def dmin(a, b):
    """min of two dimensions (a sympy Min where a size variable leaves it open)."""
    if isinstance(a, int) and isinstance(b, int):
        return min(a, b)
    import sympy
    return as_dim(sympy.Min(a, b))


def dmax(a, b):
    if isinstance(a, int) and isinstance(b, int):
        return max(a, b)
    import sympy
    return as_dim(sympy.Max(a, b))


def reshape_to(ctx, x, shape):
    """`x` reshaped to `shape` (itself when it has that shape)."""
    shape = [as_dim(s) for s in shape]
    if tuple(shape) == x.type.shape:
        return x
    return ctx.call("reshape", [x], newshape=shape)


def const_like(value, dtype):
    """A constant of `value` in `dtype`."""
    return Const(np.asarray(value, dtype=dtype))
