"""The cuda / opencl schedule of a group: the output fused and bound to blockIdx.x /
threadIdx.x; reductions and anchors keep a plain per-thread loop."""
from __future__ import annotations

import tdsl

from ..stages import _stages


def schedule_gpu(s, out, g, threads=128):
    for t in _stages(out):
        if t is out:
            continue
        if t.op.reduce_axis:
            _bind(s, t, threads)
        else:
            s[t].compute_inline()
    _bind(s, out, threads)


def _bind(s, t, threads):
    axes = list(s[t].op.axis)
    if not axes:
        return
    f = s[t].fuse(*axes) if len(axes) > 1 else axes[0]
    bo, ti = s[t].split(f, factor=threads)
    s[t].bind(bo, tdsl.thread_axis("blockIdx.x"))
    s[t].bind(ti, tdsl.thread_axis("threadIdx.x"))
