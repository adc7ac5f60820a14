"""One output per thread: elementwise chains, pools, depthwise convs; the reductions that
make one output (a window, the taps, a count) computed by that output's thread into a
register, so the group stays one kernel."""
from __future__ import annotations

import tdsl

from ..stages import _ishape, _stages


def schedule_pointwise(s, out, threads):
    shape = _ishape(out)
    per_output = []
    for t in _stages(out):
        if t is out:
            continue
        if not t.op.reduce_axis:
            s[t].compute_inline()
        elif _ishape(t) == shape or _ishape(t) == shape[len(shape) - len(t.shape):]:
            # a pool's window, a depthwise conv's taps, an average's count: the thread of
            # an output reduces them into a register, one kernel with the epilogue
            per_output.append(t)
        else:
            bind_flat(s, t, threads)
    locals_ = []
    for t in per_output:
        locals_.append(s.cache_write(t, "local"))
        s[t].compute_inline()
    if out.op.reduce_axis:
        locals_.append(s.cache_write(out, "local"))
    th = bind_flat(s, out, threads)
    for t in locals_:
        s[t].compute_at(s[out], th)


def bind_flat(s, t, threads):
    """All axes fused, `threads` outputs to a block; returns the thread axis."""
    axes = list(s[t].op.axis)
    if not axes:
        return None
    f = s[t].fuse(*axes) if len(axes) > 1 else axes[0]
    bo, ti = s[t].split(f, factor=threads)
    s[t].bind(bo, tdsl.thread_axis("blockIdx.x"))
    s[t].bind(ti, tdsl.thread_axis("threadIdx.x"))
    return ti
