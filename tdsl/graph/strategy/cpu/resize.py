"""Resize (nearest or linear along the two image axes): an interp along the rows, then one
along the columns (frontend: one `interp`/`take` per resized axis), fused in one group.

Inlined, the column interp would redo the row interp for every tap it reads (4 gathers per
output for bilinear) and both would index through gathers. Instead the row interp is
computed once, from contiguous input rows (whole vectors along the input width; a buffer of
output rows x input columns, smaller than the output when it upsamples), and the column
interp gathers its taps from it, each output row vectorized. (Computed per output row
instead, its region along the gathered axis would depend on the indices' values, which
bound inference does not read.) Rows run in parallel in both."""
from __future__ import annotations

import numpy as np

from ..stages import _ishape, _stages
from .loops import PAR_MIN_ELEMS, _vec_split


def _interp_axis(t):
    info = getattr(t, "_graph_info", {})
    return info.get("axis") if info.get("kind") == "interp" else None


def applies(out):
    """A group whose output is an interp along its last axis, reading an interp along
    the axis before it (or the group's input)."""
    nd = len(out.shape)
    if nd < 2 or _interp_axis(out) != nd - 1:
        return False
    rows = [t for t in _stages(out) if t is not out and _interp_axis(t) is not None]
    return all(_interp_axis(t) == nd - 2 for t in rows) and len(rows) <= 1 \
        and all(_interp_axis(t) is not None or not t.op.reduce_axis for t in _stages(out))


def schedule(s, out, parallel, target):
    stages = _stages(out)
    rows = [t for t in stages if t is not out and _interp_axis(t) is not None]
    for t in stages:
        if t is not out and t not in rows:
            s[t].compute_inline()
    shape = _ishape(out)
    axes = list(out.op.axis)
    row = s[out].fuse(*axes[:-1]) if len(axes) > 2 else axes[0]
    _vec_split(s, out, axes[-1], shape[-1], target)
    if parallel and int(np.prod(shape)) >= PAR_MIN_ELEMS:
        s[out].parallel(row)
    for t in rows:
        taxes = list(t.op.axis)
        trow = s[t].fuse(*taxes[:-1]) if len(taxes) > 2 else taxes[0]
        _vec_split(s, t, taxes[-1], _ishape(t)[-1], target)
        if parallel and int(np.prod(_ishape(t))) >= PAR_MIN_ELEMS:
            s[t].parallel(trow)
