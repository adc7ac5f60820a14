"""Softmax and layer norm: each row statistic (max, sum, mean, variance) a block per row,
its threads striding along the row and combining their partial results across threads
(tdsl lowers a reduction loop bound to threadIdx.x to a cross-thread reduction); the
normalisation one output per thread."""
from __future__ import annotations

import tdsl

from .. import topi
from ..stages import _stages
from .flat import bind_flat


def applies(out):
    info = getattr(out, "_graph_info", {})
    return info.get("kind") in ("softmax", "layer_norm") and \
        all(len(t.op.reduce_axis) == 1 for t in info["stages"] if t.op.reduce_axis)


def schedule(s, out, threads):
    stats = [t for t in out._graph_info["stages"] if t.op.reduce_axis]
    for t in _stages(out):
        if t is not out and not t.op.reduce_axis:
            s[t].compute_inline()
    for t in stats:
        (k,) = s[t].op.reduce_axis
        n = topi._dim(k.dom.extent)
        # no more threads than the row has elements (in whole warps)
        tpb = min(threads, max(32, 1 << (n - 1).bit_length()))
        ko, ki = s[t].split(k, factor=tpb)
        s[t].reorder(ki, ko)
        axes = list(s[t].op.axis)
        row = s[t].fuse(*axes) if len(axes) > 1 else axes[0]
        s[t].bind(row, tdsl.thread_axis("blockIdx.x"))
        s[t].bind(ki, tdsl.thread_axis("threadIdx.x"))
    bind_flat(s, out, threads)
