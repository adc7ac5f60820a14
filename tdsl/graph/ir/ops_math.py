"""Elementwise and broadcasting graph operators: unary math, comparisons, arithmetic,
`where`, `nn.bias_add`."""
from __future__ import annotations

import math

import numpy as np

from ...errors import GraphError
from .registry import FLOATS, check_nargs, broadcast_shape, register
from .types import TensorType


# ---------------------------------------------------------------------------- elementwise

def _unary_infer(float_only=False, out_dtype=None):
    def infer(types, attrs):
        check_nargs(types, 1)
        t = types[0]
        if float_only and t.dtype not in FLOATS:
            raise GraphError(f"needs a floating-point input, got {t.dtype}")
        return TensorType(t.shape, out_dtype or t.dtype)
    return infer


def _erf(x):
    v = np.vectorize(math.erf, otypes=[np.float64])(x.astype(np.float64))
    return v.astype(x.dtype)


UNARY = {
    "nn.relu": (lambda x, a: np.maximum(x, np.zeros((), x.dtype)), False),
    "sigmoid": (lambda x, a: (1 / (1 + np.exp(-x))).astype(x.dtype), True),
    "tanh": (lambda x, a: np.tanh(x), True),
    "erf": (lambda x, a: _erf(x), True),
    "exp": (lambda x, a: np.exp(x), True),
    "log": (lambda x, a: np.log(x), True),
    "sqrt": (lambda x, a: np.sqrt(x), True),
    "negative": (lambda x, a: -x, False),
    "abs": (lambda x, a: np.abs(x), False),
    "floor": (lambda x, a: np.floor(x), True),
    "round": (lambda x, a: np.rint(x), True),
    "ceil": (lambda x, a: np.ceil(x), True),
    "reciprocal": (lambda x, a: (1 / x).astype(x.dtype), True),
    "copy": (lambda x, a: x.copy(), False),
    "nn.leaky_relu": (lambda x, a: np.where(x >= 0, x, x * np.asarray(a["alpha"], x.dtype)).astype(x.dtype), True),
    "clip": (lambda x, a: np.minimum(np.maximum(x, np.asarray(a["a_min"]).astype(x.dtype)),
                                     np.asarray(a["a_max"]).astype(x.dtype)), False),
}
for _n, (_f, _fl) in UNARY.items():
    _defs = {"nn.leaky_relu": {"alpha": 0.01}, "clip": {}}.get(_n, {})
    _req = ("a_min", "a_max") if _n == "clip" else ()
    register(_n, "elemwise", _unary_infer(_fl), _f, _defs, _req)

register("logical_not", "elemwise", _unary_infer(out_dtype="bool"), lambda x, a: np.logical_not(x))


def _hard_sigmoid_ref(x, a):
    x64 = x.astype(np.float64)
    return np.clip(x64 * a["alpha"] + a["beta"], 0, 1).astype(x.dtype)


register("nn.hard_sigmoid", "elemwise", _unary_infer(True), _hard_sigmoid_ref, {"alpha": 0.2, "beta": 0.5})
register("nn.hard_swish", "elemwise", _unary_infer(True),
         lambda x, a: (x.astype(np.float64) * np.clip(x.astype(np.float64) / 6 + 0.5, 0, 1)).astype(x.dtype))
register("isnan", "elemwise", _unary_infer(out_dtype="bool"), lambda x, a: np.isnan(x))


def _isinf_ref(x, a):
    r = np.isinf(x)
    if not a["detect_positive"]:
        r &= x < 0
    if not a["detect_negative"]:
        r &= x > 0
    return r


register("isinf", "elemwise", _unary_infer(out_dtype="bool"), _isinf_ref,
         {"detect_positive": True, "detect_negative": True})
register("cast", "elemwise", lambda t, a: (check_nargs(t, 1), TensorType(t[0].shape, a["dtype"]))[1],
         lambda x, a: x.astype(a["dtype"]), required=("dtype",))


def _binary_infer(out_dtype=None, same_dtype=True):
    def infer(types, attrs):
        check_nargs(types, 2)
        a, b = types
        if same_dtype and a.dtype != b.dtype:
            raise GraphError(f"operand dtypes differ: {a.dtype} and {b.dtype}")
        return TensorType(broadcast_shape(a.shape, b.shape), out_dtype or a.dtype)
    return infer


def _int_div(a, b):
    if np.issubdtype(a.dtype, np.integer):
        with np.errstate(divide="ignore"):
            q = np.trunc(a.astype(np.float64) / b.astype(np.float64))
        return q.astype(a.dtype)
    return (a / b).astype(a.dtype)


def _power(a, b):
    if np.issubdtype(a.dtype, np.integer) and np.issubdtype(b.dtype, np.integer):
        return np.power(a, b).astype(a.dtype)
    return np.power(a.astype(np.float64), b.astype(np.float64)).astype(a.dtype)


def _floor_mod(a, b):
    if a.dtype.kind in "iu":
        with np.errstate(all="ignore"):
            return np.where(b == 0, 0, np.mod(a, np.where(b == 0, 1, b))).astype(a.dtype)
    return np.mod(a, b).astype(a.dtype)


def _trunc_mod(a, b):
    if a.dtype.kind in "iu":
        return np.where(b == 0, 0, np.fmod(a, np.where(b == 0, 1, b))).astype(a.dtype)
    return np.fmod(a, b).astype(a.dtype)


BINARY = {
    "add": (lambda a, b, t: (a + b).astype(a.dtype), None, True),
    "subtract": (lambda a, b, t: (a - b).astype(a.dtype), None, True),
    "multiply": (lambda a, b, t: (a * b).astype(a.dtype), None, True),
    "divide": (lambda a, b, t: _int_div(a, b), None, True),
    "power": (lambda a, b, t: _power(a, b), None, False),
    "floor_mod": (lambda a, b, t: _floor_mod(a, b), None, True),   # Python's %: the sign of b
    "trunc_mod": (lambda a, b, t: _trunc_mod(a, b), None, True),   # C's fmod: the sign of a
    "maximum": (lambda a, b, t: np.maximum(a, b), None, True),
    "minimum": (lambda a, b, t: np.minimum(a, b), None, True),
    "equal": (lambda a, b, t: np.equal(a, b), "bool", True),
    "not_equal": (lambda a, b, t: np.not_equal(a, b), "bool", True),
    "less": (lambda a, b, t: np.less(a, b), "bool", True),
    "greater": (lambda a, b, t: np.greater(a, b), "bool", True),
    "less_equal": (lambda a, b, t: np.less_equal(a, b), "bool", True),
    "greater_equal": (lambda a, b, t: np.greater_equal(a, b), "bool", True),
    "logical_and": (lambda a, b, t: np.logical_and(a, b), "bool", True),
    "logical_or": (lambda a, b, t: np.logical_or(a, b), "bool", True),
}
for _n, (_f, _od, _same) in BINARY.items():
    register(_n, "broadcast", _binary_infer(_od, _same), (lambda f: lambda a, b, at: f(a, b, at))(_f))


def _where_infer(types, attrs):
    check_nargs(types, 3)
    c, a, b = types
    if c.dtype != "bool":
        raise GraphError(f"the condition must be bool, got {c.dtype}")
    if a.dtype != b.dtype:
        raise GraphError(f"operand dtypes differ: {a.dtype} and {b.dtype}")
    return TensorType(broadcast_shape(c.shape, a.shape, b.shape), a.dtype)


register("where", "broadcast", _where_infer, lambda c, a, b, at: np.where(c, a, b))


def _bias_add_infer(types, attrs):
    check_nargs(types, 2)
    x, b = types
    ax = attrs["axis"]
    if not 0 <= ax < x.ndim:
        raise GraphError(f"axis {ax} out of range for rank {x.ndim}")
    if b.shape != (x.shape[ax],) or b.dtype != x.dtype:
        raise GraphError(f"bias {b} does not fit axis {ax} of {x}")
    return x


def _bias_add_ref(x, b, a):
    shape = [1] * x.ndim
    shape[a["axis"]] = -1
    return x + b.reshape(shape)


register("nn.bias_add", "broadcast", _bias_add_infer, _bias_add_ref, {"axis": 1})
