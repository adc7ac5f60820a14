"""Backward rules of the neural-network operators (ir/ops_nn.py) but the convolutions
(grad_conv.py): dense and matmul as two matmuls, the pools by their windows
(`nn.max_pool_grad`, `nn.avg_pool_grad`), the reductions and softmaxes by broadcasts of
their reduced adjoints, the normalizations in inference form by their closed forms."""
from __future__ import annotations

import numpy as np

from .registry import keep_axes, op, reduced_axes, register_gradient, scalar, unbroadcast


def _swap_last(x):
    n = x.type.ndim
    return op("transpose", x, axes=list(range(n - 2)) + [n - 1, n - 2])


@register_gradient("nn.dense")
def _dense(call, g):
    x, w = call.args                     # y = x w^T: x (M, K), w (N, K), g (M, N)
    return [op("nn.matmul", g, w), op("nn.matmul", _swap_last(g), x)]


def _rows(x):
    """(..., M, K) as (prod(...) * M, K)."""
    return op("reshape", x, newshape=[int(np.prod(x.type.shape[:-1])), x.type.shape[-1]])


@register_gradient("nn.matmul")
def _matmul(call, g):
    a, b = call.args
    # a 2-D operand shared by every batch (a linear layer's weights) gets one matmul over
    # the batch's rows, not a batch of products summed afterwards
    if b.type.ndim == 2 and a.type.ndim > 2:
        gb = op("nn.matmul", _swap_last(_rows(a)), _rows(g))
    else:
        gb = unbroadcast(op("nn.matmul", _swap_last(a), g), b.type.shape)
    if a.type.ndim == 2 and b.type.ndim > 2:
        n = b.type.ndim
        perm = [n - 2] + list(range(n - 2)) + [n - 1]
        rest = int(np.prod(b.type.shape[:-2])) * b.type.shape[-1]
        gt = op("reshape", op("transpose", g, axes=perm), newshape=[a.type.shape[0], rest])
        bt = op("reshape", op("transpose", b, axes=perm), newshape=[a.type.shape[1], rest])
        ga = op("nn.matmul", gt, _swap_last(bt))
    else:
        ga = unbroadcast(op("nn.matmul", g, _swap_last(b)), a.type.shape)
    return [ga, gb]


def _max_pool(call, g):
    x = call.args[0]
    a = dict(call.attrs)
    return [op("nn.max_pool_grad", x, g, **a)]


def _avg_pool(call, g):
    return [op("nn.avg_pool_grad", g, shape=list(call.args[0].type.shape), **dict(call.attrs))]


for _nd in (1, 2, 3):
    register_gradient(f"nn.max_pool{_nd}d")(_max_pool)
    register_gradient(f"nn.avg_pool{_nd}d")(_avg_pool)


@register_gradient("nn.global_avg_pool")
def _global_avg_pool(call, g):
    x = call.args[0]
    cnt = int(np.prod(x.type.shape[2:]))
    g = op("multiply", g, scalar(1.0 / cnt, g.type.dtype))
    return [op("broadcast_to", g, shape=list(x.type.shape))]


def _spread(call, g):
    """The reduction's output adjoint broadcast back over the input's shape."""
    x = call.args[0]
    axes = reduced_axes(call)
    g = keep_axes(g, x.type.shape, axes, call.attrs["keepdims"])
    return op("broadcast_to", g, shape=list(x.type.shape)), axes


@register_gradient("sum")
def _sum(call, g):
    return [_spread(call, g)[0]]


@register_gradient("mean")
def _mean(call, g):
    x = call.args[0]
    gx, axes = _spread(call, g)
    cnt = int(np.prod([x.type.shape[d] for d in axes]))
    return [op("multiply", gx, scalar(1.0 / max(cnt, 1), g.type.dtype))]


def _extremum(call, g):
    x = call.args[0]
    gx, axes = _spread(call, g)
    y = keep_axes(call, x.type.shape, axes, call.attrs["keepdims"])
    # every element equal to the extremum gets the adjoint (as TVM's relay rule)
    return [op("where", op("equal", x, y), gx, scalar(0, g.type.dtype))]


register_gradient("max")(_extremum)
register_gradient("min")(_extremum)


@register_gradient("prod")
def _prod(call, g):
    # the product of the other elements, which a zero among them makes 0: with z zeros in
    # the reduction, a zero element gets the product of the nonzero ones when z == 1, a
    # nonzero element the product over itself when z == 0, all others 0
    x = call.args[0]
    dt = x.type.dtype
    gx, axes = _spread(call, g)
    zero = op("equal", x, scalar(0, dt))
    nonzero = op("where", zero, scalar(1, dt), x)
    pnz = op("prod", nonzero, axis=axes, keepdims=True)
    zeros = op("sum", op("cast", zero, dtype=dt), axis=axes, keepdims=True)
    others = op("where", zero, op("where", op("equal", zeros, scalar(1, dt)), pnz, scalar(0, dt)),
                op("where", op("equal", zeros, scalar(0, dt)), op("divide", pnz, nonzero), scalar(0, dt)))
    return [op("multiply", gx, others)]


@register_gradient("nn.softmax")
def _softmax(call, g):
    ax = call.attrs["axis"]
    gy = op("multiply", g, call)
    s = op("sum", gy, axis=[ax], keepdims=True)
    return [op("subtract", gy, op("multiply", call, s))]


@register_gradient("nn.log_softmax")
def _log_softmax(call, g):
    ax = call.attrs["axis"]
    s = op("sum", g, axis=[ax], keepdims=True)
    return [op("subtract", g, op("multiply", op("exp", call), s))]


@register_gradient("nn.batch_norm")
def _batch_norm(call, g):
    # inference form: y = (x - mean) * gamma / sqrt(var + eps) + beta, the statistics fixed
    x, gamma, beta, mean, var = call.args
    n = x.type.ndim
    shape = [1, x.type.shape[1]] + [1] * (n - 2)
    dt = x.type.dtype
    axes = [0] + list(range(2, n))
    inv = op("reciprocal", op("sqrt", op("add", var, scalar(call.attrs["epsilon"], dt))))
    scale = op("multiply", gamma, inv)
    gx = op("multiply", g, op("reshape", scale, newshape=shape))
    centred = op("subtract", x, op("reshape", mean, newshape=shape))
    g_gamma = op("multiply", op("sum", op("multiply", g, centred), axis=axes, keepdims=False), inv)
    g_beta = op("sum", g, axis=axes, keepdims=False)
    g_mean = op("negative", op("multiply", g_beta, scale))
    # d/dvar of (var + eps)^-1/2 is -1/2 (var + eps)^-3/2
    g_var = op("multiply", op("multiply", g_gamma, gamma),
               op("multiply", scalar(-0.5, dt), op("multiply", inv, inv)))
    return [gx, g_gamma, g_beta, g_mean, g_var]


@register_gradient("nn.layer_norm")
def _layer_norm(call, g):
    # y = xh * gamma + beta, xh = (x - m) r, r = (var + eps)^-1/2 over the axes from `axis`
    # on; dx = r (gh - mean(gh) - xh mean(gh xh)) with gh = g * gamma
    x, gamma, beta = call.args
    dt = x.type.dtype
    axes = list(range(call.attrs["axis"], x.type.ndim))
    m = op("mean", x, axis=axes, keepdims=True)
    d = op("subtract", x, m)
    var = op("mean", op("multiply", d, d), axis=axes, keepdims=True)
    r = op("reciprocal", op("sqrt", op("add", var, scalar(call.attrs["epsilon"], dt))))
    xh = op("multiply", d, r)
    gh = op("multiply", g, gamma)
    inner = op("subtract", op("subtract", gh, op("mean", gh, axis=axes, keepdims=True)),
               op("multiply", xh, op("mean", op("multiply", gh, xh), axis=axes, keepdims=True)))
    gx = op("multiply", r, inner)
    return [gx, unbroadcast(op("multiply", g, xh), gamma.type.shape), unbroadcast(g, beta.type.shape)]


