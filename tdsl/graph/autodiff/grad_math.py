"""Backward rules of the elementwise and broadcasting operators (ir/ops_math.py). Where an
operator's derivative is a function of its result (exp, tanh, sigmoid, sqrt, reciprocal),
the rule reads the forward result rather than computing it again. Comparisons, logical
operators and integer results carry no gradient (reverse.py never asks for one)."""
from __future__ import annotations

import numpy as np

from ..ir.registry import FLOATS
from .registry import op, register_gradient, scalar, unbroadcast


def _zero(x):
    return scalar(0, x.type.dtype)


@register_gradient("add")
def _add(call, g):
    a, b = call.args
    return [unbroadcast(g, a.type.shape), unbroadcast(g, b.type.shape)]


@register_gradient("subtract")
def _subtract(call, g):
    a, b = call.args
    return [unbroadcast(g, a.type.shape), unbroadcast(op("negative", g), b.type.shape)]


@register_gradient("multiply")
def _multiply(call, g):
    a, b = call.args
    return [unbroadcast(op("multiply", g, b), a.type.shape), unbroadcast(op("multiply", g, a), b.type.shape)]


@register_gradient("divide")
def _divide(call, g):
    a, b = call.args
    ga = op("divide", g, b)
    gb = op("negative", op("multiply", ga, call))      # -g * a / b^2 = -(g / b) * (a / b)
    return [unbroadcast(ga, a.type.shape), unbroadcast(gb, b.type.shape)]


@register_gradient("negative")
def _negative(call, g):
    return [op("negative", g)]


@register_gradient("copy")
def _copy(call, g):
    return [g]


@register_gradient("cast")
def _cast(call, g):
    x = call.args[0]
    return [op("cast", g, dtype=x.type.dtype) if x.type.dtype in FLOATS else None]


@register_gradient("nn.relu")
def _relu(call, g):
    x = call.args[0]
    # torch's convention: the derivative at 0 is 0
    return [op("where", op("greater", x, _zero(x)), g, _zero(g))]


@register_gradient("nn.leaky_relu")
def _leaky_relu(call, g):
    x = call.args[0]
    alpha = scalar(call.attrs["alpha"], g.type.dtype)
    return [op("where", op("greater", x, _zero(x)), g, op("multiply", g, alpha))]


@register_gradient("clip")
def _clip(call, g):
    x = call.args[0]
    dt = x.type.dtype
    inside = op("logical_and", op("greater_equal", x, scalar(call.attrs["a_min"], dt)),
                op("less_equal", x, scalar(call.attrs["a_max"], dt)))
    return [op("where", inside, g, _zero(g))]


@register_gradient("abs")
def _abs(call, g):
    x = call.args[0]
    return [op("where", op("less", x, _zero(x)), op("negative", g), g)]


@register_gradient("exp")
def _exp(call, g):
    return [op("multiply", g, call)]


@register_gradient("log")
def _log(call, g):
    return [op("divide", g, call.args[0])]


@register_gradient("sqrt")
def _sqrt(call, g):
    return [op("divide", op("multiply", g, scalar(0.5, g.type.dtype)), call)]


@register_gradient("reciprocal")
def _reciprocal(call, g):
    return [op("negative", op("multiply", g, op("multiply", call, call)))]


@register_gradient("tanh")
def _tanh(call, g):
    one = scalar(1, g.type.dtype)
    return [op("multiply", g, op("subtract", one, op("multiply", call, call)))]


@register_gradient("sigmoid")
def _sigmoid(call, g):
    one = scalar(1, g.type.dtype)
    return [op("multiply", g, op("multiply", call, op("subtract", one, call)))]


def _pick(first):
    def rule(call, g):
        a, b = call.args
        # ties go to the first operand, as a select on a >= b (<= for minimum) routes them
        take_a = op("greater_equal" if first else "less_equal", a, b)
        ga = op("where", take_a, g, _zero(g))
        gb = op("where", take_a, _zero(g), g)
        return [unbroadcast(ga, a.type.shape), unbroadcast(gb, b.type.shape)]
    return rule


register_gradient("maximum")(_pick(True))
register_gradient("minimum")(_pick(False))


@register_gradient("where")
def _where(call, g):
    c, a, b = call.args
    return [None, unbroadcast(op("where", c, g, _zero(g)), a.type.shape),
            unbroadcast(op("where", c, _zero(g), g), b.type.shape)]


@register_gradient("nn.bias_add")
def _bias_add(call, g):
    x, b = call.args
    ax = call.attrs["axis"]
    return [g, op("sum", g, axis=[d for d in range(x.type.ndim) if d != ax], keepdims=False)]


@register_gradient("erf")
def _erf(call, g):
    x = call.args[0]
    dt = g.type.dtype
    gauss = op("exp", op("negative", op("multiply", x, x)))
    return [op("multiply", g, op("multiply", gauss, scalar(2 / np.sqrt(np.pi), dt)))]


@register_gradient("power")
def _power(call, g):
    a, b = call.args
    dt = a.type.dtype
    bf = b if b.type.dtype == dt else op("cast", b, dtype=dt)
    # b a^(b-1) to the base; a^b log a to a floating exponent, 0 where a <= 0 (where the
    # real power has no derivative in b, as tdsl.gradient's power rule)
    ga = op("multiply", g, op("multiply", bf, op("power", a, op("subtract", bf, scalar(1, dt)))))
    gb = None
    if b.type.dtype in FLOATS:
        dlog = op("where", op("greater", a, _zero(a)), op("multiply", call, op("log", a)), _zero(g))
        gb = unbroadcast(op("cast", op("multiply", g, dlog), dtype=b.type.dtype)
                         if b.type.dtype != dt else op("multiply", g, dlog), b.type.shape)
    return [unbroadcast(ga, a.type.shape), gb]


@register_gradient("nn.hard_sigmoid")
def _hard_sigmoid(call, g):
    x = call.args[0]
    dt = x.type.dtype
    lin = op("add", op("multiply", x, scalar(call.attrs["alpha"], dt)), scalar(call.attrs["beta"], dt))
    inside = op("logical_and", op("greater", lin, _zero(x)), op("less", lin, scalar(1, dt)))
    return [op("where", inside, op("multiply", g, scalar(call.attrs["alpha"], dt)), _zero(g))]


@register_gradient("nn.hard_swish")
def _hard_swish(call, g):
    # x * clip(x / 6 + 1/2, 0, 1): 0 below -3, x / 3 + 1/2 up to 3, 1 above (torch's)
    x = call.args[0]
    dt = x.type.dtype
    mid = op("add", op("multiply", x, scalar(1 / 3, dt)), scalar(0.5, dt))
    d = op("where", op("less", x, scalar(-3, dt)), _zero(g),
           op("where", op("less_equal", x, scalar(3, dt)), mid, scalar(1, dt)))
    return [op("multiply", g, d)]


def _no_gradient(call, g):
    # piecewise constant: the derivative is 0 wherever it exists
    return [None] * len(call.args)


for _name in ("floor", "ceil", "round"):
    register_gradient(_name)(_no_gradient)


def _mod(truncated):
    def rule(call, g):
        # a - b * q with q = floor(a / b) (trunc for trunc_mod), piecewise constant
        a, b = call.args
        q = op("divide", a, b)
        q = op("where", op("less", q, _zero(q)), op("ceil", q), op("floor", q)) if truncated else op("floor", q)
        return [unbroadcast(g, a.type.shape), unbroadcast(op("negative", op("multiply", g, q)), b.type.shape)]
    return rule


register_gradient("floor_mod")(_mod(False))
register_gradient("trunc_mod")(_mod(True))
