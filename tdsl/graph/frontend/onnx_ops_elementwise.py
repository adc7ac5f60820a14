"""ONNX converters, element-wise: activations, arithmetic, comparisons, Where, Cast, Clip,
Gelu. Registered into registry.py's table when the reader imports this module."""
from __future__ import annotations

import math

import numpy as np

from .registry import const_like, np_dtype, converter

# ---------------------------------------------------------------------------- elementwise

_UNARY = {"Relu": "nn.relu", "Sigmoid": "sigmoid", "Tanh": "tanh", "Erf": "erf", "Exp": "exp",
          "Log": "log", "Sqrt": "sqrt", "Neg": "negative", "Abs": "abs", "Floor": "floor",
          "Ceil": "ceil", "Round": "round", "Reciprocal": "reciprocal", "Not": "logical_not"}


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
    return ctx.call("cast", [ins[0]], dtype=np_dtype(attrs["to"]))


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
            v = ctx.fold(e)
            if v is None:      # a bound computed at run time
                x = ctx.call(op, [x, e])
                bounds.append(default)
            else:
                bounds.append(v.item())
        lo, hi = bounds
        if lo == lo_default and hi == hi_default and x is not ins[0]:
            return x
    return ctx.call("clip", [x], a_min=lo, a_max=hi)


@converter("Gelu")
def _gelu(ctx, node, ins, attrs):
    x = ins[0]
    dt = x.type.dtype
    if attrs.get("approximate", "none") == "tanh":
        inner = ctx.call("multiply", [ctx.call("add", [x, ctx.call("multiply", [
            ctx.call("multiply", [ctx.call("multiply", [x, x]), x]), const_like(0.044715, dt)])]),
            const_like(math.sqrt(2 / math.pi), dt)])
        t = ctx.call("add", [ctx.call("tanh", [inner]), const_like(1, dt)])
    else:
        t = ctx.call("add", [ctx.call("erf", [ctx.call("multiply", [x, const_like(1 / math.sqrt(2), dt)])]),
                             const_like(1, dt)])
    return ctx.call("multiply", [ctx.call("multiply", [x, t]), const_like(0.5, dt)])
