"""Loop shaping every CPU schedule uses: vector splits, parallel outer loops, inlining."""
from __future__ import annotations

import numpy as np

from .... import tiling
from ....ir import expr as E
from .. import tag
from ..stages import ishape, stages_of


PAR_MIN_ELEMS = 1 << 14     # below this, a fork-join costs more than it saves
# Contractions (dense, 1x1 and direct convs) are split between the cores from this many
# multiply-adds, where a second core already nearly halves the time (an 8x512x256 dense,
# 1M multiply-adds, is a good share of a small MLP's run)
PAR_MIN_MACS = 1 << 19
# Depthwise and grouped convs are split between the cores from fewer multiply-adds: in a
# network a small depthwise conv runs far slower than alone, reading what the other core's
# kernel has just written, so splitting it pays even where its arithmetic alone would not.
PAR_MIN_MACS_DEPTHWISE = 1 << 16


def parallel_loop(s, t, loop, work, threshold):
    """Marks `loop` of `t` parallel. Where `work` (a product of extents) has symbolic
    sizes, the schedule took it at a representative size: the loop forks only when it
    reaches `threshold` at run time (pragma "parallel_when"), as a static build of that
    size would have decided."""
    s[t].parallel(loop)
    if not isinstance(work, int) and getattr(work, "value", None) is None:
        s[t].pragma(loop, "parallel_when",
                    E.GE(E.cast(work, "int64"), E.const(threshold, "int64")))


def vec_split(s, t, axis, width, target):
    """Splits `axis` (of `width` elements) by the target's vector width for t's dtype and
    vectorizes the inner loop; None when the row is too short to be worth a vector."""
    if not tiling.worth_a_vector(target, width, t.dtype):
        return None
    lo, li = s[t].split(axis, factor=tiling.row_vector(target, width, t.dtype))
    s[t].vectorize(li)
    return lo, li


def par_vec(s, t, target, vectorize=True, parallel=True, min_par=PAR_MIN_ELEMS):
    """Parallel over the fused outer axes, vectorized along the last spatial axis."""
    axes = list(s[t].op.axis)
    raxes = list(s[t].op.reduce_axis)
    shape = ishape(t)
    if not axes:
        return None
    total = int(np.prod(shape))
    last = axes[-1]
    vec = vectorize and tiling.worth_a_vector(target, shape[-1], t.dtype)
    if vec:
        lo, li = s[t].split(last, factor=tiling.row_vector(target, shape[-1], t.dtype))
        if raxes:
            s[t].reorder(*axes[:-1], lo, *raxes, li)
        s[t].vectorize(li)
    outer = axes[:-1]
    fused = None
    if outer:
        fused = s[t].fuse(*outer) if len(outer) > 1 else outer[0]
    if parallel and total >= min_par:
        # with symbolic sizes `total` is the representative one's: the loop forks only
        # where the run-time size reaches `min_par` too (a squeeze-excite mat-vec's
        # epilogue at batch 1 is a few hundred elements)
        work = _run_time_size(t)
        if fused is not None and int(np.prod(shape[:-1])) >= 2:
            parallel_loop(s, t, fused, work, min_par)
        elif fused is None and vec:
            parallel_loop(s, t, lo, work, min_par)
    return fused


def _run_time_size(t):
    """The number of elements of `t`: an int, or where its shape has symbolic sizes their
    int64 product (times the constant sizes)."""
    const, sym = 1, None
    for d in t.shape:
        v = d if isinstance(d, int) else getattr(d, "value", None)
        if v is not None:
            const *= int(v)
        else:
            d = E.cast(d, "int64")
            sym = d if sym is None else sym * d
    return const if sym is None else sym * E.const(const, "int64")


def inline_except(s, out, keep, target=None):
    """Inlines the group's elementwise stages but `out` and `keep`; a ROOT stage is
    computed once, at root."""
    for t in stages_of(out):
        if t is out or t in keep:
            continue
        if t.op.tag == tag.ROOT:
            _root_rows(s, t)
        elif not t.op.reduce_axis:
            s[t].compute_inline()


def _root_rows(s, t):
    """A small stage computed once, at root, vectorized along its last axis when that is
    a whole number of vectors (packed weights: the channel block)."""
    last = t.op.axis[-1]
    ext = ishape(t)[-1]
    if ext % 4 == 0 and ext >= 4:
        s[t].vectorize(last)
