"""TVM's names for integer division: `floordiv`/`floormod` (Python's `//` and `%`, which
tdsl's expressions already follow), `truncdiv`/`truncmod` (C's `/` and `%`, rounding
toward zero) and `indexdiv`/`indexmod` (the division of index arithmetic: floor, so a
negative index stays in its tile)."""
from __future__ import annotations

from .. import dtype as dt
from ..errors import TdslError
from . import expr as E


def _operands(name, a, b, integers_only=False):
    a, b = E.convert_operands(a, b)
    for x in (a, b):
        if x.dtype == "bool" or (integers_only and not dt.is_int(x.dtype)):
            need = "integers" if integers_only else "numbers"
            hint = "; use tdsl.fmod or a true division for floats" if integers_only else ""
            raise TdslError(f"{name}({a}, {b}): the operands must be {need}, got {x} of type "
                            f"{x.dtype}{hint}")
    return a, b


def floordiv(a, b) -> E.Expr:
    """a / b rounded toward minus infinity (`a // b`); on floats floor(a / b)."""
    a, b = _operands("floordiv", a, b)
    return a // b


def floormod(a, b) -> E.Expr:
    """The remainder of `floordiv`, with the sign of b (`a % b`)."""
    a, b = _operands("floormod", a, b)
    return a % b


def truncdiv(a, b) -> E.Expr:
    """Integer a / b rounded toward zero (C's division)."""
    a, b = _operands("truncdiv", a, b, integers_only=True)
    if isinstance(a, E.IntImm) and isinstance(b, E.IntImm) and b.value != 0:
        q = abs(a.value) // abs(b.value)
        return E.const(q if (a.value < 0) == (b.value < 0) else -q, a.dtype)
    q = a // b
    if not dt.is_signed(a.dtype):
        return q
    # floor and trunc differ by one where the division is inexact and the signs differ
    zero = E.const(0, a.dtype)
    if isinstance(b, E.IntImm):
        signs_differ = E.GE(a, zero) if b.value < 0 else E.LT(a, zero)
    else:
        signs_differ = E.NE(E.LT(a, zero), E.LT(b, zero))
    inexact = E.logical_and(E.NE(a % b, zero), signs_differ)
    return E.select(inexact, q + E.const(1, a.dtype), q)


def truncmod(a, b) -> E.Expr:
    """The remainder of `truncdiv`, with the sign of a (C's `%`)."""
    a, b = _operands("truncmod", a, b, integers_only=True)
    if isinstance(a, E.IntImm) and isinstance(b, E.IntImm) and b.value != 0:
        r = abs(a.value) % abs(b.value)
        return E.const(r if a.value >= 0 else -r, a.dtype)
    if not dt.is_signed(a.dtype):
        return a % b
    return E.call("fmod", a, b)


def indexdiv(a, b) -> E.Expr:
    """The division of index expressions: `floordiv`."""
    return floordiv(a, b)


def indexmod(a, b) -> E.Expr:
    """The remainder of index expressions: `floormod`."""
    return floormod(a, b)
