"""Tensor-expression definition of `nn.attention` (passes/attention.py), added to `topi.TE`
on import: softmax(q kt * scale [+ mask]) v as the stages a blocked schedule places
(cpu/attention.py), each a row of scores at a time: `dot` (q kt), `scores` (scaled,
masked), the row's max, `exp`, the row's sum, `acc` (exp v) and the output (acc over
the sum). Unscheduled, it is the plain three-step definition.

`pad` = (K, R): the stages over keys taken over K keys, a number at least the run-time key
count, and those over query rows over the rows rounded up to a multiple of R; the keys
past the call's read as 0 in q K^T and score -inf (exp 0), the rows past it read q as 0
and are never stored. So a schedule's blocks of R rows and every stage over keys have
constant extents, with no tails (the size class "short_keys", cpu/attention.py); P V
still sums over the keys alone."""
from __future__ import annotations

import tdsl

from . import tag
from .topi import TE, bidx, c, shape_of, uname


def attention(ins, attrs, out, pad=None):
    q, kt, v = ins[:3]
    mask = ins[3] if len(ins) == 4 else None
    B, H, M, D = shape_of(q)
    N, E = shape_of(kt)[3], shape_of(v)[3]
    dt = q.dtype
    rows, K, padded = M, N, {}
    if pad is not None:
        K, R = pad
        rows = (M + (R - 1)) // R * R
        # the queries zero-padded, a stage of its own (a scheduled copy: the condition
        # is a row's, which the micro-kernel would test at each step)
        q0 = q
        q = tdsl.compute((B, H, rows, D), lambda b, h, i, dd: tdsl.if_then_else(i < M, q0[b, h, i, dd], c(0.0, dt)),
                         name=uname("attn_queries"))
        padded = {"queries": q}

    def key(b, h, dd, j):
        # past the keys, 0: a masked load, one per vector of keys for all rows of a tile
        return kt[b, h, dd, j] if pad is None else tdsl.if_then_else(j < N, kt[b, h, dd, j], c(0.0, dt))
    d = tdsl.reduce_axis((0, D), name="d")
    dot = tdsl.compute((B, H, rows, K), lambda b, h, i, j: tdsl.sum(q[b, h, i, d] * key(b, h, d, j), axis=d),
                       name=uname("attn_dot"))
    scale = attrs["scale"]

    def score(b, h, i, j):
        s = dot[b, h, i, j] if scale == 1.0 else dot[b, h, i, j] * c(scale, dt)
        if pad is None:
            return s if mask is None else s + mask[bidx(4, mask, (b, h, i, j))]
        # a padded row scores 0 (read nowhere), a padded key -inf (exp 0)
        m = c(0.0, dt) if mask is None else tdsl.if_then_else(i < M, mask[bidx(4, mask, (b, h, i, j))], c(0.0, dt))
        return tdsl.if_then_else(j < N, s + m, c(float("-inf"), dt))
    scores = tdsl.compute((B, H, rows, K), score, name=uname("attn_scores"))
    k1 = tdsl.reduce_axis((0, K), name="k1")
    mx = tdsl.compute((B, H, rows), lambda b, h, i: tdsl.max(scores[b, h, i, k1], axis=k1), name=uname("attn_max"))
    ex = tdsl.compute((B, H, rows, K), lambda b, h, i, j: tdsl.exp(scores[b, h, i, j] - mx[b, h, i]),
                      name=uname("attn_exp"))
    k2 = tdsl.reduce_axis((0, K), name="k2")
    sm = tdsl.compute((B, H, rows), lambda b, h, i: tdsl.sum(ex[b, h, i, k2], axis=k2), name=uname("attn_sum"))
    # P V over the keys alone (padded: min(N, K) is N, and tells bound inference that a
    # row of exp is K long)
    k3 = tdsl.reduce_axis((0, N if pad is None else tdsl.min(N, K)), name="k3")
    acc = tdsl.compute((B, H, rows, E), lambda b, h, i, e: tdsl.sum(ex[b, h, i, k3] * v[b, h, k3, e], axis=k3),
                       name=uname("attn_acc"))

    def result(b, h, i, e):
        y = acc[b, h, i, e] / sm[b, h, i]
        # a row whose scores are all -inf (or NaN) is NaN in the softmax, which the
        # exporters' where(isnan(p), 0, p) zeroes: its output row is 0
        return tdsl.if_then_else(tdsl.isnan(y), c(0.0, dt), y) if attrs["zero_nan"] else y
    y = tdsl.compute((B, H, M, E), result, name=uname("attention"))
    return tag.mark(y, tag.ATTENTION, dot=dot, scores=scores, max=mx, exp=ex, sum=sm, acc=acc, **padded)


TE["nn.attention"] = attention
