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


def _ufunc_into(f):
    """`into` of an operator whose meaning is ufunc `f` on operands of the output's dtype."""
    return lambda arrays, attrs, out: f(*arrays, out=out)


# {operator: (numpy meaning, float inputs only, ufunc computing it into an output or None)}
UNARY = {
    "nn.relu": (lambda x, a: np.maximum(x, np.zeros((), x.dtype)), False, None),
    "sigmoid": (lambda x, a: (1 / (1 + np.exp(-x))).astype(x.dtype), True, None),
    "erf": (lambda x, a: _erf(x), True, None),
    **{name: ((lambda f: lambda x, a: f(x))(f), fl, f) for name, f, fl in (
        ("tanh", np.tanh, True), ("exp", np.exp, True), ("log", np.log, True),
        ("sqrt", np.sqrt, True), ("negative", np.negative, False), ("abs", np.abs, False),
        ("floor", np.floor, True), ("round", np.rint, True), ("ceil", np.ceil, True))},
    "reciprocal": (lambda x, a: (1 / x).astype(x.dtype), True, None),
    "copy": (lambda x, a: x.copy(), False, None),
    "nn.leaky_relu": (lambda x, a: np.where(x >= 0, x, x * np.asarray(a["alpha"], x.dtype)).astype(x.dtype), True, None),
    "clip": (lambda x, a: np.minimum(np.maximum(x, np.asarray(a["a_min"]).astype(x.dtype)),
                                     np.asarray(a["a_max"]).astype(x.dtype)), False, None),
}
for _n, (_f, _fl, _u) in UNARY.items():
    _defs = {"nn.leaky_relu": {"alpha": 0.01}, "clip": {}}.get(_n, {})
    _req = ("a_min", "a_max") if _n == "clip" else ()
    register(_n, "elemwise", _unary_infer(_fl), _f, _defs, _req, into=_u and _ufunc_into(_u))

register("logical_not", "elemwise", _unary_infer(out_dtype="bool"), lambda x, a: np.logical_not(x),
         into=_ufunc_into(np.logical_not))


def _hard_sigmoid_ref(x, a):
    x64 = x.astype(np.float64)
    return np.clip(x64 * a["alpha"] + a["beta"], 0, 1).astype(x.dtype)


register("nn.hard_sigmoid", "elemwise", _unary_infer(True), _hard_sigmoid_ref, {"alpha": 0.2, "beta": 0.5})
register("nn.hard_swish", "elemwise", _unary_infer(True),
         lambda x, a: (x.astype(np.float64) * np.clip(x.astype(np.float64) / 6 + 0.5, 0, 1)).astype(x.dtype))
register("isnan", "elemwise", _unary_infer(out_dtype="bool"), lambda x, a: np.isnan(x),
         into=_ufunc_into(np.isnan))


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
         lambda x, a: x.astype(a["dtype"]), required=("dtype",),
         into=lambda arrays, a, out: np.copyto(out, arrays[0], casting="unsafe"))


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


def _divide_into(arrays, attrs, out):
    if out.dtype.kind == "f":
        np.divide(*arrays, out=out)
    else:                       # integers: truncated, through float64
        np.copyto(out, _int_div(*arrays))


# {operator: (numpy meaning, output dtype (None: the operands'), operands of one dtype,
#  `into` or None)}
BINARY = {
    **{name: ((lambda f: lambda a, b, t: f(a, b).astype(a.dtype))(f), None, True, _ufunc_into(f))
       for name, f in (("add", np.add), ("subtract", np.subtract), ("multiply", np.multiply))},
    "divide": (lambda a, b, t: _int_div(a, b), None, True, _divide_into),
    "power": (lambda a, b, t: _power(a, b), None, False, None),
    "floor_mod": (lambda a, b, t: _floor_mod(a, b), None, True, None),   # Python's %: the sign of b
    "trunc_mod": (lambda a, b, t: _trunc_mod(a, b), None, True, None),   # C's fmod: the sign of a
    **{name: ((lambda f: lambda a, b, t: f(a, b))(f), dtype, True, _ufunc_into(f)) for name, f, dtype in (
        ("maximum", np.maximum, None), ("minimum", np.minimum, None), ("equal", np.equal, "bool"),
        ("not_equal", np.not_equal, "bool"), ("less", np.less, "bool"), ("greater", np.greater, "bool"),
        ("less_equal", np.less_equal, "bool"), ("greater_equal", np.greater_equal, "bool"),
        ("logical_and", np.logical_and, "bool"), ("logical_or", np.logical_or, "bool"))},
}
for _n, (_f, _od, _same, _into) in BINARY.items():
    register(_n, "broadcast", _binary_infer(_od, _same), (lambda f: lambda a, b, at: f(a, b, at))(_f),
             into=_into)


def _where_into(arrays, attrs, out):
    c, a, b = arrays
    np.copyto(out, b)
    np.copyto(out, a, where=c)


def _where_infer(types, attrs):
    check_nargs(types, 3)
    c, a, b = types
    if c.dtype != "bool":
        raise GraphError(f"the condition must be bool, got {c.dtype}")
    if a.dtype != b.dtype:
        raise GraphError(f"operand dtypes differ: {a.dtype} and {b.dtype}")
    return TensorType(broadcast_shape(c.shape, a.shape, b.shape), a.dtype)


register("where", "broadcast", _where_infer, lambda c, a, b, at: np.where(c, a, b), into=_where_into)


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
