"""Tensor-expression definitions of the backward-only graph operators (ir/ops_grad.py).
Added to `topi.TE` on import.

`nn.max_pool_grad` in gather form (Halide's scatter-to-gather): one stage finds, per
window, the tap of its first maximum; the adjoint of an input position then reads the few
windows that cover it (the window index solved from the position and the tap) and takes
their adjoint where that tap is the chosen one. No scatter, no atomics."""
from __future__ import annotations

import tdsl

from .topi import TE, c, shape_of, uname
from .topi_index import window_max_hit
from .topi_nn import pool

_max_pool = pool("max")


def max_pool_grad(ins, attrs, out):
    x, dy = ins
    xs, ys = shape_of(x), shape_of(dy)
    nd = len(xs) - 2
    k, s, p, dl = attrs["pool_size"], attrs["strides"], attrs["padding"], attrs["dilation"]
    y = _max_pool([x], attrs, dy)
    rax = [tdsl.reduce_axis((0, k[d]), name=f"r{d}") for d in range(nd)]

    def tap_of(taps):
        lin = taps[0]
        for d in range(1, nd):
            lin = lin * k[d] + taps[d]
        return lin

    def first(n, ch, *sp):
        _, hit = window_max_hit(x, y, n, ch, sp, rax, attrs)
        # the first maximum in row-major window order, as torch and onnxruntime pick it
        return tdsl.min(tap_of(rax), axis=rax, where=hit)
    chosen = tdsl.compute(ys, first, name=uname("max_pool_tap"))
    qax = [tdsl.reduce_axis((0, k[d]), name=f"q{d}") for d in range(nd)]

    def gather(n, ch, *hs):
        conds, win = [], []
        for d in range(nd):
            num = hs[d] + p[d] - qax[d] * dl[d]
            conds += [num >= 0, num % s[d] == 0, num // s[d] < ys[2 + d]]
            win.append(tdsl.min(tdsl.max(num, 0) // s[d], ys[2 + d] - 1))
        at = (n, ch) + tuple(win)
        take = tdsl.all(*conds, chosen[at] == tap_of(qax))
        return tdsl.sum(tdsl.if_then_else(take, dy[at], c(0, dy.dtype)), axis=qax)
    return tdsl.compute(xs, gather, name=uname("max_pool_grad"))


TE["nn.max_pool_grad"] = max_pool_grad
