"""Tensor-expression definitions of the position-dependent graph operators (trilu, cumsum,
top-k, max-pool indices, interp; their registry entries are in ir/ops_index.py), added to `topi.TE`
on import."""
from __future__ import annotations

import tdsl

from ..ir.ops_index import to_column_major, window_positions
from . import tag, topi
from .topi import c, shape_of, uname


# ---------------------------------------------------------------------------- interp

def _interp_te(ins, attrs, out):
    x, idx, w = ins
    ax = attrs["axis"]
    n = shape_of(x)[ax]

    def f(*i):
        o = i[ax]
        acc = None
        for t in range(shape_of(idx)[0]):
            # the table is in range by construction; the clamp (two vector ops) proves it
            # to the build's check of indices read from memory, which would otherwise
            # guard every tap and run the loop serially, unvectorized
            j = tdsl.min(tdsl.max(tdsl.cast(idx[t, o], "int32"), 0), n - 1)
            v = x[i[:ax] + (j,) + i[ax + 1:]] * w[t, o]
            acc = v if acc is None else acc + v
        return acc
    return tdsl.compute(out.shape, f, name=uname("interp"), tag=tag.INTERP, attrs={"axis": ax % len(out.shape)})


topi.TE["interp"] = _interp_te


# ---------------------------------------------------------------------------- trilu

def _trilu_te(ins, attrs, out):
    (x,) = ins
    k, upper = int(attrs["k"]), attrs["upper"]
    zero = c(0, x.dtype) if x.dtype != "bool" else tdsl.const(False, "bool")

    def f(*i):
        d = i[-1] - i[-2]
        keep = d >= k if upper else d <= k
        return tdsl.if_then_else(keep, x[i], zero)
    return tdsl.compute(out.shape, f, name=uname("trilu"))


topi.TE["trilu"] = _trilu_te


# ---------------------------------------------------------------------------- cumsum

def _cumsum_te(ins, attrs, out):
    # a masked sum over the whole axis: O(n^2) work, but one plain reduction that the
    # generic schedules parallelize and vectorize like any other
    (x,) = ins
    ax = attrs["axis"]
    n = shape_of(x)[ax]
    k = tdsl.reduce_axis((0, n), name="k")

    def f(*i):
        j = i[ax]
        if attrs["reverse"]:
            cond = k > j if attrs["exclusive"] else k >= j
        else:
            cond = k < j if attrs["exclusive"] else k <= j
        return tdsl.sum(x[i[:ax] + (k,) + i[ax + 1:]], axis=k, where=cond)
    return tdsl.compute(out.shape, f, name=uname("cumsum"))


topi.TE["cumsum"] = _cumsum_te


# ---------------------------------------------------------------------------- top-k

def _topk_te(ins, attrs, out):
    # rank[e] = how many elements come before e in the order (better, or equal and at a
    # lower index); the r-th index is the e whose rank is r
    (x,) = ins
    ax, largest = attrs["axis"], attrs["largest"]
    xs = shape_of(x)
    n = xs[ax]
    e2 = tdsl.reduce_axis((0, n), name="e2")

    def rank_f(*i):
        a, b = x[i[:ax] + (e2,) + i[ax + 1:]], x[i]
        better = a > b if largest else a < b
        before = better | ((a == b) & (e2 < i[ax]))
        return tdsl.sum(tdsl.if_then_else(before, c(1, "int32"), c(0, "int32")), axis=e2)
    rank = tdsl.compute(xs, rank_f, name=uname("topk_rank"))
    e = tdsl.reduce_axis((0, n), name="e")

    def idx_f(*i):
        r = rank[i[:ax] + (e,) + i[ax + 1:]]
        return tdsl.sum(tdsl.cast(e, "int64"), axis=e, where=r == i[ax])
    return tdsl.compute(out.shape, idx_f, name=uname("topk_indices"))


topi.TE["topk_indices"] = _topk_te


# ---------------------------------------------------------------------------- max-pool indices

def window_max_hit(x, y, n, ch, sp, rax, attrs):
    """For output `(n, ch) + sp` of a max pool of `x` (result `y`) and the window taps
    `rax`: the tap's input position, clamped inside `x`, and whether the tap reads inside
    the input (not padding) and holds the window's maximum."""
    xs = shape_of(x)
    pos = window_positions(sp, rax, attrs["strides"], attrs["padding"], attrs["dilation"])
    conds = []
    for d, q in enumerate(pos):
        conds += [q >= 0, q < xs[2 + d]]
    safe = tuple(tdsl.min(tdsl.max(q, 0), xs[2 + d] - 1) for d, q in enumerate(pos))
    return safe, tdsl.all(*conds, x[(n, ch) + safe] == y[(n, ch) + tuple(sp)])


def _pool_indices_te(ins, attrs, out):
    x, y = ins
    xs = shape_of(x)
    nd = len(xs) - 2
    k = attrs["pool_size"]
    rax = [tdsl.reduce_axis((0, k[d]), name=f"r{d}") for d in range(nd)]

    def f(n, ch, *sp):
        safe, hit = window_max_hit(x, y, n, ch, sp, rax, attrs)
        flat = tdsl.cast(n, "int64") * xs[1] + tdsl.cast(ch, "int64")
        for d in range(nd):
            flat = flat * xs[2 + d] + tdsl.cast(safe[d], "int64")
        # the first maximum in row-major window order is the one with the lowest flat index
        return tdsl.min(flat, axis=rax, where=hit)
    idx = tdsl.compute(out.shape, f, name=uname("max_pool_indices"))
    if not attrs["storage_order"]:
        return idx
    # ties still go to the first maximum in row-major order, as onnxruntime scans windows
    return tdsl.compute(out.shape, lambda *i: to_column_major(idx[i], xs[2:], lambda v, m: v % m),
                        name=uname("column_major"))


topi.TE["nn.max_pool_indices"] = _pool_indices_te
