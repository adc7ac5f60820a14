"""One output per thread: elementwise chains, pools, depthwise convs; the reductions that
make one output (a window, the taps, a count) computed by that output's thread into a
register, so the group stays one kernel."""
from __future__ import annotations

from ....autosched.gpu_flat import bind_flat, flat_vector
from ..stages import ishape, stages_of
from .schedule import THREADS, gpu_facts


def applies(out):
    """Every reduction of the group makes one output (a window, taps, a count) of an
    elementwise `out`: one kernel, a thread per output. Other reductions (a softmax's row
    statistics, a global pool) are the auto-scheduler's (rows across threads)."""
    return not out.op.reduce_axis and all(_per_output(t, ishape(out))
                                          for t in stages_of(out) if t is not out and t.op.reduce_axis)


def fits(out, g):
    """Groups this schedule takes: those it applies to, and every group where the
    auto-scheduler's rules may not run."""
    return not g.use_auto or applies(out)


def schedule_group(s, out, g):
    schedule_pointwise(s, out, min(THREADS, gpu_facts(g.target).max_threads_per_block))


def _per_output(t, shape):
    return ishape(t) == shape or ishape(t) == shape[len(shape) - len(t.shape):]


def schedule_pointwise(s, out, threads):
    shape = ishape(out)
    per_output = []
    for t in stages_of(out):
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
