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
from ..stages import _ishape, _stages


def anchor(out):
    """The contraction this schedule takes, or None: the group's one conv (not depthwise),
    dense or matmul, whose consumers are elementwise up to the output, and which the rule
    can tile (an axis along which an operand is reused)."""
    found = [t for t in _stages(out) if getattr(t, "_graph_info", {}).get("kind") in
             ("conv_generic", "dense_generic", "matmul")]
    if len(found) != 1 or _ishape(found[0]) != _ishape(out):
        return None
    red = found[0]
    info = red._graph_info
    if info.get("depthwise") or len(red.shape) not in (2, 3, 4) or \
            info["kind"] == "conv_generic" and len(red.shape) != 4:
        return None
    if any(t.op.reduce_axis for t in _stages(out) if t is not red):
        return None
    return red if StageInfo(red.op).is_reuse_reduction() else None


def schedule(s, out, red, target, params=None) -> Explanation:
    pad = red._graph_info.get("pad")
    for t in _stages(out):
        if t is not out and t is not red and t is not pad:
            s[t].compute_inline()
    rec = Explanation(target)
    contraction(s, s[red], StageInfo(red.op), target, AutoParams.of(params), rec, out=s[out])
    if pad is not None:         # read through its condition by the shared-memory copy
        s[pad].compute_inline()
    return rec
