"""ONNX converters, neural-network operators: Conv (and transposed), Gemm, MatMul, Softmax,
the normalizations, pools and the Reduce operators. Registered into registry.py's table when
the reader imports this module."""
from __future__ import annotations

import numpy as np

from ...errors import GraphError
from ..ir.dims import product
from ..ir import Const
from .registry import norm_axis, const_like, reshape_to, converter

# ---------------------------------------------------------------------------- conv / gemm

def spatial_pads(attrs, in_dims, k, s, dl, nd):
    """The begin and end pads of a conv or pool node (`auto_pad` resolved)."""
    auto = attrs.get("auto_pad", "NOTSET")
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        pads = [0] * (2 * nd)
        for d in range(nd):
            out = -(-in_dims[d] // s[d])
            total = max(0, (out - 1) * s[d] + (k[d] - 1) * dl[d] + 1 - in_dims[d])
            small, big = total // 2, total - total // 2
            pads[d], pads[d + nd] = (small, big) if auto == "SAME_UPPER" else (big, small)
        return pads
    if auto == "VALID":
        return [0] * (2 * nd)
    return list(attrs.get("pads", [0] * (2 * nd)))


@converter("Conv")
def _conv(ctx, node, ins, attrs):
    x, w = ins[0], ins[1]
    nd = x.type.ndim - 2
    if nd not in (1, 2, 3):
        raise GraphError(f"Conv on {nd} spatial dimensions is not supported (1 to 3)")
    k = list(attrs.get("kernel_shape", w.type.shape[2:]))
    s = list(attrs.get("strides", [1] * nd))
    dl = list(attrs.get("dilations", [1] * nd))
    pads = spatial_pads(attrs, x.type.shape[2:], k, s, dl, nd)
    y = ctx.call(f"nn.conv{nd}d", [x, w], strides=s, padding=pads, dilation=dl, groups=int(attrs.get("group", 1)))
    if len(ins) > 2 and ins[2] is not None:
        y = ctx.call("nn.bias_add", [y, ins[2]], axis=1)
    return y


@converter("ConvTranspose")
def _conv_transpose(ctx, node, ins, attrs):
    x, w = ins[0], ins[1]
    nd = x.type.ndim - 2
    if nd not in (1, 2, 3):
        raise GraphError(f"ConvTranspose on {nd} spatial dimensions is not supported (1 to 3)")
    k = list(attrs.get("kernel_shape", w.type.shape[2:]))
    s = list(attrs.get("strides", [1] * nd))
    dl = list(attrs.get("dilations", [1] * nd))
    opad = list(attrs.get("output_padding", [0] * nd))
    ind = x.type.shape[2:]
    auto = attrs.get("auto_pad", "NOTSET")
    if "output_shape" in attrs or auto in ("SAME_UPPER", "SAME_LOWER"):
        oshape = list(attrs["output_shape"])[-nd:] if "output_shape" in attrs else [ind[d] * s[d] for d in range(nd)]
        pads = [0] * (2 * nd)
        for d in range(nd):
            total = s[d] * (ind[d] - 1) + opad[d] + (k[d] - 1) * dl[d] + 1 - oshape[d]
            if total < 0:
                opad[d] += -total
                total = 0
            if auto == "SAME_UPPER":
                pads[d], pads[d + nd] = total // 2, total - total // 2
            else:
                pads[d], pads[d + nd] = total - total // 2, total // 2
    elif auto == "VALID":
        pads = [0] * (2 * nd)
    else:
        pads = list(attrs.get("pads", [0] * (2 * nd)))
    y = ctx.call(f"nn.conv{nd}d_transpose", [x, w], strides=s, padding=pads, dilation=dl,
                 groups=int(attrs.get("group", 1)), output_padding=opad)
    if len(ins) > 2 and ins[2] is not None:
        y = ctx.call("nn.bias_add", [y, ins[2]], axis=1)
    return y


def _transpose2(ctx, x):
    return ctx.call("transpose", [x], axes=[1, 0])


@converter("Gemm")
def _gemm(ctx, node, ins, attrs):
    a, b = ins[0], ins[1]
    c = ins[2] if len(ins) > 2 else None
    if attrs.get("transA", 0):
        a = _transpose2(ctx, a)
    w = b if attrs.get("transB", 0) else _transpose2(ctx, b)
    y = ctx.call("nn.dense", [a, w], units=w.type.shape[0])
    alpha, beta = float(attrs.get("alpha", 1.0)), float(attrs.get("beta", 1.0))
    dt = y.type.dtype
    if alpha != 1.0:
        y = ctx.call("multiply", [y, const_like(alpha, dt)])
    if c is not None:
        if beta != 1.0:
            c = ctx.call("multiply", [c, const_like(beta, dt)])
        if c.type.shape == (y.type.shape[1],):
            y = ctx.call("nn.bias_add", [y, c], axis=1)
        else:
            y = ctx.call("add", [y, c])
    return y


@converter("MatMul")
def _matmul(ctx, node, ins, attrs):
    a, b = ins
    a_vec, b_vec = a.type.ndim == 1, b.type.ndim == 1
    if a_vec:
        a = reshape_to(ctx, a, (1, a.type.shape[0]))
    if b_vec:
        b = reshape_to(ctx, b, (b.type.shape[0], 1))
    if isinstance(b, Const) and b.type.ndim == 2 and a.type.dtype.startswith("float"):
        lead = a.type.shape[:-1]
        k = a.type.shape[-1]
        a2 = reshape_to(ctx, a, (product(lead), k))
        y = ctx.call("nn.dense", [a2, _transpose2(ctx, b)], units=b.type.shape[1])
        y = reshape_to(ctx, y, (*lead, b.type.shape[1]))
    else:
        y = ctx.call("nn.matmul", [a, b])
    shape = list(y.type.shape)
    if b_vec:
        shape.pop(-1)
    if a_vec:
        shape.pop(-2 if not b_vec else -1)
    return reshape_to(ctx, y, shape)


# ---------------------------------------------------------------------------- normalization

@converter("Softmax", "LogSoftmax")
def _softmax(ctx, node, ins, attrs):
    x = ins[0]
    op = "nn.softmax" if node.op_type == "Softmax" else "nn.log_softmax"
    n = x.type.ndim
    if ctx.opset < 13:
        ax = norm_axis(attrs.get("axis", 1), n)
        shp = x.type.shape
        x2 = reshape_to(ctx, x, (product(shp[:ax]), product(shp[ax:])))
        return reshape_to(ctx, ctx.call(op, [x2], axis=1), shp)
    return ctx.call(op, [x], axis=norm_axis(attrs.get("axis", -1), n))


@converter("LayerNormalization")
def _layer_norm(ctx, node, ins, attrs):
    x, g = ins[0], ins[1]
    b = ins[2] if len(ins) > 2 and ins[2] is not None else Const(np.zeros(g.type.shape, g.type.dtype))
    ax = norm_axis(attrs.get("axis", -1), x.type.ndim)
    eps = float(attrs.get("epsilon", 1e-5))
    y = ctx.call("nn.layer_norm", [x, g, b], axis=ax, epsilon=eps)
    if len(node.output) == 1 or not any(node.output[1:]):
        return y
    axes = list(range(ax, x.type.ndim))
    dt = x.type.dtype
    mean = ctx.call("mean", [x], axis=axes, keepdims=True)
    d = ctx.call("subtract", [x, mean])
    var = ctx.call("mean", [ctx.call("multiply", [d, d])], axis=axes, keepdims=True)
    inv = ctx.call("reciprocal", [ctx.call("sqrt", [ctx.call("add", [var, const_like(eps, dt)])])])
    return [y, mean, inv]


@converter("BatchNormalization")
def _batch_norm(ctx, node, ins, attrs):
    x, g, b, m, v = ins[:5]
    eps = float(attrs.get("epsilon", 1e-5))
    if not attrs.get("training_mode", 0):
        return ctx.call("nn.batch_norm", [x, g, b, m, v], epsilon=eps)
    # training mode: batch statistics; running statistics as extra outputs
    mom = float(attrs.get("momentum", 0.9))
    axes = [0] + list(range(2, x.type.ndim))
    dt = x.type.dtype
    mean = ctx.call("mean", [x], axis=axes, keepdims=False)
    shape = [1, x.type.shape[1]] + [1] * (x.type.ndim - 2)
    d = ctx.call("subtract", [x, reshape_to(ctx, mean, shape)])
    var = ctx.call("mean", [ctx.call("multiply", [d, d])], axis=axes, keepdims=False)
    y = ctx.call("nn.batch_norm", [x, g, b, mean, var], epsilon=eps)
    rm = ctx.call("add", [ctx.call("multiply", [m, const_like(mom, dt)]),
                          ctx.call("multiply", [mean, const_like(1 - mom, dt)])])
    rv = ctx.call("add", [ctx.call("multiply", [v, const_like(mom, dt)]),
                          ctx.call("multiply", [var, const_like(1 - mom, dt)])])
    return [y, rm, rv]


# ---------------------------------------------------------------------------- pooling / reduce

def _pool_attrs(ctx, x, attrs):
    nd = x.type.ndim - 2
    k = list(attrs["kernel_shape"])
    s = list(attrs.get("strides", [1] * nd))
    dl = list(attrs.get("dilations", [1] * nd))
    pads = spatial_pads(attrs, x.type.shape[2:], k, s, dl, nd)
    return dict(pool_size=k, strides=s, padding=pads, dilation=dl, ceil_mode=bool(attrs.get("ceil_mode", 0)))


@converter("MaxPool")
def _maxpool(ctx, node, ins, attrs):
    x = ins[0]
    nd = x.type.ndim - 2
    pa = _pool_attrs(ctx, x, attrs)
    y = ctx.call(f"nn.max_pool{nd}d", [x], **pa)
    if len(node.output) < 2 or not node.output[1]:
        return y
    # a second operator reads the maxima and finds where each came from (ir/nodes.py: one type per Call)
    return [y, ctx.call("nn.max_pool_indices", [x, y], storage_order=int(attrs.get("storage_order", 0)), **pa)]


@converter("AveragePool")
def _avgpool(ctx, node, ins, attrs):
    x = ins[0]
    nd = x.type.ndim - 2
    return ctx.call(f"nn.avg_pool{nd}d", [x], count_include_pad=bool(attrs.get("count_include_pad", 0)),
                    **_pool_attrs(ctx, x, attrs))


@converter("GlobalAveragePool")
def _gap(ctx, node, ins, attrs):
    return ctx.call("nn.global_avg_pool", [ins[0]])


@converter("GlobalMaxPool")
def _gmp(ctx, node, ins, attrs):
    x = ins[0]
    return ctx.call("max", [x], axis=list(range(2, x.type.ndim)), keepdims=True)


_REDUCE = {"ReduceMean": "mean", "ReduceSum": "sum", "ReduceMax": "max", "ReduceMin": "min", "ReduceProd": "prod"}


def reduce_axes(ctx, x, ins, attrs):
    """The sorted axes a Reduce* node reduces (attribute, or input from opset 18 on), or
    None when it reduces nothing (empty axes with noop_with_empty_axes)."""
    axes = None
    if len(ins) > 1 and ins[1] is not None:
        axes = [int(a) for a in np.asarray(ctx.static(ins[1], "axes")).reshape(-1)]
    elif "axes" in attrs:
        axes = list(attrs["axes"])
    if not axes:
        if attrs.get("noop_with_empty_axes", 0):
            return None
        axes = list(range(x.type.ndim))
    return sorted({norm_axis(a, x.type.ndim) for a in axes})


@converter(*_REDUCE)
def _reduce(ctx, node, ins, attrs):
    x = ins[0]
    axes = reduce_axes(ctx, x, ins, attrs)
    if axes is None:
        return ctx.call("copy", [x])
    return ctx.call(_REDUCE[node.op_type], [x], axis=axes, keepdims=bool(attrs.get("keepdims", 1)))
