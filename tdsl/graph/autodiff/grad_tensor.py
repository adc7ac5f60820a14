"""Backward rules of the layout and data-movement operators (ir/ops_tensor.py,
ir/ops_index.py): each moves the adjoint back the way the forward operator moved the data.
Where the forward operator reads one element several times (gathers, edge and reflect
padding, interpolation), the reads' adjoints are summed: the gathers' by the scatter-add
operators `take_grad` and `gather_elements_grad`, the paddings' by slices added back."""
from __future__ import annotations

import numpy as np

from ...errors import GraphError
from .registry import op, register_gradient, unbroadcast


@register_gradient("reshape")
def _reshape(call, g):
    return [op("reshape", g, newshape=list(call.args[0].type.shape))]


@register_gradient("transpose")
def _transpose(call, g):
    inverse = [int(i) for i in np.argsort(call.attrs["axes"])]
    return [op("transpose", g, axes=inverse)]


@register_gradient("broadcast_to")
def _broadcast_to(call, g):
    return [unbroadcast(g, call.args[0].type.shape)]


@register_gradient("concatenate")
def _concatenate(call, g):
    ax = call.attrs["axis"]
    out, start = [], 0
    for x in call.args:
        shape = list(x.type.shape)
        begin = [0] * len(shape)
        end = list(g.type.shape)
        begin[ax], end[ax] = start, start + shape[ax]
        out.append(op("strided_slice", g, begin=begin, end=end, strides=[1] * len(shape)))
        start += shape[ax]
    return out




def _slice(x, d, lo, hi):
    """`x[lo:hi]` along dimension `d`."""
    b = [0] * x.type.ndim
    e = list(x.type.shape)
    b[d], e[d] = lo, hi
    return op("strided_slice", x, begin=b, end=e, strides=[1] * x.type.ndim)


def _flip(x, d):
    b = [0] * x.type.ndim
    e = list(x.type.shape)
    st = [1] * x.type.ndim
    b[d], e[d], st[d] = x.type.shape[d] - 1, -1, -1
    return op("strided_slice", x, begin=b, end=e, strides=st)


def _place(x, d, lo, size):
    """`x` along dimension `d` at offset `lo` of `size` zeros."""
    pw = [[0, 0] for _ in range(x.type.ndim)]
    pw[d] = [lo, size - lo - x.type.shape[d]]
    return op("nn.pad", x, pad_width=pw, pad_value=0.0, mode="constant")


def _spread(g, d, step):
    """`g` with `step - 1` zeros after each element along `d`: a stepped slice's reads
    back on the stride grid (length `n * step`)."""
    shape = list(g.type.shape)
    n = shape[d]
    g = op("reshape", g, newshape=shape[:d + 1] + [1] + shape[d + 1:])
    pw = [[0, 0] for _ in range(len(shape) + 1)]
    pw[d + 1] = [0, step - 1]
    g = op("nn.pad", g, pad_width=pw, pad_value=0.0, mode="constant")
    return op("reshape", g, newshape=shape[:d] + [n * step] + shape[d + 1:])


@register_gradient("strided_slice")
def _strided_slice(call, g):
    x = call.args[0]
    b, s = call.attrs["begin"], call.attrs["strides"]
    for d in range(x.type.ndim):
        n, size = g.type.shape[d], x.type.shape[d]
        if n == 0 or s[d] == 1:
            if n == 0:
                g = _place(g, d, 0, size)
            else:
                g = _place(g, d, b[d], size)
            continue
        start = b[d]
        if s[d] < 0:
            # x[b], x[b - |s|], ...: the same elements read upwards from the last one
            g = _flip(g, d)
            start = b[d] - (n - 1) * -s[d]
        step = abs(s[d])
        if step > 1:
            g = _spread(g, d, step)
            g = _slice(g, d, 0, min(n * step, size - start))
        g = _place(g, d, start, size)
    return [g]


@register_gradient("nn.pad")
def _pad(call, g):
    x = call.args[0]
    pw = call.attrs["pad_width"]
    mode = call.attrs["mode"]
    for d in range(x.type.ndim):
        lo, hi = pw[d]
        n = x.type.shape[d]
        if (lo, hi) == (0, 0):
            continue
        if lo < 0 or hi < 0:
            # a negative width crops: the cropped rows get zeros back
            if mode != "constant" and (lo > 0 or hi > 0):
                where = f" (node '{call.span}')" if call.span else ""
                raise GraphError(f"gradient: nn.pad{where} in mode '{mode}' mixing negative and "
                                 "positive widths on one axis has no gradient rule")
            g = _slice(g, d, max(lo, 0), g.type.shape[d] - max(hi, 0))
            g = _place(g, d, max(-lo, 0), n)
            continue
        core = _slice(g, d, lo, lo + n)
        left, right = _slice(g, d, 0, lo), _slice(g, d, lo + n, lo + n + hi)
        if mode == "constant":
            g = core
            continue
        parts = [core]
        if mode == "edge":
            # every padded row read the first (last) row
            for side, at in ((left, 0), (right, n - 1)):
                if side.type.shape[d] and n:
                    parts.append(_place(op("sum", side, axis=[d], keepdims=True), d, at, n))
        elif mode == "reflect":
            # row -i read row i, row n - 1 + i row n - 1 - i
            if lo > n - 1 or hi > n - 1:
                where = f" (node '{call.span}')" if call.span else ""
                raise GraphError(f"gradient: nn.pad{where} reflects {max(lo, hi)} rows of an axis of "
                                 f"{n}; the gradient rule takes at most {n - 1} (one reflection)")
            if lo:
                parts.append(_place(_flip(left, d), d, 1, n))
            if hi:
                parts.append(_place(_flip(right, d), d, n - 1 - hi, n))
        else:  # wrap: row -i read row n - i, row n - 1 + i row i - 1
            if lo > n or hi > n:
                where = f" (node '{call.span}')" if call.span else ""
                raise GraphError(f"gradient: nn.pad{where} wraps {max(lo, hi)} rows of an axis of "
                                 f"{n}; the gradient rule takes at most {n} (one period)")
            if lo:
                parts.append(_place(left, d, n - lo, n))
            if hi:
                parts.append(_place(right, d, 0, n))
        g = parts[0]
        for p in parts[1:]:
            g = op("add", g, p)
    return [g]


@register_gradient("take")
def _take(call, g):
    x, idx = call.args
    ax = call.attrs["axis"]
    return [op("take_grad", g, idx, axis=ax, size=x.type.shape[ax]), None]


@register_gradient("gather_elements")
def _gather_elements(call, g):
    x, idx = call.args
    return [op("gather_elements_grad", g, idx, axis=call.attrs["axis"], shape=list(x.type.shape)), None]


@register_gradient("cumsum")
def _cumsum(call, g):
    # each input element enters the sums after it (before it when reversed): the adjoint
    # is the running sum the other way
    a = call.attrs
    return [op("cumsum", g, axis=a["axis"], exclusive=a["exclusive"], reverse=not a["reverse"])]


@register_gradient("trilu")
def _trilu(call, g):
    return [op("trilu", g, upper=call.attrs["upper"], k=call.attrs["k"])]


@register_gradient("interp")
def _interp(call, g):
    # out[.., o, ..] = sum_t w[t, o] x[.., idx[t, o], ..]: one scatter-add per tap
    x, idx, w = call.args
    ax = call.attrs["axis"]
    n = g.type.ndim
    taps, size = idx.type.shape
    gx = gw = None
    for t in range(taps):
        it = op("reshape", _slice(idx, 0, t, t + 1), newshape=[size])
        wt = op("reshape", _slice(w, 0, t, t + 1), newshape=[size] + [1] * (n - ax - 1))
        part = op("take_grad", op("multiply", g, wt), it, axis=ax, size=x.type.shape[ax])
        gx = part if gx is None else op("add", gx, part)
        read = op("multiply", g, op("take", x, it, axis=ax))
        row = op("reshape", op("sum", read, axis=[d for d in range(n) if d != ax], keepdims=False),
                 newshape=[1, size])
        row = _place(row, 0, t, taps)
        gw = row if gw is None else op("add", gw, row)
    return [gx, None, gw]
