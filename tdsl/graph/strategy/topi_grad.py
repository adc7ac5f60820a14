"""Tensor-expression definitions of the backward-only graph operators (ir/ops_grad.py).
Added to `topi.TE` on import.

`nn.max_pool_grad` in gather form (Halide's scatter-to-gather): one stage finds, per
window, the tap of its first maximum; the adjoint of an input position then reads the few
windows that cover it (the window index solved from the position and the tap) and takes
their adjoint where that tap is the chosen one. No scatter, no atomics. `nn.avg_pool_grad`
reads the same windows, each adjoint divided by its window's count.

The gathers' adjoints (`take_grad`, `gather_elements_grad`) are scatter-adds on update
definitions, in topi_scatter.py."""
from __future__ import annotations

import tdsl

from .topi import TE, c, shape_of, uname
from .topi_index import window_max_hit
from .topi_nn import pool, pool_count

_max_pool = pool("max")


def max_pool_grad(ins, attrs, out):
    x, dy = ins
    xs, ys = shape_of(x), shape_of(dy)
    nd = len(xs) - 2
    k = attrs["pool_size"]
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
        conds, win = _covering_windows(hs, qax, attrs, ys)
        at = (n, ch) + win
        take = tdsl.all(*conds, chosen[at] == tap_of(qax))
        return tdsl.sum(tdsl.if_then_else(take, dy[at], c(0, dy.dtype)), axis=qax)
    return tdsl.compute(xs, gather, name=uname("max_pool_grad"))


def _covering_windows(hs, qax, attrs, ys):
    """For input position `hs` and window taps `qax`: the conditions under which tap `qax`
    of some window reads `hs`, and that window's index (clamped into the output)."""
    s, p, dl = attrs["strides"], attrs["padding"], attrs["dilation"]
    conds, win = [], []
    for d in range(len(hs)):
        num = hs[d] + p[d] - qax[d] * dl[d]
        conds += [num >= 0, num % s[d] == 0, num // s[d] < ys[2 + d]]
        win.append(tdsl.min(tdsl.max(num, 0) // s[d], ys[2 + d] - 1))
    return conds, tuple(win)


def avg_pool_grad(ins, attrs, out):
    (dy,) = ins
    xs, ys = tuple(attrs["shape"]), shape_of(dy)
    nd = len(xs) - 2
    k = attrs["pool_size"]
    cnt = pool_count(xs, ys[2:], attrs, dy.dtype)
    qax = [tdsl.reduce_axis((0, k[d]), name=f"q{d}") for d in range(nd)]

    def gather(n, ch, *hs):
        conds, win = _covering_windows(hs, qax, attrs, ys)
        v = dy[(n, ch) + win] / tdsl.max(cnt[win], c(1, dy.dtype))
        return tdsl.sum(tdsl.if_then_else(tdsl.all(*conds), v, c(0, dy.dtype)), axis=qax)
    return tdsl.compute(xs, gather, name=uname("avg_pool_grad"))


def conv_weight_grad(ins, attrs, out):
    """dW[co, c, *k] = sum over n, *y of dy[n, co, *y] * x[n, g(co) * cig + c, *(y * s + k *
    dl - p)], zero outside x: one reduction over the batch and the output pixels."""
    x, dy = ins
    xs, ys = shape_of(x), shape_of(dy)
    nd = len(xs) - 2
    s, p, dl, g = attrs["strides"], attrs["padding"], attrs["dilation"], attrs["groups"]
    cig, cog = xs[1] // g, ys[1] // g
    rn = tdsl.reduce_axis((0, ys[0]), name="n")
    ry = [tdsl.reduce_axis((0, ys[2 + d]), name=f"y{d}") for d in range(nd)]

    def f(co, ch, *k):
        pos = [ry[d] * s[d] + k[d] * dl[d] - p[d] for d in range(nd)]
        conds = []
        for d in range(nd):
            conds += [pos[d] >= 0, pos[d] < xs[2 + d]]
        safe = tuple(tdsl.min(tdsl.max(q, 0), xs[2 + d] - 1) for d, q in enumerate(pos))
        ci = (co // cog) * cig + ch if g > 1 else ch
        v = dy[(rn, co) + tuple(ry)] * x[(rn, ci) + safe]
        return tdsl.sum(tdsl.if_then_else(tdsl.all(*conds), v, c(0, dy.dtype)), axis=[rn] + ry)
    return tdsl.compute(out.shape, f, name=uname("conv_weight_grad"))


TE["nn.max_pool_grad"] = max_pool_grad
TE["nn.conv_weight_grad"] = conv_weight_grad
TE["nn.avg_pool_grad"] = avg_pool_grad
