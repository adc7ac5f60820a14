"""ONNX converters, element-wise and numeric families added for real exported networks
(torchvision, ViT, BERT, GPT-2): activations, Mod, NaN/Inf tests, the Reduce* variants.
Registered into registry.py's table when the reader imports this module."""
from __future__ import annotations

import numpy as np

from ...errors import GraphError
from ..ir import Const
from .onnx_ops_nn import reduce_axes
from .registry import norm_axis, reshape_to, converter


@converter("HardSigmoid")
def _hard_sigmoid(ctx, node, ins, attrs):
    return ctx.call("nn.hard_sigmoid", [ins[0]], alpha=float(attrs.get("alpha", 0.2)),
                    beta=float(attrs.get("beta", 0.5)))


@converter("HardSwish")
def _hard_swish(ctx, node, ins, attrs):
    return ctx.call("nn.hard_swish", [ins[0]])


@converter("Mod")
def _mod(ctx, node, ins, attrs):
    # fmod=0 is Python's % (the sign of the divisor), fmod=1 is C's fmod (the sign of the
    # dividend); ONNX allows fmod=0 on integers only, numpy's np.mod meaning covers floats too
    return ctx.call("trunc_mod" if attrs.get("fmod", 0) else "floor_mod", ins[:2])


@converter("IsNaN")
def _isnan(ctx, node, ins, attrs):
    return ctx.call("isnan", [ins[0]])


@converter("IsInf")
def _isinf(ctx, node, ins, attrs):
    return ctx.call("isinf", [ins[0]], detect_positive=bool(attrs.get("detect_positive", 1)),
                    detect_negative=bool(attrs.get("detect_negative", 1)))


# ---------------------------------------------------------------------------- Reduce* variants

def _square(ctx, x):
    return ctx.call("multiply", [x, x])


def _float_op(ctx, op, x):
    """`op` (sqrt, log, exp) on any dtype: integers go through float64 and back, the way
    onnxruntime computes its integer Reduce* kernels."""
    if x.type.dtype.startswith("float"):
        return ctx.call(op, [x])
    return ctx.call("cast", [ctx.call(op, [ctx.call("cast", [x], dtype="float64")])], dtype=x.type.dtype)


# name -> (element-wise before, the reduction, element-wise after)
_REDUCE_VARIANTS = {
    "ReduceSumSquare": (_square, "sum", None),
    "ReduceL1": (lambda ctx, x: ctx.call("abs", [x]), "sum", None),
    "ReduceL2": (_square, "sum", lambda ctx, x: _float_op(ctx, "sqrt", x)),
    "ReduceLogSum": (None, "sum", lambda ctx, x: _float_op(ctx, "log", x)),
}


@converter(*_REDUCE_VARIANTS, "ReduceLogSumExp")
def _reduce_variant(ctx, node, ins, attrs):
    x = ins[0]
    axes = reduce_axes(ctx, x, ins, attrs)
    keep = bool(attrs.get("keepdims", 1))
    if node.op_type == "ReduceLogSumExp":
        return _log_sum_exp(ctx, x, axes, keep)
    pre, red, post = _REDUCE_VARIANTS[node.op_type]
    y = pre(ctx, x) if pre else x
    # no axes with noop_with_empty_axes: each element is reduced alone, so only the
    # element-wise parts remain (onnx's reference gives x*x for ReduceSumSquare, say)
    if axes is not None:
        y = ctx.call(red, [y], axis=axes, keepdims=keep)
    y = post(ctx, y) if post else y
    return y if y is not x else ctx.call("copy", [x])


def _log_sum_exp(ctx, x, axes, keep):
    if axes is None:
        return ctx.call("copy", [x])
    if not x.type.dtype.startswith("float"):
        x64 = ctx.call("cast", [x], dtype="float64")
        return ctx.call("cast", [_log_sum_exp(ctx, x64, axes, keep)], dtype=x.type.dtype)
    # the largest element is taken out before exp so that large inputs do not overflow
    m = ctx.call("max", [x], axis=axes, keepdims=True)
    s = ctx.call("sum", [ctx.call("exp", [ctx.call("subtract", [x, m])])], axis=axes, keepdims=keep)
    if not keep:
        m = reshape_to(ctx, m, s.type.shape)
    return ctx.call("add", [ctx.call("log", [s]), m])


# ---------------------------------------------------------------------------- ArgMax / ArgMin

@converter("ArgMax", "ArgMin")
def _arg_extreme(ctx, node, ins, attrs):
    # the extreme value, then the lowest (or, with select_last_index, highest) position
    # holding it: plain reductions and a where, so it fuses and folds like everything else
    x = ins[0]
    n = x.type.ndim
    ax = norm_axis(attrs.get("axis", 0), n)
    keep = bool(attrs.get("keepdims", 1))
    last = bool(attrs.get("select_last_index", 0))
    size = x.type.shape[ax]
    if size == 0:
        raise GraphError(f"{node.op_type} over an empty axis {ax} of {x.type}")
    m = ctx.call("max" if node.op_type == "ArgMax" else "min", [x], axis=[ax], keepdims=True)
    hit = ctx.call("equal", [x, m])
    iota = Const(np.arange(size, dtype=np.int64).reshape([size] + [1] * (n - ax - 1)))
    miss = Const(np.asarray(-1 if last else size, np.int64))
    pos = ctx.call("where", [hit, iota, miss])
    return ctx.call("max" if last else "min", [pos], axis=[ax], keepdims=keep)


# ---------------------------------------------------------------------------- CumSum / TopK

@converter("CumSum")
def _cumsum(ctx, node, ins, attrs):
    x = ins[0]
    ax = int(np.asarray(ctx.static(ins[1], "CumSum axis")).reshape(-1)[0])
    return ctx.call("cumsum", [x], axis=norm_axis(ax, x.type.ndim), exclusive=bool(attrs.get("exclusive", 0)),
                    reverse=bool(attrs.get("reverse", 0)))


@converter("TopK")
def _topk(ctx, node, ins, attrs):
    x = ins[0]
    if len(ins) > 1 and ins[1] is not None:
        k = int(np.asarray(ctx.static(ins[1], "TopK k")).reshape(-1)[0])
    else:
        k = int(attrs["k"])
    ax = norm_axis(attrs.get("axis", -1), x.type.ndim)
    if x.type.dtype == "bool":
        raise GraphError("TopK of a bool tensor is not supported")
    # sorted=0 leaves the order to the implementation; sorted order is one valid answer
    idx = ctx.call("topk_indices", [x], axis=ax, k=k, largest=bool(attrs.get("largest", 1)))
    return [ctx.call("gather_elements", [x, idx], axis=ax), idx]
