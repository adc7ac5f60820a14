"""Quantized graph operators (ONNX's QuantizeLinear family): quantize, dequantize and
requantize (element-wise with broadcast scales: a per-axis scale arrives reshaped to
broadcast along its axis), and the integer anchors `qnn.conv2d` and `qnn.matmul`, which
accumulate (x - x_zp) * (w - w_zp) in int32 as ConvInteger and MatMulInteger do, and
`qnn.add` and `qnn.global_avg_pool`, onnxruntime's QLinearAdd and
QLinearGlobalAveragePool: quantized in, quantized out, the output scale's reciprocal or
the whole multiplier precomputed (no division in the kernel); `qnn.lut`, any element-wise
function of one 8-bit image as a table of its 256 values."""
from __future__ import annotations

import numpy as np

from ...errors import GraphError
from .ops_nn import conv_infer, conv_ref
from .registry import check_nargs, broadcast_shape, register
from .types import TensorType

QTYPES = ("uint8", "int8")
STORED = QTYPES + ("uint16", "int16")     # what QuantizeLinear may produce


def saturate(v, z, dtype):
    """Round half to even (onnxruntime's rounding), add the zero point, clamp to `dtype`'s
    range. Rounding before the zero point is added keeps a float32 sum from moving a value
    near .5 across it."""
    info = np.iinfo(dtype)
    return np.clip(np.rint(v) + z.astype(np.float32), info.min, info.max).astype(dtype)


def _scaled_infer(out_dtype=None):
    def infer(types, attrs):
        check_nargs(types, 3)
        x, s, z = types
        if s.dtype != "float32":
            raise GraphError(f"the scale must be float32, got {s.dtype}")
        dt = out_dtype or attrs["out_dtype"]
        if dt not in STORED + ("float32",):
            raise GraphError(f"unsupported quantized type {dt}")
        return TensorType(broadcast_shape(x.shape, s.shape, z.shape), dt)
    return infer


def _quantize_ref(x, s, z, a):
    return saturate(x.astype(np.float32) / s, z, a["out_dtype"])


def _dequantize_ref(x, s, z, a):
    return ((x.astype(np.int32) - z.astype(np.int32)).astype(np.float32) * s).astype(np.float32)


def _requantize_ref(acc, m, z, a):
    return saturate(acc.astype(np.float32) * m, z, a["out_dtype"])


register("qnn.quantize", "broadcast", _scaled_infer(), _quantize_ref, required=("out_dtype",))
register("qnn.dequantize", "broadcast", _scaled_infer("float32"), _dequantize_ref)
register("qnn.requantize", "broadcast", _scaled_infer(), _requantize_ref, required=("out_dtype",))


def _int_operands(types):
    for t in types:
        if t.dtype not in QTYPES:
            raise GraphError(f"integer operands must be uint8 or int8, got {t.dtype}")


def qconv_infer(types, attrs):
    """The type of a quantized convolution (x, w and their zero points): int32."""
    check_nargs(types, 4)
    x, w, xz, wz = types
    _int_operands(types)
    # the weight's zero point is one value or one per output channel, shaped (CO, 1, 1, 1)
    if xz.size != 1 or wz.size not in (1, w.shape[0]) or broadcast_shape(w.shape, wz.shape) != w.shape:
        raise GraphError(f"zero points {xz}, {wz}: one for the data, one or one per output channel for the weight")
    return conv_infer(2)([TensorType(x.shape, "int32"), TensorType(w.shape, "int32")], attrs)


def _shifted(v, z):
    return v.astype(np.int64) - z.astype(np.int64)


def qconv_ref(x, w, xz, wz, a):
    """A quantized convolution in numpy: the int32 sums of the shifted operands."""
    out = conv_ref(_shifted(x, xz.reshape(())).astype(np.float64), _shifted(w, wz).astype(np.float64), a)
    return np.rint(out).astype(np.int32)


_CONV_ATTRS = {"strides": [1, 1], "padding": [0, 0, 0, 0], "dilation": [1, 1], "groups": 1}
register("qnn.conv2d", "anchor", qconv_infer, qconv_ref, _CONV_ATTRS)


def _qmatmul_infer(types, attrs):
    check_nargs(types, 4)
    a, b, az, bz = types
    _int_operands(types)
    if a.ndim < 2 or b.ndim < 2 or a.shape[-1] != b.shape[-2]:
        raise GraphError(f"operands {a} and {b} do not multiply")
    # a's zero point broadcasts along its rows (..., M, 1), b's along its columns (..., 1, N)
    broadcast_shape(a.shape, az.shape)
    broadcast_shape(b.shape, bz.shape)
    batch = broadcast_shape(a.shape[:-2], b.shape[:-2])
    return TensorType((*batch, a.shape[-2], b.shape[-1]), "int32")


def _qmatmul_ref(a, b, az, bz, at):
    return np.matmul(_shifted(a, az), _shifted(b, bz)).astype(np.int32)


register("qnn.matmul", "anchor", _qmatmul_infer, _qmatmul_ref)



def _scalars(types, dtypes, what):
    for t, d in zip(types, dtypes):
        if t.size != 1 or (t.dtype != d if d else t.dtype not in QTYPES):
            raise GraphError(f"{what}: expected a scalar of {d or 'uint8/int8'}, got {t}")


def _round_saturate(v, z, dtype):
    info = np.iinfo(dtype)
    return np.clip(np.rint(v) + z.astype(np.float32), info.min, info.max).astype(dtype)


def _qadd_infer(types, attrs):
    check_nargs(types, 8)
    a, b, sa, za, sb, zb, ry, zy = types
    _int_operands([a, b])
    _scalars([sa, za, sb, zb, ry, zy], ["float32", None, "float32", None, "float32", None], "qnn.add")
    if attrs["out_dtype"] not in QTYPES:
        raise GraphError(f"qnn.add: unsupported output type {attrs['out_dtype']}")
    return TensorType(broadcast_shape(a.shape, b.shape), attrs["out_dtype"])


def _qadd_ref(a, b, sa, za, sb, zb, ry, zy, at):
    f = np.float32
    v = (((a.astype(np.int32) - za.astype(np.int32)).astype(f) * f(sa)) +
         ((b.astype(np.int32) - zb.astype(np.int32)).astype(f) * f(sb))) * f(ry)
    return _round_saturate(v, zy, at["out_dtype"])


# onnxruntime's QLinearAdd (its AVX2 kernel): the dequantized sum times the reciprocal of
# the output scale (onnxruntime divides by it: the product differs by an ulp at most)
register("qnn.add", "broadcast", _qadd_infer, _qadd_ref, required=("out_dtype",))


def _qgap_infer(types, attrs):
    check_nargs(types, 4)
    x, m, bias, zy = types
    _int_operands([x])
    _scalars([m, bias, zy], ["float32", "int32", None], "qnn.global_avg_pool")
    if x.ndim < 3 or attrs["out_dtype"] not in QTYPES:
        raise GraphError(f"qnn.global_avg_pool: input {x} of rank >= 3, output {attrs['out_dtype']}")
    return TensorType(x.shape[:2] + (1,) * (x.ndim - 2), attrs["out_dtype"])


def _qgap_ref(x, m, bias, zy, at):
    s = x.astype(np.int32).sum(axis=tuple(range(2, x.ndim)), keepdims=True) + bias.astype(np.int32)
    return _round_saturate(s.astype(np.float32) * np.float32(m), zy, at["out_dtype"])


# onnxruntime's QLinearGlobalAveragePool: (the int32 sum - z_x * count) times
# s_x / (s_y * count), rounded, plus z_y, saturated
register("qnn.global_avg_pool", "reduce", _qgap_infer, _qgap_ref, required=("out_dtype",))


def _lut_infer(types, attrs):
    check_nargs(types, 2)
    x, t = types
    _int_operands([x, t])
    if t.shape != (256,):
        raise GraphError(f"qnn.lut: the table must hold 256 values, got {t}")
    return TensorType(x.shape, t.dtype)


def _lut_ref(x, t, a):
    return t[x.astype(np.int32) - np.iinfo(x.dtype).min]


# element i of the table is the value for the input min(dtype) + i
register("qnn.lut", "broadcast", _lut_infer, _lut_ref)
