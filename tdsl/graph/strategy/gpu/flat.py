"""One output per thread: elementwise chains, pools, depthwise convs; the reductions that
make one output (a window, the taps, a count) computed by that output's thread into a
register, so the group stays one kernel."""
from __future__ import annotations

from ....autosched.gpu_flat import bind_flat, flat_vector
from ..stages import _ishape, _stages


def applies(out):
    """Every reduction of the group makes one output (a window, taps, a count) of an
    elementwise `out`: one kernel, a thread per output. Other reductions (a softmax's row
    statistics, a global pool) are the auto-scheduler's (rows across threads)."""
    return not out.op.reduce_axis and all(_per_output(t, _ishape(out))
                                          for t in _stages(out) if t is not out and t.op.reduce_axis)


def _per_output(t, shape):
    return _ishape(t) == shape or _ishape(t) == shape[len(shape) - len(t.shape):]


def schedule_pointwise(s, out, threads):
    shape = _ishape(out)
    per_output = []
    for t in _stages(out):
        if t is out:
            continue
        if not t.op.reduce_axis:
            s[t].compute_inline()
        elif _per_output(t, shape):
            # a pool's window, a depthwise conv's taps, an average's count: the thread of
            # an output reduces them into a register, one kernel with the epilogue
            per_output.append(t)
        else:
            bind_flat(s[t], threads)
    locals_ = []
    for t in per_output:
        locals_.append(s.cache_write(t, "local"))
        s[t].compute_inline()
    if out.op.reduce_axis:
        locals_.append(s.cache_write(out, "local"))
    # a thread's vector of outputs where no register stage is computed per output
    th = bind_flat(s[out], threads, 1 if locals_ else flat_vector(s[out], shape))
    for t in locals_:
        s[t].compute_at(s[out], th)
