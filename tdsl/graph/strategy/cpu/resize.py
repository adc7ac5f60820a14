"""Resize (linear or cubic along the two image axes): an interp along one axis, then one
along the other (frontend: one `interp` per resized axis), fused in one group.

Inlined, the second interp would redo the first for every tap it reads (4 gathers per
output for bilinear) and both would index through gathers. Instead the first interp is
computed once, into a buffer, and the second reads its taps from that, each output row
vectorized. The frontend orders the two so that the fewest elements are gathered: a
column's taps are gathered along the row, a row's taps are whole rows (contiguous
vectors); so an upsampling resize interpolates the columns of the input rows first and
then each output row from two of those rows, and a downsampling one the rows first, from
contiguous input rows. (Computed per output row instead, the buffer's region along the
gathered axis would depend on the indices' values, which bound inference does not read.)
Rows run in parallel in both."""
from __future__ import annotations

import numpy as np

from .. import tag
from ..stages import ishape, stages_of
from .batch import image_shape, symbolic_batch, te_batch_only
from .loops import PAR_MIN_ELEMS, vec_split


def _interp_axis(t):
    return t.op.attrs["axis"] if t.op.tag == tag.INTERP else None


def fits(out, g):
    """A group whose output is an interp along one of the last two axes, reading an interp
    along the other one (or the group's input); with symbolic sizes, only the batch."""
    nd = len(out.shape)
    axis = _interp_axis(out)
    if nd < 2 or axis not in (nd - 1, nd - 2) or g.symbolic and not te_batch_only(out):
        return False
    first = [t for t in stages_of(out) if t is not out and _interp_axis(t) is not None]
    return all(_interp_axis(t) == 2 * nd - 3 - axis for t in first) and len(first) <= 1 \
        and all(_interp_axis(t) is not None or not t.op.reduce_axis for t in stages_of(out))


def schedule(s, out, g, parallel=True):
    stages, target = stages_of(out), g.target
    first = [t for t in stages if t is not out and _interp_axis(t) is not None]
    for t in stages:
        if t is not out and t not in first:
            s[t].compute_inline()
    # the rows of every image are one parallel loop; a symbolic batch counts as 1
    shape = image_shape(out) if symbolic_batch(out) else ishape(out)
    axes = list(out.op.axis)
    row = s[out].fuse(*axes[:-1]) if len(axes) > 2 else axes[0]
    vec_split(s, out, axes[-1], shape[-1], target)
    if parallel and int(np.prod(shape)) >= PAR_MIN_ELEMS:
        s[out].parallel(row)
    for t in first:
        taxes = list(t.op.axis)
        trow = s[t].fuse(*taxes[:-1]) if len(taxes) > 2 else taxes[0]
        vec_split(s, t, taxes[-1], ishape(t)[-1], target)
        if parallel and int(np.prod(image_shape(t) if symbolic_batch(t) else ishape(t))) >= PAR_MIN_ELEMS:
            s[t].parallel(trow)
