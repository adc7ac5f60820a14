"""The operator registry: for each graph operator its pattern kind (for fusion), default
attributes, type inference and a numpy reference (used by constant folding and tests).
The tensor-expression definitions live in `topi.py`, the schedules in `strategy.py`.

Pattern kinds, in fusion order: ``elemwise`` < ``broadcast`` < ``injective`` < ``reduce``
< ``anchor`` (conv/dense/matmul: elementwise consumers fuse into them) < ``opaque``.
"""
from __future__ import annotations

import math
from typing import Callable, Dict, List

import numpy as np

from ..errors import GraphError
from .ir import TensorType

KINDS = ("elemwise", "broadcast", "injective", "reduce", "anchor", "opaque")
_FLOATS = ("float16", "float32", "float64")


class OpDef:
    def __init__(self, name, kind, infer, ref, defaults=None, required=()):
        self.name = name
        self.kind = kind
        self._infer = infer
        self.ref = ref
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


def register(name, kind, infer, ref, defaults=None, required=()):
    OPS[name] = OpDef(name, kind, infer, ref, defaults, required)


def get_op(name, span=""):
    try:
        return OPS[name]
    except KeyError:
        where = f" (node '{span}')" if span else ""
        raise GraphError(f"unknown graph operator '{name}'{where}") from None


def _nargs(types, n, what=""):
    if len(types) != n:
        raise GraphError(f"expected {n} argument{'s' * (n != 1)}{what}, got {len(types)}")


# ---------------------------------------------------------------------------- elementwise

def _unary_infer(float_only=False, out_dtype=None):
    def infer(types, attrs):
        _nargs(types, 1)
        t = types[0]
        if float_only and t.dtype not in _FLOATS:
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
register("cast", "elemwise", lambda t, a: (_nargs(t, 1), TensorType(t[0].shape, a["dtype"]))[1],
         lambda x, a: x.astype(a["dtype"]), required=("dtype",))


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


def _binary_infer(out_dtype=None, same_dtype=True):
    def infer(types, attrs):
        _nargs(types, 2)
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
    _nargs(types, 3)
    c, a, b = types
    if c.dtype != "bool":
        raise GraphError(f"the condition must be bool, got {c.dtype}")
    if a.dtype != b.dtype:
        raise GraphError(f"operand dtypes differ: {a.dtype} and {b.dtype}")
    return TensorType(broadcast_shape(c.shape, a.shape, b.shape), a.dtype)


register("where", "broadcast", _where_infer, lambda c, a, b, at: np.where(c, a, b))


def _bias_add_infer(types, attrs):
    _nargs(types, 2)
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


# ---------------------------------------------------------------------------- conv / dense

def conv_out_dims(in_dims, k_dims, strides, padding, dilation):
    nd = len(in_dims)
    out = []
    for d in range(nd):
        ek = (k_dims[d] - 1) * dilation[d] + 1
        o = (in_dims[d] + padding[d] + padding[d + nd] - ek) // strides[d] + 1
        if o <= 0:
            raise GraphError(f"output size {o} <= 0 in spatial dim {d}")
        out.append(o)
    return out


def _check_list(attrs, key, n):
    v = attrs[key]
    if not isinstance(v, (list, tuple)) or len(v) != n or not all(isinstance(x, int) for x in v):
        raise GraphError(f"attribute {key}={v!r} must be a list of {n} integers")
    return list(v)


def _conv_infer(nd):
    def infer(types, attrs):
        _nargs(types, 2)
        x, w = types
        if x.ndim != nd + 2 or w.ndim != nd + 2:
            raise GraphError(f"data {x} and weight {w} must both have rank {nd + 2}")
        if x.dtype != w.dtype:
            raise GraphError(f"data and weight dtypes differ: {x.dtype} and {w.dtype}")
        g = attrs["groups"]
        s = _check_list(attrs, "strides", nd)
        p = _check_list(attrs, "padding", 2 * nd)
        dl = _check_list(attrs, "dilation", nd)
        if x.shape[1] != w.shape[1] * g or w.shape[0] % g:
            raise GraphError(f"channels: data {x.shape[1]}, weight {w.shape} with groups={g} do not fit")
        o = conv_out_dims(x.shape[2:], w.shape[2:], s, p, dl)
        return TensorType((x.shape[0], w.shape[0], *o), x.dtype)
    return infer


def conv_ref(x, w, a):
    nd = x.ndim - 2
    s, p, dl, g = a["strides"], a["padding"], a["dilation"], a["groups"]
    xp = np.pad(x, [(0, 0), (0, 0)] + [(p[d], p[d + nd]) for d in range(nd)])
    out_dims = conv_out_dims(x.shape[2:], w.shape[2:], s, p, dl)
    N, CO = x.shape[0], w.shape[0]
    cig = w.shape[1]
    cog = CO // g
    out = np.zeros((N, CO, *out_dims), dtype=np.float64)
    for kidx in np.ndindex(*w.shape[2:]):
        sl = tuple(slice(kidx[d] * dl[d], kidx[d] * dl[d] + (out_dims[d] - 1) * s[d] + 1, s[d]) for d in range(nd))
        for gi in range(g):
            patch = xp[(slice(None), slice(gi * cig, (gi + 1) * cig)) + sl].astype(np.float64)
            wk = w[(slice(gi * cog, (gi + 1) * cog), slice(None)) + kidx].astype(np.float64)
            out[:, gi * cog:(gi + 1) * cog] += np.einsum("nc...,oc->no...", patch, wk)
    return out.astype(x.dtype)


def _convt_infer(nd):
    def infer(types, attrs):
        _nargs(types, 2)
        x, w = types
        if x.ndim != nd + 2 or w.ndim != nd + 2:
            raise GraphError(f"data {x} and weight {w} must both have rank {nd + 2}")
        g = attrs["groups"]
        if x.shape[1] != w.shape[0]:
            raise GraphError(f"data channels {x.shape[1]} != weight dim 0 {w.shape[0]}")
        s = _check_list(attrs, "strides", nd)
        p = _check_list(attrs, "padding", 2 * nd)
        dl = _check_list(attrs, "dilation", nd)
        op = _check_list(attrs, "output_padding", nd)
        o = [(x.shape[2 + d] - 1) * s[d] + (w.shape[2 + d] - 1) * dl[d] + 1 + op[d] - p[d] - p[d + nd]
             for d in range(nd)]
        if any(v <= 0 for v in o):
            raise GraphError(f"output size {o} has a non-positive dimension")
        return TensorType((x.shape[0], w.shape[1] * g, *o), x.dtype)
    return infer


def conv_transpose_ref(x, w, a):
    nd = x.ndim - 2
    s, p, dl, g, opd = a["strides"], a["padding"], a["dilation"], a["groups"], a["output_padding"]
    N, CI = x.shape[:2]
    cog = w.shape[1]
    cig = CI // g
    full = [(x.shape[2 + d] - 1) * s[d] + (w.shape[2 + d] - 1) * dl[d] + 1 + opd[d] for d in range(nd)]
    out = np.zeros((N, cog * g, *full), np.float64)
    for kidx in np.ndindex(*w.shape[2:]):
        sl = tuple(slice(kidx[d] * dl[d], kidx[d] * dl[d] + (x.shape[2 + d] - 1) * s[d] + 1, s[d]) for d in range(nd))
        for gi in range(g):
            xi = x[:, gi * cig:(gi + 1) * cig].astype(np.float64)
            wk = w[(slice(gi * cig, (gi + 1) * cig), slice(None)) + kidx].astype(np.float64)
            out[(slice(None), slice(gi * cog, (gi + 1) * cog)) + sl] += np.einsum("nc...,co->no...", xi, wk)
    sl = tuple(slice(p[d], full[d] - p[d + nd]) for d in range(nd))
    return out[(slice(None), slice(None)) + sl].astype(x.dtype)


for _nd in (1, 2, 3):
    register(f"nn.conv{_nd}d", "anchor", _conv_infer(_nd), conv_ref,
             {"strides": [1] * _nd, "padding": [0] * (2 * _nd), "dilation": [1] * _nd, "groups": 1})
    register(f"nn.conv{_nd}d_transpose", "opaque", _convt_infer(_nd), conv_transpose_ref,
             {"strides": [1] * _nd, "padding": [0] * (2 * _nd), "dilation": [1] * _nd, "groups": 1,
              "output_padding": [0] * _nd})


def _dense_infer(types, attrs):
    _nargs(types, 2)
    x, w = types
    if x.ndim != 2 or w.ndim != 2 or x.shape[1] != w.shape[1]:
        raise GraphError(f"data {x} and weight {w} must be (M, K) and (N, K)")
    if x.dtype != w.dtype:
        raise GraphError(f"dtypes differ: {x.dtype} and {w.dtype}")
    if attrs["units"] is not None and attrs["units"] != w.shape[0]:
        raise GraphError(f"units={attrs['units']} but the weight has {w.shape[0]} rows")
    return TensorType((x.shape[0], w.shape[0]), x.dtype)


register("nn.dense", "anchor", _dense_infer,
         lambda x, w, a: (x.astype(np.float64) @ w.T.astype(np.float64)).astype(x.dtype), {"units": None})


def _matmul_infer(types, attrs):
    _nargs(types, 2)
    a, b = types
    if a.ndim < 2 or b.ndim < 2:
        raise GraphError(f"operands {a} and {b} need rank >= 2")
    if a.shape[-1] != b.shape[-2]:
        raise GraphError(f"inner dimensions differ: {a.shape} x {b.shape}")
    if a.dtype != b.dtype:
        raise GraphError(f"dtypes differ: {a.dtype} and {b.dtype}")
    batch = broadcast_shape(a.shape[:-2], b.shape[:-2])
    return TensorType((*batch, a.shape[-2], b.shape[-1]), a.dtype)


def _matmul_ref(a, b, at):
    if a.dtype.kind == "f":
        return np.matmul(a.astype(np.float64), b.astype(np.float64)).astype(a.dtype)
    return np.matmul(a, b)


register("nn.matmul", "anchor", _matmul_infer, _matmul_ref)


# ---------------------------------------------------------------------------- pooling

def pool_out_dims(in_dims, k, s, p, dl, ceil_mode):
    nd = len(in_dims)
    out = []
    for d in range(nd):
        ek = (k[d] - 1) * dl[d] + 1
        num = in_dims[d] + p[d] + p[d + nd] - ek
        o = (-(-num // s[d]) if ceil_mode else num // s[d]) + 1
        if ceil_mode and (o - 1) * s[d] >= in_dims[d] + p[d]:
            o -= 1   # the last window must start inside the input or its left padding
        if o <= 0:
            raise GraphError(f"pooling output size {o} <= 0 in spatial dim {d}")
        out.append(o)
    return out


def pool_out_type(x: TensorType, attrs, nd) -> TensorType:
    """The pooled type of `x` (N, C, spatial...) under the pool attributes."""
    k = _check_list(attrs, "pool_size", nd)
    s = _check_list(attrs, "strides", nd)
    p = _check_list(attrs, "padding", 2 * nd)
    dl = _check_list(attrs, "dilation", nd)
    o = pool_out_dims(x.shape[2:], k, s, p, dl, attrs["ceil_mode"])
    return TensorType((*x.shape[:2], *o), x.dtype)


def _pool_infer(nd):
    def infer(types, attrs):
        _nargs(types, 1)
        x = types[0]
        if x.ndim != nd + 2:
            raise GraphError(f"input {x} must have rank {nd + 2}")
        return pool_out_type(x, attrs, nd)
    return infer


def pool_ref(x, a, kind):
    nd = x.ndim - 2
    k, s, p, dl = a["pool_size"], a["strides"], a["padding"], a["dilation"]
    o = pool_out_dims(x.shape[2:], k, s, p, dl, a["ceil_mode"])
    out = np.zeros(x.shape[:2] + tuple(o), np.float64)
    cnt = np.zeros(tuple(o), np.float64)
    if kind == "max":
        out[:] = -np.inf
    for oi in np.ndindex(*o):
        for ki in np.ndindex(*k):
            pos = [oi[d] * s[d] - p[d] + ki[d] * dl[d] for d in range(nd)]
            inside = all(0 <= pos[d] < x.shape[2 + d] for d in range(nd))
            padded = all(-p[d] <= pos[d] < x.shape[2 + d] + p[d + nd] for d in range(nd))
            if inside:
                v = x[(slice(None), slice(None)) + tuple(pos)]
                if kind == "max":
                    out[(slice(None), slice(None)) + oi] = np.maximum(out[(slice(None), slice(None)) + oi], v)
                else:
                    out[(slice(None), slice(None)) + oi] += v
            if inside or (padded and a.get("count_include_pad")):
                cnt[oi] += 1
    if kind == "avg":
        out = out / np.maximum(cnt, 1)
    return out.astype(x.dtype)


for _nd in (1, 2, 3):
    _pd = {"pool_size": [1] * _nd, "strides": [1] * _nd, "padding": [0] * (2 * _nd),
           "dilation": [1] * _nd, "ceil_mode": False}
    register(f"nn.max_pool{_nd}d", "reduce", _pool_infer(_nd), lambda x, a: pool_ref(x, a, "max"), _pd)
    register(f"nn.avg_pool{_nd}d", "reduce", _pool_infer(_nd), lambda x, a: pool_ref(x, a, "avg"),
             dict(_pd, count_include_pad=False))


def _gap_infer(types, attrs):
    _nargs(types, 1)
    x = types[0]
    if x.ndim < 3:
        raise GraphError(f"input {x} needs rank >= 3")
    return TensorType(x.shape[:2] + (1,) * (x.ndim - 2), x.dtype)


register("nn.global_avg_pool", "reduce", _gap_infer,
         lambda x, a: x.mean(axis=tuple(range(2, x.ndim)), keepdims=True).astype(x.dtype))


# ---------------------------------------------------------------------------- reductions

def _axes(attrs, ndim):
    axes = attrs["axis"]
    if axes is None:
        return list(range(ndim))
    for ax in axes:
        if not 0 <= ax < ndim:
            raise GraphError(f"axis {ax} out of range for rank {ndim}")
    if len(set(axes)) != len(axes):
        raise GraphError(f"repeated axis in {axes}")
    return sorted(axes)


def _reduce_infer(types, attrs):
    _nargs(types, 1)
    x = types[0]
    axes = _axes(attrs, x.ndim)
    if attrs["keepdims"]:
        shape = [1 if d in axes else s for d, s in enumerate(x.shape)]
    else:
        shape = [s for d, s in enumerate(x.shape) if d not in axes]
    return TensorType(shape, x.dtype)


def _reduce_ref(fn):
    def ref(x, a):
        axes = tuple(_axes(a, x.ndim))
        if fn == "mean":
            r = x.astype(np.float64).mean(axis=axes, keepdims=a["keepdims"])
        elif fn in ("max", "min") and any(x.shape[d] == 0 for d in axes):
            shape = [1 if d in axes else s for d, s in enumerate(x.shape)] if a["keepdims"] else \
                [s for d, s in enumerate(x.shape) if d not in axes]
            if x.dtype.kind == "f":
                fill = -np.inf if fn == "max" else np.inf
            elif x.dtype == np.bool_:
                fill = fn == "min"
            else:
                info = np.iinfo(x.dtype)
                fill = info.min if fn == "max" else info.max
            r = np.full(shape, fill, x.dtype)
        else:
            r = getattr(np, {"max": "max", "min": "min", "sum": "sum", "prod": "prod"}[fn])(x, axis=axes, keepdims=a["keepdims"])
        return np.asarray(r).astype(x.dtype)
    return ref


for _n in ("sum", "mean", "max", "min", "prod"):
    register(_n, "reduce", _reduce_infer, _reduce_ref(_n), {"axis": None, "keepdims": False})


def _axis_infer(types, attrs, nargs=1):
    _nargs(types, nargs)
    x = types[0]
    if not 0 <= attrs["axis"] < x.ndim:
        raise GraphError(f"axis {attrs['axis']} out of range for rank {x.ndim}")
    return x


def _softmax_ref(x, a, log=False):
    x64 = x.astype(np.float64)
    m = x64.max(axis=a["axis"], keepdims=True)
    e = np.exp(x64 - m)
    s = e.sum(axis=a["axis"], keepdims=True)
    return ((x64 - m - np.log(s)) if log else e / s).astype(x.dtype)


register("nn.softmax", "opaque", _axis_infer, _softmax_ref, {"axis": -1})
register("nn.log_softmax", "opaque", _axis_infer, lambda x, a: _softmax_ref(x, a, True), {"axis": -1})


def _ln_infer(types, attrs):
    _nargs(types, 3)
    x, g, b = types
    ax = attrs["axis"]
    if not 0 <= ax < x.ndim:
        raise GraphError(f"axis {ax} out of range for rank {x.ndim}")
    for t, nm in ((g, "scale"), (b, "bias")):
        if t.dtype != x.dtype:
            raise GraphError(f"{nm} dtype {t.dtype} differs from the data's {x.dtype}")
        try:
            if broadcast_shape(x.shape[ax:], t.shape) != tuple(x.shape[ax:]):
                raise GraphError("")
        except GraphError:
            raise GraphError(f"{nm} {t} does not broadcast to the normalized shape {x.shape[ax:]}") from None
    return x


def _ln_ref(x, g, b, a):
    axes = tuple(range(a["axis"], x.ndim))
    x64 = x.astype(np.float64)
    m = x64.mean(axis=axes, keepdims=True)
    v = ((x64 - m) ** 2).mean(axis=axes, keepdims=True)
    return ((x64 - m) / np.sqrt(v + a["epsilon"]) * g + b).astype(x.dtype)


register("nn.layer_norm", "opaque", _ln_infer, _ln_ref, {"axis": -1, "epsilon": 1e-5})


def _bn_infer(types, attrs):
    _nargs(types, 5)
    x = types[0]
    if x.ndim < 2:
        raise GraphError(f"input {x} needs rank >= 2")
    for t in types[1:]:
        if t.shape != (x.shape[1],) or t.dtype != x.dtype:
            raise GraphError(f"parameter {t} does not fit {x.shape[1]} channels of {x.dtype}")
    return x


def _bn_ref(x, g, b, m, v, a):
    shape = (1, -1) + (1,) * (x.ndim - 2)
    r = (x - m.reshape(shape)) / np.sqrt(v.reshape(shape) + a["epsilon"]) * g.reshape(shape) + b.reshape(shape)
    return r.astype(x.dtype)


register("nn.batch_norm", "broadcast", _bn_infer, _bn_ref, {"epsilon": 1e-5})


# ---------------------------------------------------------------------------- layout / data movement

def _reshape_infer(types, attrs):
    _nargs(types, 1)
    x = types[0]
    ns = attrs["newshape"]
    if not all(isinstance(s, int) and s >= 0 for s in ns):
        raise GraphError(f"newshape {ns} must be non-negative integers (resolve -1 and 0 first)")
    if int(np.prod(ns, dtype=np.int64)) != x.size:
        raise GraphError(f"cannot reshape {x} ({x.size} elements) to {tuple(ns)}")
    return TensorType(ns, x.dtype)


register("reshape", "injective", _reshape_infer, lambda x, a: x.reshape(a["newshape"]), required=("newshape",))


def _transpose_infer(types, attrs):
    _nargs(types, 1)
    x = types[0]
    ax = attrs["axes"]
    if sorted(ax) != list(range(x.ndim)):
        raise GraphError(f"axes {ax} is not a permutation of {x.ndim} dimensions")
    return TensorType([x.shape[i] for i in ax], x.dtype)


register("transpose", "injective", _transpose_infer, lambda x, a: np.transpose(x, a["axes"]),
         required=("axes",))


def _concat_infer(types, attrs):
    if not types:
        raise GraphError("needs at least one input")
    x = types[0]
    ax = attrs["axis"]
    if not 0 <= ax < x.ndim:
        raise GraphError(f"axis {ax} out of range for rank {x.ndim}")
    total = 0
    for t in types:
        if t.ndim != x.ndim or t.dtype != x.dtype or any(
                t.shape[d] != x.shape[d] for d in range(x.ndim) if d != ax):
            raise GraphError(f"input {t} does not fit {x} along axis {ax}")
        total += t.shape[ax]
    shape = list(x.shape)
    shape[ax] = total
    return TensorType(shape, x.dtype)


register("concatenate", "injective", _concat_infer,
         lambda *xs: np.concatenate(xs[:-1], axis=xs[-1]["axis"]), required=("axis",))


def slice_len(begin, end, stride):
    if stride > 0:
        return max(0, -(-(end - begin) // stride))
    return max(0, -(-(begin - end) // -stride))


def _slice_infer(types, attrs):
    _nargs(types, 1)
    x = types[0]
    b, e, s = attrs["begin"], attrs["end"], attrs["strides"]
    if not (len(b) == len(e) == len(s) == x.ndim):
        raise GraphError(f"begin/end/strides need {x.ndim} entries each")
    shape = []
    for d in range(x.ndim):
        if s[d] == 0:
            raise GraphError("a stride of 0")
        lo, hi = (0, x.shape[d]) if s[d] > 0 else (-1, x.shape[d] - 1)
        if not (lo <= b[d] <= hi and lo <= e[d] <= hi):
            raise GraphError(f"begin {b[d]}/end {e[d]} out of range for dim {d} of size {x.shape[d]} (normalize first)")
        shape.append(slice_len(b[d], e[d], s[d]))
    return TensorType(shape, x.dtype)


def _slice_ref(x, a):
    sl = tuple(slice(b, (None if e < 0 else e), s) for b, e, s in zip(a["begin"], a["end"], a["strides"]))
    return x[sl].copy()


register("strided_slice", "injective", _slice_infer, _slice_ref, required=("begin", "end", "strides"))


def _data_and_indices(types, attrs):
    """(data type, indices type, axis) of a gather-like operator, checked."""
    _nargs(types, 2)
    x, idx = types
    ax = attrs["axis"]
    if not 0 <= ax < x.ndim:
        raise GraphError(f"axis {ax} out of range for rank {x.ndim}")
    if not idx.dtype.startswith(("int", "uint")):
        raise GraphError(f"indices must be integers, got {idx.dtype}")
    return x, idx, ax


def _take_infer(types, attrs):
    x, idx, ax = _data_and_indices(types, attrs)
    return TensorType(x.shape[:ax] + idx.shape + x.shape[ax + 1:], x.dtype)


def _take_ref(x, idx, a):
    ax = a["axis"]
    i = np.where(idx < 0, idx + x.shape[ax], idx)
    return np.take(x, i, axis=ax)


register("take", "injective", _take_infer, _take_ref, {"axis": 0})


def _gather_elements_infer(types, attrs):
    x, idx, ax = _data_and_indices(types, attrs)
    if idx.ndim != x.ndim or any(idx.shape[d] > x.shape[d] for d in range(x.ndim) if d != ax):
        raise GraphError(f"indices {idx} do not fit data {x} (same rank, no larger off axis {ax})")
    return TensorType(idx.shape, x.dtype)


def _gather_elements_ref(x, idx, a):
    ax = a["axis"]
    i = np.where(idx < 0, idx + x.shape[ax], idx)
    return np.take_along_axis(x[tuple(slice(0, s) if d != ax else slice(None) for d, s in enumerate(idx.shape))],
                              i, axis=ax)


register("gather_elements", "injective", _gather_elements_infer, _gather_elements_ref, {"axis": 0})


def _pad_infer(types, attrs):
    _nargs(types, 1)
    x = types[0]
    pw = attrs["pad_width"]
    if len(pw) != x.ndim or any(len(p) != 2 for p in pw):
        raise GraphError(f"pad_width needs {x.ndim} [before, after] pairs")
    shape = [s + p[0] + p[1] for s, p in zip(x.shape, pw)]
    if any(v < 0 for v in shape):
        raise GraphError(f"padding {pw} makes a negative size")
    if attrs["mode"] not in ("constant", "edge", "reflect", "wrap"):
        raise GraphError(f"unknown pad mode {attrs['mode']!r}")
    return TensorType(shape, x.dtype)


def _pad_ref(x, a):
    pw = a["pad_width"]
    crop = tuple(slice(max(0, -b), x.shape[d] - max(0, -e)) for d, (b, e) in enumerate(pw))
    x = x[crop]
    pos = [(max(0, b), max(0, e)) for b, e in pw]
    if a["mode"] == "constant":
        return np.pad(x, pos, constant_values=np.asarray(a["pad_value"]).astype(x.dtype))
    return np.pad(x, pos, mode={"edge": "edge", "reflect": "reflect", "wrap": "wrap"}[a["mode"]])


register("nn.pad", "injective", _pad_infer, _pad_ref, {"pad_value": 0.0, "mode": "constant"},
         required=("pad_width",))


def _bcast_to_infer(types, attrs):
    _nargs(types, 1)
    x = types[0]
    shape = tuple(attrs["shape"])
    if broadcast_shape(x.shape, shape) != shape:
        raise GraphError(f"{x} does not broadcast to {shape}")
    return TensorType(shape, x.dtype)


register("broadcast_to", "broadcast", _bcast_to_infer,
         lambda x, a: np.broadcast_to(x, a["shape"]).copy(), required=("shape",))


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


# position-dependent operators (trilu, cumsum, top-k, max-pool indices) register themselves
from . import ops_index  # noqa: E402,F401
