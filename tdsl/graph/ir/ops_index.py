"""Graph operators whose value depends on element positions, not only on element values:
triangular masks, running sums, top-k, max-pool argmax and interpolation along an axis. Each has its registry entry
(kind, type inference, numpy reference) here, added to the registry on import (the package
imports this module); their tensor-expression definitions are in strategy/topi_index.py.

The graph IR gives every Call one tensor type, so ONNX nodes with two outputs (TopK,
MaxPool with Indices) become two graph operators where the second reads the first's
result instead of redoing its work: ``topk_indices`` yields the indices and the values are
a ``gather_elements`` of them; ``nn.max_pool_indices`` takes the pooled maxima as an input
and only searches each window for the position that holds them.
"""
from __future__ import annotations

import numpy as np

from ...errors import GraphError
from .ops_nn import pool_out_type
from .registry import _nargs, register
from .types import TensorType


def _axis_attr(attrs, ndim):
    ax = attrs["axis"]
    if not isinstance(ax, int) or not 0 <= ax < ndim:
        raise GraphError(f"axis {ax} out of range for rank {ndim}")
    return ax


# ---------------------------------------------------------------------------- interp

def _interp_infer(types, attrs):
    _nargs(types, 3)
    x, idx, w = types
    ax = _axis_attr(attrs, x.ndim)
    if idx.ndim != 2 or w.shape != idx.shape or not idx.dtype.startswith("int") or w.dtype != x.dtype:
        raise GraphError(f"interp: taps {idx} and weights {w} must be (taps, size), int and {x.dtype}")
    return TensorType(x.shape[:ax] + (idx.shape[1],) + x.shape[ax + 1:], x.dtype)


def _interp_ref(x, idx, w, a):
    ax = a["axis"]
    shape = (-1,) + (1,) * (x.ndim - ax - 1)
    out = 0
    for i, wt in zip(idx, w):
        out = out + np.take(x, i, axis=ax) * wt.reshape(shape)
    return out.astype(x.dtype)


# Resize's linear and cubic modes, one axis: out[.., o, ..] = sum_t w[t, o] * x[.., idx[t, o], ..].
# Injective, so the axes of a resize fuse into one gather kernel (a take-multiply-add chain
# per axis reads x twice and does not fuse).
register("interp", "injective", _interp_infer, _interp_ref, required=("axis",))


# ---------------------------------------------------------------------------- trilu

def _trilu_infer(types, attrs):
    _nargs(types, 1)
    x = types[0]
    if x.ndim < 2:
        raise GraphError(f"input {x} needs rank >= 2")
    return x


def _trilu_ref(x, a):
    f = np.triu if a["upper"] else np.tril
    return f(x, int(a["k"])).astype(x.dtype)


register("trilu", "injective", _trilu_infer, _trilu_ref, {"upper": True, "k": 0})


# ---------------------------------------------------------------------------- cumsum

def _cumsum_infer(types, attrs):
    _nargs(types, 1)
    x = types[0]
    _axis_attr(attrs, x.ndim)
    if x.dtype == "bool":
        raise GraphError("needs a numeric input, got bool")
    return x


def _cumsum_ref(x, a):
    ax = a["axis"]
    y = np.flip(x, ax) if a["reverse"] else x
    s = np.cumsum(y, axis=ax, dtype=x.dtype)
    if a["exclusive"]:
        s = s - y
    return (np.flip(s, ax) if a["reverse"] else s).astype(x.dtype)


register("cumsum", "reduce", _cumsum_infer, _cumsum_ref, {"exclusive": False, "reverse": False},
         required=("axis",))


# ---------------------------------------------------------------------------- top-k

def _topk_infer(types, attrs):
    _nargs(types, 1)
    x = types[0]
    ax = _axis_attr(attrs, x.ndim)
    k = attrs["k"]
    if not isinstance(k, int) or not 0 <= k <= x.shape[ax]:
        raise GraphError(f"k={k} must be between 0 and the axis length {x.shape[ax]}")
    shape = list(x.shape)
    shape[ax] = k
    return TensorType(shape, "int64")


def _topk_ref(x, a):
    ax, k = a["axis"], a["k"]
    n = x.shape[ax]
    if a["largest"]:
        # descending with equal elements in index order: a stable ascending sort of the
        # reversed axis, read backwards (no negation, which would overflow integers)
        order = n - 1 - np.flip(np.argsort(np.flip(x, ax), axis=ax, kind="stable"), ax)
    else:
        order = np.argsort(x, axis=ax, kind="stable")
    return np.take(order, np.arange(k), axis=ax).astype(np.int64)


register("topk_indices", "reduce", _topk_infer, _topk_ref, {"largest": True}, required=("axis", "k"))


# ---------------------------------------------------------------------------- max-pool indices

def _pool_indices_infer(types, attrs):
    _nargs(types, 2)
    x, y = types
    nd = x.ndim - 2
    if nd < 1:
        raise GraphError(f"input {x} needs rank >= 3")
    if y != pool_out_type(x, attrs, nd):
        raise GraphError(f"pooled maxima {y} do not fit the pooling of {x}")
    return TensorType(y.shape, "int64")


def window_positions(out_idx, k_idx, s, p, dl):
    """The input position of tap `k_idx` of the window of output `out_idx`."""
    return [out_idx[d] * s[d] - p[d] + k_idx[d] * dl[d] for d in range(len(s))]


def _pool_indices_ref(x, y, a):
    nd = x.ndim - 2
    k, s, p, dl = a["pool_size"], a["strides"], a["padding"], a["dilation"]
    o = y.shape[2:]
    big = np.iinfo(np.int64).max
    out = np.full(y.shape, big, np.int64)
    n, ch = np.meshgrid(np.arange(x.shape[0]), np.arange(x.shape[1]), indexing="ij")
    for oi in np.ndindex(*o):
        for ki in np.ndindex(*k):
            pos = window_positions(oi, ki, s, p, dl)
            if not all(0 <= pos[d] < x.shape[2 + d] for d in range(nd)):
                continue
            flat = (n * x.shape[1] + ch)
            for d in range(nd):
                flat = flat * x.shape[2 + d] + pos[d]
            hit = x[(slice(None), slice(None)) + tuple(pos)] == y[(slice(None), slice(None)) + oi]
            cur = out[(slice(None), slice(None)) + oi]
            out[(slice(None), slice(None)) + oi] = np.where(hit, np.minimum(cur, flat), cur)
    if a["storage_order"]:
        out = to_column_major(out, x.shape[2:], lambda v, m: v % m)
    return out


def to_column_major(flat, spatial, mod):
    """Row-major flat indices (with the batch and channel offset) as column-major ones:
    the spatial position keeps its offset, its digits are weighed in reverse order."""
    size = int(np.prod(spatial))
    within = mod(flat, size)
    out = flat - within
    rm = cm = 1
    rstr, cstr = [], []
    for d in range(len(spatial)):
        cstr.append(cm)
        cm *= spatial[d]
    for d in range(len(spatial) - 1, -1, -1):
        rstr.insert(0, rm)
        rm *= spatial[d]
    for d in range(len(spatial)):
        out = out + mod(within // rstr[d], spatial[d]) * cstr[d]
    return out


register("nn.max_pool_indices", "reduce", _pool_indices_infer, _pool_indices_ref,
         {"pool_size": [1], "strides": [1], "padding": [0, 0], "dilation": [1], "ceil_mode": False,
          "storage_order": 0})
