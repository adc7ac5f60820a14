"""Convolution, dense and matmul as the auto-scheduler's GPU contraction rule
(`tdsl.autosched.gpu_contraction`: block tiles staged through shared memory, register tiles
per thread, sized to fill the target's SMs), with the group's epilogue in the same kernel.

What is the graph's own: which stage is the anchor, the epilogue (bias, batchnorm
scale/shift, residual add, activation) applied by the thread that holds an accumulator, and
the padded input read through its `if_then_else` by the shared-memory copy, so that padding
costs no buffer."""
from __future__ import annotations

from ....autosched import AutoParams, Explanation
from ....autosched.analysis import StageInfo
from ....autosched.gpu_contraction import contraction
from .. import tag
from ..stages import ishape, stages_of
from .schedule import gpu_facts


def anchor(out):
    """The contraction this schedule takes, or None: the group's one conv (not depthwise),
    dense or matmul, whose consumers are elementwise up to the output, and which the rule
    can tile (an axis along which an operand is reused)."""
    found = [t for t in stages_of(out) if t.op.tag in (tag.CONV_GENERIC, tag.DENSE_GENERIC, tag.MATMUL)]
    if len(found) != 1 or ishape(found[0]) != ishape(out):
        return None
    red = found[0]
    if red.op.attrs.get("depthwise") or len(red.shape) not in (2, 3, 4) or \
            red.op.tag == tag.CONV_GENERIC and len(red.shape) != 4:
        return None
    if any(t.op.reduce_axis for t in stages_of(out) if t is not red):
        return None
    return red if StageInfo(red.op).is_reuse_reduction() else None


def fits(out, g):
    """Groups with a contraction this schedule takes, where the auto-scheduler's rules
    may run (not in a kernel generic in its channel count)."""
    return g.use_auto and anchor(out) is not None


def schedule_group(s, out, g):
    g.explanation = schedule(s, out, anchor(out), gpu_facts(g.target), g.auto_params)


def schedule(s, out, red, target, params=None) -> Explanation:
    pad = red.op.attrs.get("pad")
    for t in stages_of(out):
        if t is not out and t is not red and t is not pad:
            s[t].compute_inline()
    rec = Explanation(target)
    contraction(s, s[red], StageInfo(red.op), target, AutoParams.of(params), rec, out=s[out])
    if pad is not None:         # read through its condition by the shared-memory copy
        s[pad].compute_inline()
    return rec
