"""The element strides of a row-major buffer, with the padding `storage_align(axis, factor,
offset)` asks for: the stride of dimension `axis` goes up to the next value with
stride % factor == offset. Both `storage_flatten` (which lays buffers out) and tensorize
(which checks that an intrinsic's block sits in one at fixed steps) read it here, so the
two cannot disagree.
"""
from __future__ import annotations

from ..ir import expr as E
from . import simplify


def strides(buf):
    """([stride of each dimension], the padded size in elements) of buffer `buf`."""
    shape = list(buf.shape)
    aligns = {axis: (factor, offset) for axis, factor, offset in buf.align}
    out = [None] * len(shape)
    stride = E.const(1)
    for d in reversed(range(len(shape))):
        if d in aligns and isinstance(stride, E.IntImm):
            f, o = aligns[d]
            v = stride.value
            v += (o - v % f) % f
            stride = E.const(v)
        out[d] = stride
        stride = simplify(stride * shape[d])
    return out, stride
