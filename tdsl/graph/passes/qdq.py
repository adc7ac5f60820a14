"""Quantized networks in the QDQ form (onnxruntime's quantizer: DequantizeLinear -> float
operator -> QuantizeLinear) run as integer operators:

    quantize(conv(dequantize(x), dequantize(W)) [+ dequantize(b)], s_y, z_y)
        -> requantize(qnn.conv2d(x, W, z_x, z_W) [+ b], s_x * s_W / s_y, z_y)

and likewise for a 1-D conv (as the 2-D conv of one row, conv_forms.conv1d_as_conv2d's form)
and for dense and matmul with constant weights (qnn.matmul). The bias must be
the int32 one the quantizer writes (scale s_x * s_W, zero point 0), so the integer sum is
what onnxruntime's QLinearConv computes. Max pools and reshapes between a dequantize and a
quantize of the same parameters run on the integers (both commute with a monotonic affine
map). `quantize(dequantize(a) + dequantize(b))` becomes `qnn.add` (QLinearAdd) and
`quantize(global_avg_pool(dequantize(x)))` `qnn.global_avg_pool`, with per-tensor
parameters, as onnxruntime's QLinearAdd and QLinearGlobalAveragePool compute them (the
multipliers folded here: the kernels multiply and never divide). Any other element-wise
function of one 8-bit image, quantized, becomes `qnn.lut`: a table of its 256 values
(onnxruntime's QLinearSigmoid and the like are tables too; SiLU, x * sigmoid(x), with its
inner quantize, is one table).
Runs before constant folding, which would turn the dequantized weights into floats."""
from __future__ import annotations

import numpy as np

from ..ir import Call, Const, Function, Module
from ..ir.ops_quant import QTYPES
from ..ir.registry import evaluate, get_op
from .conv_forms import attrs_as_2d
from .rewrite import rewrite, same

# operators that commute with dequantize -> quantize of the same parameters
_ORDER_PRESERVING = ("nn.max_pool1d", "nn.max_pool2d", "nn.max_pool3d", "reshape", "copy")


def _static(e, memo):
    """The value of `e` if it is computed from constants only, else None."""
    if isinstance(e, Const):
        return e.data
    if not isinstance(e, Call) or isinstance(e.op, Function):
        return None
    if e not in memo:
        vals = [_static(a, memo) for a in e.args]
        memo[e] = None if any(v is None for v in vals) else evaluate(e.op, e.attrs, vals)
    return memo[e]


def _dq(e, memo, static_data=False):
    """(data, scale, zero point) of a dequantize of 8-bit integers with constant parameters."""
    if not (isinstance(e, Call) and e.op == "qnn.dequantize" and e.args[0].type.dtype in QTYPES + ("int32",)):
        return None
    s, z = _static(e.args[1], memo), _static(e.args[2], memo)
    data = _static(e.args[0], memo) if static_data else e.args[0]
    if s is None or z is None or data is None:
        return None
    return data, s, z


def _weights(e, memo):
    """(W, scale, zero point) of constant dequantized weights, seen through a transpose."""
    if isinstance(e, Call) and e.op == "transpose" and e.args[0].type.ndim == 2:
        r = _weights(e.args[0], memo)
        return None if r is None else tuple(np.swapaxes(np.broadcast_to(v, r[0].shape), 0, 1) if v.size > 1 else v
                                            for v in r)
    r = _dq(e, memo, static_data=True)
    return r if r is not None and r[0].dtype in QTYPES else None


def _integer_anchor(n, args, memo):
    y, sy, zy = args
    sy, zy = _static(sy, memo), _static(zy, memo)
    if sy is None or zy is None or sy.size != 1 or zy.size != 1:
        return None
    bias = None
    if isinstance(y, Call) and y.op == "nn.bias_add":
        y, bias = y.args
    if not (isinstance(y, Call) and y.op in ("nn.conv1d", "nn.conv2d", "nn.dense", "nn.matmul")):
        return None
    x, w = _dq(y.args[0], memo), _weights(y.args[1], memo)
    if x is None or w is None or x[1].size != 1 or x[2].size != 1:
        return None
    (xq, sx, zx), (wq, sw, zw) = x, w
    attrs, row = y.attrs, y.op == "nn.conv1d"
    if row:     # the 2-D conv of one row (conv_forms.conv1d_as_conv2d), reshaped back
        attrs = attrs_as_2d(attrs)
        xq = Call("reshape", [xq], {"newshape": list(xq.type.shape[:2]) + [1] + list(xq.type.shape[2:])})
        wq, sw, zw = (v[:, :, None] if v.ndim == 3 else v for v in (wq, sw, zw))
    conv = y.op in ("nn.conv1d", "nn.conv2d")
    if not conv and wq.ndim != 2:
        return None
    if y.op == "nn.dense":         # dense's weights are (N, K): as matmul's (K, N)
        wq, sw, zw = (np.swapaxes(np.broadcast_to(v, wq.shape), 0, 1) if v.size > 1 else v for v in (wq, sw, zw))
    # one scale per output channel: axis 0 of a conv's weights, axis 1 of matmul's
    chan = (lambda v: v.reshape(-1, *v.shape[1:])[:, 0, 0, 0]) if conv else (lambda v: v[0, :])
    sw_c = chan(np.broadcast_to(sw, wq.shape)).astype(np.float32) if sw.size > 1 else sw.reshape(())
    mult = (sx.reshape(()).astype(np.float32) * sw_c / sy.reshape(()).astype(np.float32)).astype(np.float32)
    if zw.size > 1:
        zw = chan(np.broadcast_to(zw, wq.shape))
        zw = zw.reshape((-1, 1, 1, 1)) if conv else zw
    zw = np.asarray(zw, wq.dtype).reshape(zw.shape if zw.size > 1 else ())
    if conv:
        acc = Call("qnn.conv2d", [xq, Const(wq), Const(zx.reshape(())), Const(zw)], attrs)
    else:
        acc = Call("qnn.matmul", [xq, Const(np.ascontiguousarray(wq)), Const(zx.reshape(())), Const(zw)], {})
    if bias is not None:
        b = _dq(bias, memo, static_data=True)
        if b is None or b[0].dtype != np.int32 or np.any(b[2] != 0) or \
                not np.allclose(b[1].reshape(-1), sx.reshape(()) * sw_c.reshape(-1), rtol=1e-5, atol=0):
            return None
        acc = Call("nn.bias_add", [acc, Const(b[0].reshape(-1))], {"axis": 1})
    if conv and mult.size > 1:
        mult = mult.reshape(-1, 1, 1)
    q = Call("qnn.requantize", [acc, Const(mult), Const(zy.reshape(()))], {"out_dtype": n.attrs["out_dtype"]},
             n.span)
    return Call("reshape", [q], {"newshape": list(n.type.shape)}, n.span) if row else q


def _on_integers(n, args, memo):
    """quantize(f(dequantize(x, s, z)), s, z) -> f(x) for an order-preserving f."""
    f = args[0]
    if not (isinstance(f, Call) and f.op in _ORDER_PRESERVING and len(f.args) == 1):
        return None
    d = _dq(f.args[0], memo)
    q = (_static(args[1], memo), _static(args[2], memo))
    if d is None or q[0] is None or q[1] is None or d[0].type.dtype != n.attrs["out_dtype"]:
        return None
    if d[1].size != 1 or q[0].size != 1 or d[1].reshape(()) != q[0].reshape(()) or \
            d[2].reshape(()) != q[1].reshape(()):
        return None
    return Call(f.op, [d[0]], f.attrs, f.span)


def _scalar(v):
    return None if v is None or v.size != 1 else v.reshape(()).astype(np.float64)


def _out_params(n, args, memo):
    sy, zy = _scalar(_static(args[1], memo)), _scalar(_static(args[2], memo))
    if sy is None or zy is None or n.attrs["out_dtype"] not in QTYPES:
        return None
    return sy, zy


def _dq_scalar(e, memo):
    d = _dq(e, memo)
    if d is None or d[0].type.dtype not in QTYPES or _scalar(d[1]) is None or _scalar(d[2]) is None:
        return None
    return d[0], _scalar(d[1]), _scalar(d[2])


def _c(v, dtype):
    return Const(np.asarray(v, dtype))


def _integer_add(n, args, memo):
    """quantize(dequantize(a) + dequantize(b)) -> qnn.add (QLinearAdd); the output scale
    arrives as its float32 reciprocal."""
    f, out = args[0], _out_params(n, args, memo)
    if out is None or not (isinstance(f, Call) and f.op == "add" and len(f.args) == 2):
        return None
    a, b = _dq_scalar(f.args[0], memo), _dq_scalar(f.args[1], memo)
    if a is None or b is None:
        return None
    sy, zy = out
    dt = n.attrs["out_dtype"]
    return Call("qnn.add", [a[0], b[0], _c(a[1], np.float32), _c(a[2], a[0].type.dtype), _c(b[1], np.float32),
                            _c(b[2], b[0].type.dtype), _c(np.float32(1) / np.float32(sy), np.float32), _c(zy, dt)],
                {"out_dtype": dt}, n.span)


def _integer_gap(n, args, memo):
    """quantize(global_avg_pool(dequantize(x))) -> qnn.global_avg_pool, with onnxruntime's
    multiplier s_x / (s_y * count) in float32."""
    f, out = args[0], _out_params(n, args, memo)
    if out is None or not (isinstance(f, Call) and f.op == "nn.global_avg_pool"):
        return None
    x = _dq_scalar(f.args[0], memo)
    if x is None:
        return None
    sy, zy = out
    count = int(np.prod(x[0].type.shape[2:]))
    if count >= 1 << 23:
        return None
    m = np.float32(x[1]) / (np.float32(sy) * np.float32(count))
    dt = n.attrs["out_dtype"]
    return Call("qnn.global_avg_pool", [x[0], _c(m, np.float32), _c(-int(x[2]) * count, np.int32), _c(zy, dt)],
                {"out_dtype": dt}, n.span)


# float operators a table may fold: element-wise ones, whose image operands all have the
# output's shape (the other operands scalar constants)
_TABULATED = ("add", "subtract", "multiply", "divide", "maximum", "minimum", "power", "where",
              "qnn.quantize", "qnn.dequantize")
_TABLE_NODES = 64


def _table(n, args, memo):
    """quantize(f(x)) -> qnn.lut(x, table) where f is an element-wise function of one 8-bit
    image x alone (dequantized, or through tables of it) and scalar constants: the float
    operators evaluated once on all 256 values of x."""
    if _out_params(n, args, memo) is None:
        return None
    shape = tuple(n.type.shape)
    src, seen = [], {}

    def value(e):
        if e in seen:
            return seen[e]
        if len(seen) > _TABLE_NODES:
            raise LookupError
        if isinstance(e, Const):
            if e.data.size != 1:
                raise LookupError
            v = e.data
        elif src and e is src[0]:
            v = np.arange(np.iinfo(e.type.dtype).min, np.iinfo(e.type.dtype).max + 1).astype(e.type.dtype)
        elif isinstance(e, Call) and e.op == "qnn.lut":
            x = e.args[0]
            v = e.args[1].data[value(x).astype(np.int32) - np.iinfo(x.type.dtype).min]
        elif not src and e.type.dtype in QTYPES and tuple(e.type.shape) == shape:
            src.append(e)
            return value(e)
        elif isinstance(e, Call) and (get_op(e.op).kind == "elemwise" or e.op in _TABULATED) and \
                tuple(e.type.shape) in (shape, ()):
            v = evaluate(e.op, e.attrs, [value(a) for a in e.args])
        else:
            raise LookupError
        seen[e] = v
        return v
    try:
        f = value(args[0])
    except LookupError:
        return None
    if not src or np.ndim(f) != 1 or not np.all(np.isfinite(f)):
        return None
    table = evaluate("qnn.quantize", n.attrs, [f, _static(args[1], memo), _static(args[2], memo)])
    return Call("qnn.lut", [src[0], Const(np.ascontiguousarray(table))], {}, n.span)


def quantized_operators(mod: Module) -> Module:
    memo = {}

    def visit(n, args):
        if n.op == "qnn.quantize":
            r = _integer_anchor(n, args, memo) or _on_integers(n, args, memo) or \
                _integer_add(n, args, memo) or _integer_gap(n, args, memo) or _table(n, args, memo)
            if r is not None:
                return r
        return same(n, args)
    return rewrite(mod, visit)
