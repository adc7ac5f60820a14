"""The derivative of each math intrinsic, written once.

`RULES[name](args, y, g)` returns one adjoint per argument (None where the argument gets
no gradient): `args` are the call's arguments, `y` the call itself (or the forward
tensor's element holding its value, which saves recomputing it) and `g` the adjoint
flowing into the call. Everything is built with the tensor-expression operators, so the
result is an ordinary expression in the call's dtype."""
from __future__ import annotations

import math

from ...ir import expr as E


def _c(value, like):
    return E.const(value, like.dtype)


def _call(name, *args):
    return E.call(name, *args)


def _sq(x):
    return x * x


def _sign(x):
    """-1, 0 or 1: the derivative of |x| (0 at 0, as numpy's sign and torch's abs)."""
    return E.select(x > _c(0, x), _c(1, x), E.select(x < _c(0, x), _c(-1, x), _c(0, x)))


def _power(args, y, g):
    x, p = args
    dx = g * p * _call("power", x, p - _c(1, p))
    # x ** p for x <= 0 is only defined for integral p, where it does not move with p
    dp = E.select(x > _c(0, x), g * y * _call("log", x), _c(0, x))
    return [dx, dp]


def _atan2(args, y, g):
    a, b = args             # numpy's arctan2(a, b): the angle of the point (b, a)
    r = _sq(a) + _sq(b)
    return [g * b / r, -(g * a) / r]


def _hypot(args, y, g):
    a, b = args
    return [g * a / y, g * b / y]


def _fmod(args, y, g):
    a, b = args
    return [g, -(g * _call("trunc", a / b))]


def _copysign(args, y, g):
    a, b = args
    return [g * _sign(a) * _call("copysign", _c(1, b), b), None]


def _ldexp(args, y, g):
    x, e = args
    return [_call("ldexp", g, e), None]


def _zero(args, y, g):
    """Piecewise-constant functions: zero almost everywhere."""
    return [None] * len(args)


_LN2, _LN10 = math.log(2.0), math.log(10.0)

UNARY = {
    "exp": lambda x, y, g: g * y,
    "exp2": lambda x, y, g: g * y * _c(_LN2, x),
    "exp10": lambda x, y, g: g * y * _c(_LN10, x),
    "expm1": lambda x, y, g: g * (y + _c(1, x)),
    "log": lambda x, y, g: g / x,
    "log2": lambda x, y, g: g / (x * _c(_LN2, x)),
    "log10": lambda x, y, g: g / (x * _c(_LN10, x)),
    "log1p": lambda x, y, g: g / (x + _c(1, x)),
    "sqrt": lambda x, y, g: g * _c(0.5, x) / y,
    "rsqrt": lambda x, y, g: g * _c(-0.5, x) * y * y * y,
    "tanh": lambda x, y, g: g * (_c(1, x) - y * y),
    "sigmoid": lambda x, y, g: g * y * (_c(1, x) - y),
    "erf": lambda x, y, g: g * _c(2 / math.sqrt(math.pi), x) * _call("exp", -(x * x)),
    "sin": lambda x, y, g: g * _call("cos", x),
    "cos": lambda x, y, g: -(g * _call("sin", x)),
    "tan": lambda x, y, g: g * (_c(1, x) + y * y),
    "asin": lambda x, y, g: g * _call("rsqrt", _c(1, x) - x * x),
    "acos": lambda x, y, g: -(g * _call("rsqrt", _c(1, x) - x * x)),
    "atan": lambda x, y, g: g / (_c(1, x) + x * x),
    "sinh": lambda x, y, g: g * _call("cosh", x),
    "cosh": lambda x, y, g: g * _call("sinh", x),
    "asinh": lambda x, y, g: g * _call("rsqrt", x * x + _c(1, x)),
    "acosh": lambda x, y, g: g * _call("rsqrt", x * x - _c(1, x)),
    "atanh": lambda x, y, g: g / (_c(1, x) - x * x),
    "abs": lambda x, y, g: g * _sign(x),
}

RULES = {name: (lambda f: lambda args, y, g: [f(args[0], y, g)])(f) for name, f in UNARY.items()}
RULES.update({
    "power": _power, "atan2": _atan2, "hypot": _hypot, "fmod": _fmod, "copysign": _copysign,
    "ldexp": _ldexp,
})
for _name in ("floor", "ceil", "round", "nearbyint", "trunc"):
    RULES[_name] = _zero

# Calls with a boolean or integer value never carry a gradient (isnan, likely, popcount,
# the bitwise operations); the driver does not look into them.
