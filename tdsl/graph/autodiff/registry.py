"""The table of backward rules: `register_gradient(op)(rule)` registers `rule(call, grad)`,
which returns one adjoint per argument of `call` (a graph expression of the argument's type,
or None where the argument gets no gradient), built from graph operators so that fusion and
the operators' strategies apply to the backward pass as to the forward one. Helpers for the
rules live here too."""
from __future__ import annotations

from typing import Callable, Dict

import numpy as np

from ...errors import GraphError
from ..ir import Call, Const

GRADIENTS: Dict[str, Callable] = {}


def register_gradient(op_name: str):
    """Registers the decorated `rule(call, grad) -> [adjoint or None per argument]` as the
    backward rule of graph operator `op_name`."""
    def deco(fn):
        GRADIENTS[op_name] = fn
        return fn
    return deco


def rule_for(call: Call):
    rule = GRADIENTS.get(call.op)
    if rule is None:
        where = f" (node '{call.span}')" if call.span else ""
        raise GraphError(f"gradient: operator '{call.op}'{where} has no gradient rule; the "
                         f"differentiable operators are {', '.join(sorted(GRADIENTS))}")
    return rule


def op(name, *args, **attrs):
    return Call(name, args, attrs, span="grad")


def scalar(value, dtype):
    return Const(np.asarray(value, dtype=dtype))


def zeros_like(x):
    return Const(np.zeros(x.type.shape, x.type.dtype))


def unbroadcast(g, shape):
    """`g` summed over the dimensions that broadcasting added to or stretched in `shape`."""
    shape = tuple(shape)
    if g.type.shape == shape:
        return g
    lead = g.type.ndim - len(shape)
    axes = list(range(lead)) + [lead + d for d, s in enumerate(shape) if s == 1 and g.type.shape[lead + d] != 1]
    if axes:
        g = op("sum", g, axis=axes, keepdims=False)
    if g.type.shape != shape:
        g = op("reshape", g, newshape=list(shape))
    return g


def keep_axes(g, in_shape, axes, keepdims):
    """A reduction's output adjoint `g` with the reduced axes back as size 1."""
    if keepdims:
        return g
    shape = [1 if d in axes else s for d, s in enumerate(in_shape)]
    return op("reshape", g, newshape=shape)


def reduced_axes(call):
    ax = call.attrs["axis"]
    n = call.args[0].type.ndim
    return list(range(n)) if ax is None else sorted(ax)
