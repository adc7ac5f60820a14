"""Convolution, dense and matmul as a tiled GEMM through shared memory, with the group's
epilogue in the same kernel.

A block computes a tile of the output (M: output channels or rows; N: pixels or columns;
batch axes spread over blocks), each thread a register tile of it (`cache_write` "local").
Per step of the first reduction axis (input channels, or k) the block's threads together
copy the operand slices the step reads into shared memory, the padded input through its
`if_then_else` so that padding costs no buffer. The thread that holds an accumulator
applies the epilogue (bias, batchnorm scale/shift, residual add, activation) and writes the
output once."""
from __future__ import annotations

import tdsl

from .. import topi
from ..stages import _ishape, _stages
from .tiles import FLOAT, conv_plan, gemm_plan, reduction_step

_THREADS_N = ("threadIdx.x", "threadIdx.z")     # the innermost N axis is the coalesced one


def anchor(out):
    """The contraction this schedule takes, or None: the group's one conv (not depthwise),
    dense or matmul, whose consumers are elementwise up to the output."""
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
    return red


def schedule(s, out, red, target):
    info = red._graph_info
    if info["kind"] == "conv_generic":
        plan, kt = _conv_sizes(red, info, target)
    else:
        plan = gemm_plan(_ishape(out), target)
        tm, tn = plan[-2][0] * plan[-2][1], plan[-1][0] * plan[-1][1]
        kt = reduction_step(topi._dim(red.op.reduce_axis[0].dom.extent), (tm + tn) * FLOAT, target, most=32)
    _tile(s, out, red, info.get("pad"), plan, kt)


def _conv_sizes(red, info, target):
    CO, CIG, KH, KW = _ishape(info["weight"])
    (sh, sw), (dh, dw) = info["strides"][:2], info["dilation"][:2]
    plan = conv_plan(_ishape(red), info["groups"], target)
    (ty, _), (tx, rx) = plan[2], plan[3]
    # the input rows and columns one block's tile reads per input channel
    patch = ((ty - 1) * sh + (KH - 1) * dh + 1) * ((tx * rx - 1) * sw + (KW - 1) * dw + 1)
    per_channel = (plan[1][0] * plan[1][1] * KH * KW + patch) * FLOAT
    return plan, reduction_step(CIG, per_channel, target)


def _tile(s, out, red, pad, plan, kt):
    for t in _stages(out):
        if t is not out and t is not red and t is not pad:
            s[t].compute_inline()
    local = s.cache_write(red, "local")
    if red is not out:
        s[red].compute_inline()
    shared = []
    for t in local.op.input_tensors():
        shared.append(s.cache_read(t, "shared", [local]))
        if t is pad:
            s[pad].compute_inline()
    blocks_m, blocks_n, batch, threads, regs = None, [], [], [], []
    m_axis = next(i for i, p in enumerate(plan) if p is not None)
    for i, (ax, p) in enumerate(zip(out.op.axis, plan)):
        if p is None:
            batch.append(ax)
            continue
        nthr, per = p
        bo, rest = s[out].split(ax, factor=nthr * per)
        th, reg = s[out].split(rest, factor=per)
        if i == m_axis:
            blocks_m = bo
        else:
            blocks_n.append(bo)
        threads.append(th)
        regs.append(reg)
    s[out].reorder(blocks_m, *batch, *blocks_n, *threads, *regs)
    s[out].bind(blocks_m, tdsl.thread_axis("blockIdx.y"))
    grid_x = s[out].fuse(*batch, *blocks_n) if len(batch) + len(blocks_n) > 1 else (batch + blocks_n)[0]
    s[out].bind(grid_x, tdsl.thread_axis("blockIdx.x"))
    tags = ["threadIdx.y"] + list(reversed(_THREADS_N[:len(threads) - 1]))
    for th, tag in zip(threads, tags):
        s[out].bind(th, tdsl.thread_axis(tag))
    for r in regs:
        s[out].unroll(r)
    s[local].compute_at(s[out], threads[-1])
    k0, *ks = s[local].op.reduce_axis
    ko, ki = s[local].split(k0, factor=kt)
    caxes = list(s[local].op.axis)
    s[local].reorder(ko, ki, *ks, *caxes)
    for ax in caxes:
        s[local].unroll(ax)
    if ks:
        s[local].unroll(ks[-1])
    sizes = {tag: plan_threads for tag, plan_threads in zip(tags, [p[0] for p in plan if p is not None])}
    for sh in shared:
        s[sh].compute_at(s[local], ko)
        _cooperative(s, sh, sizes)


def _cooperative(s, t, sizes):
    """The block's threads copy the slice together, consecutive threads on consecutive
    elements."""
    axes = list(s[t].op.axis)
    f = s[t].fuse(*axes) if len(axes) > 1 else axes[0]
    bound = []
    for tag in ("threadIdx.x", "threadIdx.y", "threadIdx.z"):
        if tag in sizes:
            f, th = s[t].split(f, factor=sizes[tag])
            bound.append((th, tag))
    s[t].reorder(f, *[th for th, _ in reversed(bound)])
    for th, tag in bound:
        s[t].bind(th, tdsl.thread_axis(tag))
