"""Tensor-expression definition of `nn.attention` (passes/attention.py), added to `topi.TE`
on import: softmax(q kt * scale [+ mask]) v as the stages a blocked schedule places
(cpu/attention.py), each a row of scores at a time: `dot` (q kt), `scores` (scaled,
masked), the row's max, `exp`, the row's sum, `acc` (exp v) and the output (acc over
the sum). Unscheduled, it is the plain three-step definition."""
from __future__ import annotations

import tdsl

from . import tag
from .topi import TE, bidx, c, shape_of, uname


def attention(ins, attrs, out):
    q, kt, v = ins[:3]
    mask = ins[3] if len(ins) == 4 else None
    B, H, M, D = shape_of(q)
    N, E = shape_of(kt)[3], shape_of(v)[3]
    dt = q.dtype
    d = tdsl.reduce_axis((0, D), name="d")
    dot = tdsl.compute((B, H, M, N), lambda b, h, i, j: tdsl.sum(q[b, h, i, d] * kt[b, h, d, j], axis=d),
                       name=uname("attn_dot"))
    scale = attrs["scale"]

    def score(b, h, i, j):
        s = dot[b, h, i, j] if scale == 1.0 else dot[b, h, i, j] * c(scale, dt)
        return s if mask is None else s + mask[bidx(4, mask, (b, h, i, j))]
    scores = tdsl.compute((B, H, M, N), score, name=uname("attn_scores"))
    k1 = tdsl.reduce_axis((0, N), name="k1")
    mx = tdsl.compute((B, H, M), lambda b, h, i: tdsl.max(scores[b, h, i, k1], axis=k1), name=uname("attn_max"))
    ex = tdsl.compute((B, H, M, N), lambda b, h, i, j: tdsl.exp(scores[b, h, i, j] - mx[b, h, i]),
                      name=uname("attn_exp"))
    k2 = tdsl.reduce_axis((0, N), name="k2")
    sm = tdsl.compute((B, H, M), lambda b, h, i: tdsl.sum(ex[b, h, i, k2], axis=k2), name=uname("attn_sum"))
    k3 = tdsl.reduce_axis((0, N), name="k3")
    acc = tdsl.compute((B, H, M, E), lambda b, h, i, e: tdsl.sum(ex[b, h, i, k3] * v[b, h, k3, e], axis=k3),
                       name=uname("attn_acc"))

    def result(b, h, i, e):
        y = acc[b, h, i, e] / sm[b, h, i]
        # a row whose scores are all -inf (or NaN) is NaN in the softmax, which the
        # exporters' where(isnan(p), 0, p) zeroes: its output row is 0
        return tdsl.if_then_else(tdsl.isnan(y), c(0.0, dt), y) if attrs["zero_nan"] else y
    y = tdsl.compute((B, H, M, E), result, name=uname("attention"))
    return tag.mark(y, tag.ATTENTION, dot=dot, scores=scores, max=mx, exp=ex, sum=sm, acc=acc)


TE["nn.attention"] = attention
