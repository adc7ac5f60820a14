"""Neural-network graph operators: conv (and transposed), dense, matmul, pooling,
reductions, softmax and the normalizations."""
from __future__ import annotations

import numpy as np
import sympy

from ...errors import GraphError
from .registry import check_nargs, broadcast_shape, register
from .types import TensorType


# ---------------------------------------------------------------------------- conv / dense

def conv_out_dims(in_dims, k_dims, strides, padding, dilation):
    nd = len(in_dims)
    out = []
    for d in range(nd):
        ek = (k_dims[d] - 1) * dilation[d] + 1
        o = (in_dims[d] + padding[d] + padding[d + nd] - ek) // strides[d] + 1
        if _never_positive(o):
            raise GraphError(f"output size {o} <= 0 in spatial dim {d}")
        out.append(o)
    return out


def _never_positive(o) -> bool:
    """Whether output size `o` is below 1 (for a symbolic one: at every size: an
    unpadded conv of a symbolic length is defined from its kernel's size on)."""
    return bool(o <= 0) if isinstance(o, int) else (o <= 0) is sympy.true


def _check_list(attrs, key, n):
    v = attrs[key]
    if not isinstance(v, (list, tuple)) or len(v) != n or not all(isinstance(x, int) for x in v):
        raise GraphError(f"attribute {key}={v!r} must be a list of {n} integers")
    return list(v)


def conv_infer(nd):
    """The type inference of an `nd`-d convolution."""
    def infer(types, attrs):
        check_nargs(types, 2)
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
        check_nargs(types, 2)
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
    register(f"nn.conv{_nd}d", "anchor", conv_infer(_nd), conv_ref,
             {"strides": [1] * _nd, "padding": [0] * (2 * _nd), "dilation": [1] * _nd, "groups": 1})
    register(f"nn.conv{_nd}d_transpose", "anchor", _convt_infer(_nd), conv_transpose_ref,
             {"strides": [1] * _nd, "padding": [0] * (2 * _nd), "dilation": [1] * _nd, "groups": 1,
              "output_padding": [0] * _nd})


def _dense_infer(types, attrs):
    check_nargs(types, 2)
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
    check_nargs(types, 2)
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
        if _never_positive(o):
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
        check_nargs(types, 1)
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
    check_nargs(types, 1)
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
    check_nargs(types, 1)
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
    check_nargs(types, nargs)
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
    check_nargs(types, 3)
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
    check_nargs(types, 5)
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


# ---------------------------------------------------------------------------- attention

def _attention_infer(types, attrs):
    if len(types) not in (3, 4):
        raise GraphError(f"expected 3 or 4 arguments (q, k^T, v[, mask]), got {len(types)}")
    q, kt, v = types[:3]
    if q.ndim != 4 or kt.ndim != 4 or v.ndim != 4:
        raise GraphError(f"q {q}, k^T {kt} and v {v} must be 4-D (batch, heads, rows, features)")
    if q.shape[:2] != kt.shape[:2] or q.shape[:2] != v.shape[:2] or q.shape[3] != kt.shape[2] \
            or kt.shape[3] != v.shape[2]:
        raise GraphError(f"q {q}, k^T {kt} and v {v} are not (B, H, M, D), (B, H, D, N), (B, H, N, E)")
    if len({q.dtype, kt.dtype, v.dtype}) != 1:
        raise GraphError(f"dtypes differ: {q.dtype}, {kt.dtype}, {v.dtype}")
    scores = (q.shape[0], q.shape[1], q.shape[2], kt.shape[3])
    if len(types) == 4:
        m = types[3]
        try:
            fits = m.ndim <= 4 and broadcast_shape(m.shape, scores) == scores and m.dtype == q.dtype
        except GraphError:
            fits = False
        if not fits:
            raise GraphError(f"mask {m} does not broadcast to the scores {scores} of dtype {q.dtype}")
    return TensorType((*q.shape[:3], v.shape[3]), q.dtype)


def attention_ref(q, kt, v, *rest):
    """softmax(q @ kt * scale [+ mask]) @ v, the softmax's NaNs (rows all -inf) taken as
    0 where `zero_nan` (the exporters' where(isnan(p), 0, p))."""
    a = rest[-1]
    s = np.matmul(q.astype(np.float64), kt.astype(np.float64)) * a["scale"]
    if len(rest) == 2:
        s = s + rest[0]
    with np.errstate(invalid="ignore"):
        p = _softmax_ref(s, {"axis": 3})
    if a["zero_nan"]:
        p = np.where(np.isnan(p), 0.0, p)
    return np.matmul(p, v.astype(np.float64)).astype(q.dtype)


# softmax(q k^T [* scale] [+ mask]) v in one operator: passes/attention.py makes it for a
# CPU target from the exporters' MatMul -> [Mul] -> [Add] -> Softmax -> MatMul
register("nn.attention", "opaque", _attention_infer, attention_ref, {"scale": 1.0, "zero_nan": False})
