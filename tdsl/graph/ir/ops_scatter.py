"""Graph operators that write at positions read from data: ONNX's ScatterND and
ScatterElements (`scatter_nd`, `scatter_elements`), with their reductions. Each result is
the data with the updates written (or combined) at the indices, in the indices' order:
without a reduction a later update to one position replaces an earlier one, as onnxruntime
applies them (ONNX leaves duplicates undefined). Registered on import; their tensor
expressions (a copy of the data, then one `tdsl.update` over the indices' domain) are in
strategy/topi_scatter.py."""
from __future__ import annotations

import numpy as np

from ...errors import GraphError
from .registry import check_nargs, register

REDUCTIONS = ("none", "add", "mul", "max", "min")
_NUMPY = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}


def _reduction(attrs):
    red = attrs["reduction"]
    if red not in REDUCTIONS:
        raise GraphError(f"unknown reduction '{red}' (one of {', '.join(REDUCTIONS)})")
    return red


def _int_indices(idx):
    if not idx.dtype.startswith(("int", "uint")):
        raise GraphError(f"indices must be integers, got {idx.dtype}")


def _apply(out, at, u, red):
    if red == "none":
        out[at] = u
    else:
        out[at] = _NUMPY[red](out[at], u)


def _wrap(v, n, what):
    j = int(v) + (n if v < 0 else 0)
    if not 0 <= j < n:
        raise GraphError(f"{what}: index {int(v)} is out of range for an axis of {n}")
    return j


# ---------------------------------------------------------------------------- ScatterND

def _scatter_nd_infer(types, attrs):
    check_nargs(types, 3)
    x, idx, upd = types
    _reduction(attrs)
    _int_indices(idx)
    if idx.ndim < 1:
        raise GraphError(f"indices {idx} need rank >= 1")
    q = idx.shape[-1]
    if not isinstance(q, int) or q > x.ndim:
        raise GraphError(f"index tuples of length {q} for data of rank {x.ndim}")
    want = tuple(idx.shape[:-1]) + tuple(x.shape[q:])
    if tuple(upd.shape) != want or upd.dtype != x.dtype:
        raise GraphError(f"updates {upd} do not fit indices {idx} into data {x} "
                         f"(expected {want}, {x.dtype})")
    return x


def _scatter_nd_ref(x, idx, upd, a):
    red = _reduction(a)
    out = x.copy()
    q = idx.shape[-1]
    rows = idx.reshape(-1, q)
    vals = upd.reshape((rows.shape[0],) + x.shape[q:])
    for r, t in enumerate(rows):
        at = tuple(_wrap(v, x.shape[d], "scatter_nd") for d, v in enumerate(t))
        _apply(out, at, vals[r], red)
    return out


register("scatter_nd", "opaque", _scatter_nd_infer, _scatter_nd_ref, {"reduction": "none"})


# ---------------------------------------------------------------------------- ScatterElements

def _scatter_elements_infer(types, attrs):
    check_nargs(types, 3)
    x, idx, upd = types
    _reduction(attrs)
    _int_indices(idx)
    ax = attrs["axis"]
    if not isinstance(ax, int) or not 0 <= ax < x.ndim:
        raise GraphError(f"axis {ax} out of range for rank {x.ndim}")
    if idx.ndim != x.ndim or upd.shape != idx.shape or upd.dtype != x.dtype or any(
            idx.shape[d] > x.shape[d] for d in range(x.ndim) if d != ax):
        raise GraphError(f"indices {idx} and updates {upd} do not fit data {x} along axis {ax}")
    return x


def _scatter_elements_ref(x, idx, upd, a):
    red, ax = _reduction(a), a["axis"]
    out = x.copy()
    for m in np.ndindex(*idx.shape):
        j = _wrap(idx[m], x.shape[ax], "scatter_elements")
        _apply(out, m[:ax] + (j,) + m[ax + 1:], upd[m], red)
    return out


register("scatter_elements", "opaque", _scatter_elements_infer, _scatter_elements_ref,
         {"axis": 0, "reduction": "none"})
