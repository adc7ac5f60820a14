"""Backward rules of the neural-network operators (ir/ops_nn.py): dense and matmul as two
matmuls, conv as a transposed conv (data) and a conv of the data by the output adjoint
(weights), max pooling by its windows (`nn.max_pool_grad`), the reductions and softmaxes
by broadcasts of their reduced adjoints."""
from __future__ import annotations

import numpy as np

from ...errors import GraphError
from .registry import keep_axes, op, reduced_axes, register_gradient, scalar, unbroadcast


def _swap_last(x):
    n = x.type.ndim
    return op("transpose", x, axes=list(range(n - 2)) + [n - 1, n - 2])


@register_gradient("nn.dense")
def _dense(call, g):
    x, w = call.args                     # y = x w^T: x (M, K), w (N, K), g (M, N)
    return [op("nn.matmul", g, w), op("nn.matmul", _swap_last(g), x)]


@register_gradient("nn.matmul")
def _matmul(call, g):
    a, b = call.args
    ga = op("nn.matmul", g, _swap_last(b))
    gb = op("nn.matmul", _swap_last(a), g)
    return [unbroadcast(ga, a.type.shape), unbroadcast(gb, b.type.shape)]


def _conv(call, g):
    x, w = call.args
    nd = x.type.ndim - 2
    a = call.attrs
    s, p, dl, groups = a["strides"], a["padding"], a["dilation"], a["groups"]
    if groups != 1:
        raise GraphError(f"gradient: {call.op} with groups={groups} has no gradient rule yet "
                         "(only groups=1)")
    in_dims, k_dims, out_dims = x.type.shape[2:], w.type.shape[2:], g.type.shape[2:]
    # the rows the forward conv never reached (the stride's remainder) come back as
    # output padding of the transposed conv, so that the data adjoint has x's shape
    opad = [in_dims[d] + p[d] + p[d + nd] - ((out_dims[d] - 1) * s[d] + (k_dims[d] - 1) * dl[d] + 1)
            for d in range(nd)]
    gx = op(f"nn.conv{nd}d_transpose", g, w, strides=s, padding=p, dilation=dl, groups=1,
            output_padding=opad)
    # weights: the batch becomes the reduced channel axis, the input channels the batch;
    # the output adjoint slides over the padded data with the forward dilation as its
    # stride and the forward stride as its dilation
    perm = [1, 0] + list(range(2, nd + 2))
    gw = op(f"nn.conv{nd}d", op("transpose", x, axes=perm), op("transpose", g, axes=perm),
            strides=dl, padding=p, dilation=s, groups=1)
    if tuple(gw.type.shape[2:]) != tuple(k_dims):
        gw = op("strided_slice", gw, begin=[0] * (nd + 2), end=list(gw.type.shape[:2]) + list(k_dims),
                strides=[1] * (nd + 2))
    return [gx, op("transpose", gw, axes=perm)]


for _nd in (1, 2, 3):
    register_gradient(f"nn.conv{_nd}d")(_conv)


def _max_pool(call, g):
    x = call.args[0]
    a = dict(call.attrs)
    return [op("nn.max_pool_grad", x, g, **a)]


for _nd in (1, 2, 3):
    register_gradient(f"nn.max_pool{_nd}d")(_max_pool)


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


