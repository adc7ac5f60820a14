"""ONNX -> graph IR (`from_onnx`). Opsets 13 to 21 of the default domain.

Shapes are static: a symbolic input dimension takes its value from `dims=` (by name),
`shape=` (by input) or, only when asked, `default_dim=`; otherwise the import stops with
the list of what is missing (as TVM's relay.frontend.from_onnx needs its shape=). Inputs
that ONNX passes as tensors but that must be known at compile time (Reshape's shape,
Slice's starts, Pad's pads, ...) are evaluated from constants with the numpy meaning of the
operators (`static`), so torch's Shape -> Gather -> Concat -> Reshape chains become plain
attributes. Each ONNX node maps to one or a few graph operators.
"""
from __future__ import annotations

import math
from typing import Dict, List

import numpy as np

from ..errors import GraphError
from .ir import Call, Const, Expr, Function, Module, TensorType, Var
from .onnx_inputs import input_shapes
from .ops import evaluate, slice_len

_CONVERTERS = {}


def converter(*names):
    def deco(fn):
        for n in names:
            _CONVERTERS[n] = fn
        return fn
    return deco


def supported_operators():
    return sorted(_CONVERTERS)


class Ctx:
    def __init__(self, opset):
        self.opset = opset
        self.node = None
        self._fold_memo = {}

    def call(self, op, args, **attrs):
        return Call(op, args, attrs, span=self.node.name or self.node.op_type if self.node is not None else "")

    def static(self, e: Expr, what="input") -> np.ndarray:
        """The value of `e`, which must be computable from constants."""
        v = fold_value(e, self._fold_memo)
        if v is None:
            raise GraphError(f"{what} must be known at compile time (a constant or computed from "
                             "constants and shapes), but it depends on a graph input")
        return v


def fold_value(e, memo):
    """Evaluates `e` if it depends on constants only; None otherwise."""
    if isinstance(e, Const):
        return e.data
    if not isinstance(e, Call) or isinstance(e.op, Function):
        return None
    key = id(e)
    if key in memo:
        return memo[key][1]
    vals = []
    for a in e.args:
        v = fold_value(a, memo)
        if v is None:
            memo[key] = (e, None)
            return None
        vals.append(v)
    out = evaluate(e.op, e.attrs, vals)
    memo[key] = (e, out)   # keep e alive so its id stays unique
    return out


def _np_dtype(elem_type):
    import onnx
    try:
        return str(np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem_type)))
    except Exception:
        raise GraphError(f"unsupported ONNX element type {elem_type}") from None


def _to_array(tensor):
    from onnx import numpy_helper
    try:
        return numpy_helper.to_array(tensor)
    except Exception as e:
        raise GraphError(f"cannot read tensor '{tensor.name}': {e}") from None


def _load(model):
    import onnx
    if isinstance(model, onnx.ModelProto):
        return model
    if isinstance(model, (bytes, bytearray)):
        try:
            return onnx.load_from_string(bytes(model))
        except Exception as e:
            raise GraphError(f"from_onnx: the bytes are not an ONNX model ({type(e).__name__}: {e})") from None
    path = str(model)
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise GraphError(f"from_onnx: cannot read '{path}': {e.strerror}") from None
    try:
        m = onnx.ModelProto()
        m.ParseFromString(data)
    except Exception as e:
        raise GraphError(f"from_onnx: '{path}' is not a valid ONNX model ({type(e).__name__}: {e})") from None
    if not m.HasField("graph") or not m.graph.node and not m.graph.output:
        raise GraphError(f"from_onnx: '{path}' holds no ONNX graph")
    try:
        from onnx.external_data_helper import load_external_data_for_model
        import os
        load_external_data_for_model(m, os.path.dirname(os.path.abspath(path)))
    except Exception:
        pass
    return m


def from_onnx(model, shape: Dict[str, tuple] = None, default_dim: int = None, bind: Dict[str, np.ndarray] = None,
              dims: Dict[str, int] = None) -> Module:
    """Imports an ONNX model (a path, bytes or an `onnx.ModelProto`) as a graph Module.
    Shapes are static: every symbolic input dimension (an ONNX dim_param such as "batch")
    needs a value at import, from `dims` (dimension name -> size, shared by every input
    that names it), from `shape` (input name -> whole static shape), or from `default_dim`
    (one size for all that are left; off unless given). A missing one raises a GraphError
    that lists them all. `bind` maps input names to arrays that become constants (shape or
    axes inputs that a static-shape compiler needs at compile time)."""
    m = _load(model)
    g = m.graph
    opset = 13
    for imp in m.opset_import:
        if imp.domain in ("", "ai.onnx"):
            opset = imp.version
    unsupported = []
    for node in g.node:
        if node.domain not in ("", "ai.onnx") or node.op_type not in _CONVERTERS:
            unsupported.append(node)
    if unsupported:
        n = unsupported[0]
        kinds = sorted({(x.domain + "." if x.domain not in ("", "ai.onnx") else "") + x.op_type for x in unsupported})
        raise GraphError(f"from_onnx: unsupported ONNX operator '{kinds[0] if len(kinds) == 1 else n.op_type}' "
                         f"(node '{n.name or n.output[0] if n.output else n.op_type}')"
                         + (f"; all unsupported operators: {', '.join(kinds)}" if len(kinds) > 1 else ""))
    env: Dict[str, Expr] = {}
    for init in g.initializer:
        env[init.name] = Const(_to_array(init))
    params = []
    bind = dict(bind or {})
    inputs = []
    for inp in g.input:
        if inp.name in env:
            continue
        if inp.name in bind:
            env[inp.name] = Const(np.asarray(bind.pop(inp.name)))
            continue
        if not inp.type.HasField("tensor_type"):
            raise GraphError(f"from_onnx: input '{inp.name}' is not a tensor (sequences and maps "
                             "are not supported)")
        inputs.append(inp)
    static, dim_values = input_shapes(inputs, shape, default_dim, dims)
    for inp in inputs:
        v = Var(_legal_name(inp.name), TensorType(static[inp.name], _np_dtype(inp.type.tensor_type.elem_type)))
        params.append(v)
        env[inp.name] = v
    if bind:
        raise GraphError(f"from_onnx: bind= names unknown inputs {sorted(bind)}")
    ctx = Ctx(opset)
    for node in g.node:
        ctx.node = node
        for i in node.input:
            if i and i not in env:
                raise GraphError(f"from_onnx: node '{node.name}' ({node.op_type}) reads '{i}', "
                                 "which no earlier node or input defines")
        ins = [env[i] if i else None for i in node.input]
        attrs = {a.name: _attr_value(a) for a in node.attribute}
        try:
            outs = _CONVERTERS[node.op_type](ctx, node, ins, attrs)
        except GraphError as e:
            msg = str(e)
            if "(node '" not in msg:
                msg = f"{node.op_type} (node '{node.name or node.output[0]}'): {msg}"
            raise GraphError(msg) from None
        except (KeyError, IndexError, ValueError, TypeError, AttributeError) as e:
            raise GraphError(f"{node.op_type} (node '{node.name or node.output[0]}'): malformed node "
                             f"({type(e).__name__}: {e})") from None
        if not isinstance(outs, (list, tuple)):
            outs = [outs]
        for name, o in zip(node.output, outs):
            if name:
                env[name] = o
        for k, name in enumerate(node.output):
            if name and k >= len(outs):
                raise GraphError(f"{node.op_type} (node '{node.name or name}'): output {k} "
                                 f"('{name}') is not supported")
    outputs = []
    for o in g.output:
        if o.name not in env:
            raise GraphError(f"from_onnx: graph output '{o.name}' is not computed by any node")
        outputs.append(env[o.name])
    if not outputs:
        raise GraphError("from_onnx: the graph has no outputs")
    fn = Function("main", params, outputs)
    fn.attrs = {}
    mod = Module(fn, {"output_names": [o.name for o in g.output],
                      "input_names": {p.name: i.name for p, i in zip(params, inputs)},
                      "dims": dim_values})
    return mod


def _legal_name(name):
    import re
    s = re.sub(r"[^\w.]", "_", name)
    return s or "input"


def _attr_value(a):
    import onnx
    v = onnx.helper.get_attribute_value(a)
    if isinstance(v, bytes):
        return v.decode()
    if isinstance(v, onnx.TensorProto):
        return _to_array(v)
    if isinstance(v, list):
        return [x.decode() if isinstance(x, bytes) else x for x in v]
    return v


# ---------------------------------------------------------------------------- helpers

def _axis(ax, ndim):
    ax = int(ax)
    if not -ndim <= ax < max(ndim, 1):
        raise GraphError(f"axis {ax} out of range for rank {ndim}")
    return ax + ndim if ax < 0 else ax


def _reshape(ctx, x, shape):
    shape = [int(s) for s in shape]
    if tuple(shape) == x.type.shape:
        return x
    return ctx.call("reshape", [x], newshape=shape)


def _const_like(value, dtype):
    return Const(np.asarray(value, dtype=dtype))


# ---------------------------------------------------------------------------- elementwise

_UNARY = {"Relu": "nn.relu", "Sigmoid": "sigmoid", "Tanh": "tanh", "Erf": "erf", "Exp": "exp",
          "Log": "log", "Sqrt": "sqrt", "Neg": "negative", "Abs": "abs", "Floor": "floor",
          "Ceil": "ceil", "Reciprocal": "reciprocal", "Not": "logical_not"}


@converter(*_UNARY)
def _unary(ctx, node, ins, attrs):
    return ctx.call(_UNARY[node.op_type], [ins[0]])


@converter("LeakyRelu")
def _leaky(ctx, node, ins, attrs):
    return ctx.call("nn.leaky_relu", [ins[0]], alpha=float(attrs.get("alpha", 0.01)))


_BINARY = {"Add": "add", "Sub": "subtract", "Mul": "multiply", "Div": "divide", "Pow": "power",
           "Equal": "equal", "Less": "less", "Greater": "greater", "LessOrEqual": "less_equal",
           "GreaterOrEqual": "greater_equal", "And": "logical_and", "Or": "logical_or"}


@converter(*_BINARY)
def _binary(ctx, node, ins, attrs):
    return ctx.call(_BINARY[node.op_type], ins[:2])


@converter("Max", "Min", "Sum")
def _variadic(ctx, node, ins, attrs):
    op = {"Max": "maximum", "Min": "minimum", "Sum": "add"}[node.op_type]
    out = ins[0]
    for x in ins[1:]:
        out = ctx.call(op, [out, x])
    return out if len(ins) > 1 else ctx.call("copy", [out])


@converter("Where")
def _where(ctx, node, ins, attrs):
    return ctx.call("where", ins)


@converter("Cast")
def _cast(ctx, node, ins, attrs):
    return ctx.call("cast", [ins[0]], dtype=_np_dtype(attrs["to"]))


@converter("Clip")
def _clip(ctx, node, ins, attrs):
    x = ins[0]
    dt = np.dtype(x.type.dtype)
    lo_default = -np.inf if dt.kind == "f" else np.iinfo(dt).min
    hi_default = np.inf if dt.kind == "f" else np.iinfo(dt).max
    if ctx.opset < 11:
        lo, hi = attrs.get("min", lo_default), attrs.get("max", hi_default)
    else:
        bounds = []
        for k, default, op in ((1, lo_default, "maximum"), (2, hi_default, "minimum")):
            e = ins[k] if len(ins) > k else None
            if e is None:
                bounds.append(default)
                continue
            v = fold_value(e, ctx._fold_memo)
            if v is None:      # a bound computed at run time
                x = ctx.call(op, [x, e])
                bounds.append(default)
            else:
                bounds.append(v.item())
        lo, hi = bounds
        if lo == lo_default and hi == hi_default and x is not ins[0]:
            return x
    return ctx.call("clip", [x], a_min=lo, a_max=hi)


@converter("Identity")
def _identity(ctx, node, ins, attrs):
    return ins[0]


@converter("Dropout")
def _dropout(ctx, node, ins, attrs):
    x = ins[0]
    training = False
    if len(ins) > 2 and ins[2] is not None:
        training = bool(np.asarray(ctx.static(ins[2], "Dropout training_mode")).reshape(-1)[0])
    ratio = 0.5
    if len(ins) > 1 and ins[1] is not None:
        ratio = float(np.asarray(ctx.static(ins[1], "Dropout ratio")).reshape(-1)[0])
    if training and ratio != 0:
        raise GraphError("Dropout in training mode (random masks) is not supported; export the model in eval mode")
    outs = [x]
    if len(node.output) > 1 and node.output[1]:
        outs.append(Const(np.ones(x.type.shape, bool)))
    return outs


@converter("Constant")
def _constant(ctx, node, ins, attrs):
    for k in ("value", "value_float", "value_floats", "value_int", "value_ints"):
        if k in attrs:
            v = attrs[k]
            if k.startswith("value_float"):
                return Const(np.asarray(v, np.float32))
            if k.startswith("value_int"):
                return Const(np.asarray(v, np.int64))
            return Const(v)
    raise GraphError(f"Constant: no supported value attribute among {sorted(attrs)}")


@converter("ConstantOfShape")
def _const_of_shape(ctx, node, ins, attrs):
    shape = [int(s) for s in ctx.static(ins[0], "ConstantOfShape shape")]
    v = attrs.get("value", np.zeros(1, np.float32))
    return Const(np.full(shape, v.reshape(-1)[0], v.dtype))


@converter("Shape")
def _shape(ctx, node, ins, attrs):
    shape = ins[0].type.shape
    n = len(shape)
    start = attrs.get("start", 0)
    end = attrs.get("end", n)
    start = min(max(start + n if start < 0 else start, 0), n)
    end = min(max(end + n if end < 0 else end, 0), n)
    return Const(np.asarray(shape[start:end], np.int64))


@converter("Size")
def _size(ctx, node, ins, attrs):
    return Const(np.asarray(ins[0].type.size, np.int64))


@converter("Range")
def _range(ctx, node, ins, attrs):
    s, l, d = (ctx.static(i, "Range input") for i in ins)
    return Const(np.arange(s, l, d).astype(s.dtype))


# ---------------------------------------------------------------------------- conv / gemm

def _spatial_pads(attrs, in_dims, k, s, dl, nd):
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
    pads = _spatial_pads(attrs, x.type.shape[2:], k, s, dl, nd)
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
        y = ctx.call("multiply", [y, _const_like(alpha, dt)])
    if c is not None:
        if beta != 1.0:
            c = ctx.call("multiply", [c, _const_like(beta, dt)])
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
        a = _reshape(ctx, a, (1, a.type.shape[0]))
    if b_vec:
        b = _reshape(ctx, b, (b.type.shape[0], 1))
    if isinstance(b, Const) and b.type.ndim == 2 and a.type.dtype.startswith("float"):
        lead = a.type.shape[:-1]
        k = a.type.shape[-1]
        a2 = _reshape(ctx, a, (int(np.prod(lead)), k))
        y = ctx.call("nn.dense", [a2, _transpose2(ctx, b)], units=b.type.shape[1])
        y = _reshape(ctx, y, (*lead, b.type.shape[1]))
    else:
        y = ctx.call("nn.matmul", [a, b])
    shape = list(y.type.shape)
    if b_vec:
        shape.pop(-1)
    if a_vec:
        shape.pop(-2 if not b_vec else -1)
    return _reshape(ctx, y, shape)


# ---------------------------------------------------------------------------- normalization

@converter("Softmax", "LogSoftmax")
def _softmax(ctx, node, ins, attrs):
    x = ins[0]
    op = "nn.softmax" if node.op_type == "Softmax" else "nn.log_softmax"
    n = x.type.ndim
    if ctx.opset < 13:
        ax = _axis(attrs.get("axis", 1), n)
        shp = x.type.shape
        x2 = _reshape(ctx, x, (int(np.prod(shp[:ax])), int(np.prod(shp[ax:]))))
        return _reshape(ctx, ctx.call(op, [x2], axis=1), shp)
    return ctx.call(op, [x], axis=_axis(attrs.get("axis", -1), n))


@converter("LayerNormalization")
def _layer_norm(ctx, node, ins, attrs):
    x, g = ins[0], ins[1]
    b = ins[2] if len(ins) > 2 and ins[2] is not None else Const(np.zeros(g.type.shape, g.type.dtype))
    ax = _axis(attrs.get("axis", -1), x.type.ndim)
    eps = float(attrs.get("epsilon", 1e-5))
    y = ctx.call("nn.layer_norm", [x, g, b], axis=ax, epsilon=eps)
    if len(node.output) == 1 or not any(node.output[1:]):
        return y
    axes = list(range(ax, x.type.ndim))
    dt = x.type.dtype
    mean = ctx.call("mean", [x], axis=axes, keepdims=True)
    d = ctx.call("subtract", [x, mean])
    var = ctx.call("mean", [ctx.call("multiply", [d, d])], axis=axes, keepdims=True)
    inv = ctx.call("reciprocal", [ctx.call("sqrt", [ctx.call("add", [var, _const_like(eps, dt)])])])
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
    d = ctx.call("subtract", [x, _reshape(ctx, mean, shape)])
    var = ctx.call("mean", [ctx.call("multiply", [d, d])], axis=axes, keepdims=False)
    y = ctx.call("nn.batch_norm", [x, g, b, mean, var], epsilon=eps)
    rm = ctx.call("add", [ctx.call("multiply", [m, _const_like(mom, dt)]),
                          ctx.call("multiply", [mean, _const_like(1 - mom, dt)])])
    rv = ctx.call("add", [ctx.call("multiply", [v, _const_like(mom, dt)]),
                          ctx.call("multiply", [var, _const_like(1 - mom, dt)])])
    return [y, rm, rv]


# ---------------------------------------------------------------------------- pooling / reduce

def _pool_attrs(ctx, x, attrs):
    nd = x.type.ndim - 2
    k = list(attrs["kernel_shape"])
    s = list(attrs.get("strides", [1] * nd))
    dl = list(attrs.get("dilations", [1] * nd))
    pads = _spatial_pads(attrs, x.type.shape[2:], k, s, dl, nd)
    return dict(pool_size=k, strides=s, padding=pads, dilation=dl, ceil_mode=bool(attrs.get("ceil_mode", 0)))


@converter("MaxPool")
def _maxpool(ctx, node, ins, attrs):
    x = ins[0]
    nd = x.type.ndim - 2
    pa = _pool_attrs(ctx, x, attrs)
    y = ctx.call(f"nn.max_pool{nd}d", [x], **pa)
    if len(node.output) < 2 or not node.output[1]:
        return y
    # a second operator reads the maxima and finds where each came from (ir.py: one type per Call)
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
    return sorted({_axis(a, x.type.ndim) for a in axes})


@converter(*_REDUCE)
def _reduce(ctx, node, ins, attrs):
    x = ins[0]
    axes = reduce_axes(ctx, x, ins, attrs)
    if axes is None:
        return ctx.call("copy", [x])
    return ctx.call(_REDUCE[node.op_type], [x], axis=axes, keepdims=bool(attrs.get("keepdims", 1)))


# ---------------------------------------------------------------------------- shapes

@converter("Reshape")
def _reshape_conv(ctx, node, ins, attrs):
    x = ins[0]
    shape = [int(s) for s in ctx.static(ins[1], "Reshape shape")]
    allowzero = attrs.get("allowzero", 0)
    out = []
    for i, s in enumerate(shape):
        if s == 0 and not allowzero:
            out.append(x.type.shape[i])
        else:
            out.append(s)
    if out.count(-1) > 1:
        raise GraphError(f"Reshape: more than one -1 in {shape}")
    if -1 in out:
        known = int(np.prod([s for s in out if s != -1]))
        if known == 0 or x.type.size % known:
            raise GraphError(f"Reshape: cannot infer -1 in {shape} for {x.type}")
        out[out.index(-1)] = x.type.size // known
    return _reshape(ctx, x, out) if tuple(out) != x.type.shape else ctx.call("copy", [x]) if isinstance(x, Var) else x


@converter("Flatten")
def _flatten(ctx, node, ins, attrs):
    x = ins[0]
    ax = int(attrs.get("axis", 1))
    ax = ax + x.type.ndim if ax < 0 else ax
    shp = x.type.shape
    return _reshape(ctx, x, (int(np.prod(shp[:ax])), int(np.prod(shp[ax:]))))


@converter("Squeeze")
def _squeeze(ctx, node, ins, attrs):
    x = ins[0]
    if len(ins) > 1 and ins[1] is not None:
        axes = [int(a) for a in ctx.static(ins[1], "Squeeze axes")]
    else:
        axes = attrs.get("axes")
    n = x.type.ndim
    if axes is None:
        axes = [d for d, s in enumerate(x.type.shape) if s == 1]
    axes = {_axis(a, n) for a in axes}
    for a in axes:
        if x.type.shape[a] != 1:
            raise GraphError(f"Squeeze: dimension {a} of {x.type} is not 1")
    return _reshape(ctx, x, [s for d, s in enumerate(x.type.shape) if d not in axes])


@converter("Unsqueeze")
def _unsqueeze(ctx, node, ins, attrs):
    x = ins[0]
    if len(ins) > 1 and ins[1] is not None:
        axes = [int(a) for a in ctx.static(ins[1], "Unsqueeze axes")]
    else:
        axes = list(attrs["axes"])
    n = x.type.ndim + len(axes)
    axes = sorted(_axis(a, n) for a in axes)
    shape = list(x.type.shape)
    for a in axes:
        shape.insert(a, 1)
    return _reshape(ctx, x, shape)


@converter("Transpose")
def _transpose(ctx, node, ins, attrs):
    x = ins[0]
    perm = list(attrs.get("perm", range(x.type.ndim - 1, -1, -1)))
    return ctx.call("transpose", [x], axes=[int(p) for p in perm])


@converter("Concat")
def _concat(ctx, node, ins, attrs):
    xs = [i for i in ins if i is not None and i.type.size > 0] or [ins[0]]
    if len(xs) == 1:
        return xs[0]
    return ctx.call("concatenate", xs, axis=_axis(attrs["axis"], xs[0].type.ndim))


@converter("Split")
def _split(ctx, node, ins, attrs):
    x = ins[0]
    ax = _axis(attrs.get("axis", 0), x.type.ndim)
    n = len(node.output)
    if len(ins) > 1 and ins[1] is not None:
        sizes = [int(v) for v in ctx.static(ins[1], "Split split")]
    elif "split" in attrs:
        sizes = list(attrs["split"])
    else:
        total = x.type.shape[ax]
        num = attrs.get("num_outputs", n)
        chunk = -(-total // num)
        sizes = [min(chunk, total - i * chunk) for i in range(num)]
    if sum(sizes) != x.type.shape[ax]:
        raise GraphError(f"Split: sizes {sizes} do not add up to {x.type.shape[ax]}")
    outs, start = [], 0
    for sz in sizes:
        b = [0] * x.type.ndim
        e = list(x.type.shape)
        b[ax], e[ax] = start, start + sz
        outs.append(ctx.call("strided_slice", [x], begin=b, end=e, strides=[1] * x.type.ndim))
        start += sz
    return outs


@converter("Slice")
def _slice(ctx, node, ins, attrs):
    x = ins[0]
    n = x.type.ndim
    starts = [int(v) for v in ctx.static(ins[1], "Slice starts")]
    ends = [int(v) for v in ctx.static(ins[2], "Slice ends")]
    axes = [int(v) for v in ctx.static(ins[3], "Slice axes")] if len(ins) > 3 and ins[3] is not None else list(range(len(starts)))
    steps = [int(v) for v in ctx.static(ins[4], "Slice steps")] if len(ins) > 4 and ins[4] is not None else [1] * len(starts)
    b = [0] * n
    e = list(x.type.shape)
    st = [1] * n
    for s0, e0, a, sp in zip(starts, ends, axes, steps):
        a = _axis(a, n)
        dim = x.type.shape[a]
        if sp == 0:
            raise GraphError("Slice: a step of 0")
        s0 = s0 + dim if s0 < 0 else s0
        e0 = e0 + dim if e0 < 0 else e0
        if sp > 0:
            s0, e0 = min(max(s0, 0), dim), min(max(e0, 0), dim)
        else:
            s0, e0 = min(max(s0, -1), dim - 1), min(max(e0, -1), dim - 1)
        b[a], e[a], st[a] = s0, e0, sp
    return ctx.call("strided_slice", [x], begin=b, end=e, strides=st)


@converter("Gather")
def _gather(ctx, node, ins, attrs):
    x, idx = ins
    ax = _axis(attrs.get("axis", 0), x.type.ndim)
    if isinstance(idx, Const):
        iv = idx.data.astype(np.int64)
        iv = np.where(iv < 0, iv + x.type.shape[ax], iv)
        if iv.ndim == 0 and not isinstance(x, Const):
            b = [0] * x.type.ndim
            e = list(x.type.shape)
            b[ax], e[ax] = int(iv), int(iv) + 1
            y = ctx.call("strided_slice", [x], begin=b, end=e, strides=[1] * x.type.ndim)
            return _reshape(ctx, y, [s for d, s in enumerate(x.type.shape) if d != ax])
        idx = Const(iv)
    return ctx.call("take", [x, idx], axis=ax)


@converter("Pad")
def _pad(ctx, node, ins, attrs):
    x = ins[0]
    n = x.type.ndim
    mode = attrs.get("mode", "constant")
    if len(ins) > 1:
        pads = [int(v) for v in ctx.static(ins[1], "Pad pads")]
        value = ctx.static(ins[2], "Pad constant_value").item() if len(ins) > 2 and ins[2] is not None else 0
        axes = [_axis(int(a), n) for a in ctx.static(ins[3], "Pad axes")] if len(ins) > 3 and ins[3] is not None else list(range(n))
    else:
        pads = list(attrs["pads"])
        value = attrs.get("value", 0.0)
        axes = list(range(n))
    pw = [[0, 0] for _ in range(n)]
    k = len(axes)
    for i, a in enumerate(axes):
        pw[a] = [pads[i], pads[i + k]]
    value = float(value) if x.type.dtype.startswith("float") else int(value)
    return ctx.call("nn.pad", [x], pad_width=pw, pad_value=value, mode=mode)


@converter("Expand")
def _expand(ctx, node, ins, attrs):
    x = ins[0]
    shape = [int(s) for s in ctx.static(ins[1], "Expand shape")]
    from .ops import broadcast_shape
    out = broadcast_shape(x.type.shape, shape)
    if out == x.type.shape:
        return x
    return ctx.call("broadcast_to", [x], shape=list(out))


@converter("Gelu")
def _gelu(ctx, node, ins, attrs):
    x = ins[0]
    dt = x.type.dtype
    if attrs.get("approximate", "none") == "tanh":
        inner = ctx.call("multiply", [ctx.call("add", [x, ctx.call("multiply", [
            ctx.call("multiply", [ctx.call("multiply", [x, x]), x]), _const_like(0.044715, dt)])]),
            _const_like(math.sqrt(2 / math.pi), dt)])
        t = ctx.call("add", [ctx.call("tanh", [inner]), _const_like(1, dt)])
    else:
        t = ctx.call("add", [ctx.call("erf", [ctx.call("multiply", [x, _const_like(1 / math.sqrt(2), dt)])]),
                             _const_like(1, dt)])
    return ctx.call("multiply", [ctx.call("multiply", [x, t]), _const_like(0.5, dt)])


# the operator families that live in sibling modules register themselves on import
from . import onnx_ops_einsum, onnx_ops_math, onnx_ops_tensor  # noqa: E402,F401
