"""ONNX converters, quantization: QuantizeLinear, DequantizeLinear (per tensor and per
axis), QLinearConv, QLinearMatMul, ConvInteger, MatMulInteger. Per-axis scales and zero
points are reshaped to broadcast along their axis, so the graph operators
(ir/ops_quant.py) are plain broadcasting ones."""
from __future__ import annotations

from ...errors import GraphError
from .onnx_ops_nn import spatial_pads
from .registry import norm_axis, const_like, np_dtype, reshape_to, converter


def along(ctx, v, axis, ndim):
    """A per-axis vector `v` shaped to broadcast along `axis` of a rank-`ndim` tensor; a
    single value stays as it is."""
    if v.type.size == 1:
        return reshape_to(ctx, v, ())
    if v.type.ndim != 1:
        raise GraphError(f"a per-axis scale or zero point must be 1-D, got {v.type}")
    return reshape_to(ctx, v, (v.type.shape[0],) + (1,) * (ndim - axis - 1))


def _zero_point(ctx, ins, i, dtype):
    return ins[i] if len(ins) > i and ins[i] is not None else const_like(0, dtype)


def _blocked(ctx, v, ax, x, block):
    """A blocked scale (one per `block` elements along `ax`) repeated to x's shape."""
    if v.type.size == 1:
        return reshape_to(ctx, v, ())
    sh = list(v.type.shape)
    if len(sh) != x.type.ndim or sh[ax] * block < x.type.shape[ax]:
        raise GraphError(f"blocked quantization: {v.type} does not tile {x.type} in blocks of {block}")
    v = reshape_to(ctx, v, sh[:ax + 1] + [1] + sh[ax + 1:])
    v = ctx.call("broadcast_to", [v], shape=sh[:ax + 1] + [block] + sh[ax + 1:])
    v = reshape_to(ctx, v, sh[:ax] + [sh[ax] * block] + sh[ax + 1:])
    if v.type.shape[ax] != x.type.shape[ax]:
        v = ctx.call("strided_slice", [v], begin=[0] * len(sh), end=list(x.type.shape), strides=[1] * len(sh))
    return v


def _params(ctx, x, ins, attrs, zdt):
    """Scale and zero point of a QuantizeLinear/DequantizeLinear shaped to broadcast
    against x (per tensor, per axis or blocked)."""
    s, z = ins[1], _zero_point(ctx, ins, 2, zdt)
    block = int(attrs.get("block_size", 0))
    if s.type.size == 1:
        return reshape_to(ctx, s, ()), reshape_to(ctx, z, ())
    ax = norm_axis(attrs.get("axis", 1), x.type.ndim)
    if block:
        return _blocked(ctx, s, ax, x, block), _blocked(ctx, z, ax, x, block)
    return along(ctx, s, ax, x.type.ndim), along(ctx, z, ax, x.type.ndim)


def _f32(ctx, v):
    return v if v.type.dtype == "float32" else ctx.call("cast", [v], dtype="float32")


@converter("DequantizeLinear")
def _dequantize(ctx, node, ins, attrs):
    x = ins[0]
    s, z = _params(ctx, x, ins, attrs, x.type.dtype)
    y = ctx.call("qnn.dequantize", [x, _f32(ctx, s), z])
    # a float16 scale makes a float16 output; the arithmetic is float32 either way
    return y if s.type.dtype == "float32" else ctx.call("cast", [y], dtype=s.type.dtype)


@converter("QuantizeLinear")
def _quantize(ctx, node, ins, attrs):
    x = ins[0]
    if len(ins) > 2 and ins[2] is not None:
        dt = ins[2].type.dtype
    else:
        dt = np_dtype(attrs["output_dtype"]) if attrs.get("output_dtype") else "uint8"
    s, z = _params(ctx, x, ins, attrs, dt)
    return ctx.call("qnn.quantize", [_f32(ctx, x), _f32(ctx, s), z], out_dtype=dt)


def conv_attrs(attrs, x, w):
    if x.type.ndim != 4:
        raise GraphError(f"integer convolutions are 2-D here; got data {x.type}")
    k = list(attrs.get("kernel_shape", w.type.shape[2:]))
    s = list(attrs.get("strides", [1, 1]))
    dl = list(attrs.get("dilations", [1, 1]))
    return dict(strides=s, padding=spatial_pads(attrs, x.type.shape[2:], k, s, dl, 2), dilation=dl,
                groups=int(attrs.get("group", 1)))


def qconv(ctx, x, w, xz, wz, attrs):
    return ctx.call("qnn.conv2d", [x, w, reshape_to(ctx, xz, ()), along(ctx, wz, 0, 4)], **conv_attrs(attrs, x, w))


@converter("ConvInteger")
def _conv_integer(ctx, node, ins, attrs):
    x, w = ins[0], ins[1]
    return qconv(ctx, x, w, _zero_point(ctx, ins, 2, x.type.dtype), _zero_point(ctx, ins, 3, w.type.dtype), attrs)


@converter("MatMulInteger")
def _matmul_integer(ctx, node, ins, attrs):
    a, b = ins[0], ins[1]
    return qmatmul(ctx, a, b, _zero_point(ctx, ins, 2, a.type.dtype), _zero_point(ctx, ins, 3, b.type.dtype))


def qmatmul(ctx, a, b, az, bz):
    if a.type.ndim < 2 or b.type.ndim < 2:
        raise GraphError("MatMulInteger/QLinearMatMul: operands of rank 1 are not supported")
    # a's zero point is per row (M) or single, b's per column (N) or single
    return ctx.call("qnn.matmul", [a, b, along(ctx, az, a.type.ndim - 2, a.type.ndim), along(ctx, bz, 0, 1)])


def requantize(ctx, acc, scales, yz, out_dtype):
    """acc (int32) * (x_scale * w_scale / y_scale), rounded, plus y's zero point: the
    multiplier computed in float32 in onnxruntime's order."""
    xs, ws, ys = (_f32(ctx, v) for v in scales)
    m = ctx.call("divide", [ctx.call("multiply", [xs, ws]), ys])
    return ctx.call("qnn.requantize", [acc, m, yz], out_dtype=out_dtype)


@converter("QLinearConv")
def _qlinear_conv(ctx, node, ins, attrs):
    x, xs, xz, w, ws, wz, ys, yz = ins[:8]
    acc = qconv(ctx, x, w, xz, wz, attrs)
    if len(ins) > 8 and ins[8] is not None:
        acc = ctx.call("nn.bias_add", [acc, ins[8]], axis=1)
    return requantize(ctx, acc, (reshape_to(ctx, xs, ()), along(ctx, ws, 0, 3), reshape_to(ctx, ys, ())),
                      reshape_to(ctx, yz, ()), yz.type.dtype)


@converter("QLinearMatMul")
def _qlinear_matmul(ctx, node, ins, attrs):
    a, as_, az, b, bs, bz, ys, yz = ins
    acc = qmatmul(ctx, a, b, az, bz)
    nd = a.type.ndim
    return requantize(ctx, acc, (along(ctx, as_, nd - 2, nd), along(ctx, bs, 0, 1), reshape_to(ctx, ys, ())),
                      reshape_to(ctx, yz, ()), yz.type.dtype)
