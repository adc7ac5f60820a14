"""Backward rules of the elementwise and broadcasting operators (ir/ops_math.py). Where an
operator's derivative is a function of its result (exp, tanh, sigmoid, sqrt, reciprocal),
the rule reads the forward result rather than computing it again."""
from __future__ import annotations

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
