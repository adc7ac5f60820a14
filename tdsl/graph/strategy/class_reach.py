"""Which size classes a network's declared bounds leave reachable: a variant whose
condition cannot hold for any sizes within the bounds (a dense layer's "small", for fewer
rows than its register tile, where the sequence is bounded below by the tile's rows;
the "one" classes of a transpose where the sequence is at least 2) would never run, so
it is not compiled. The executor refuses sizes outside the
bounds before anything runs, so a kernel never meets the sizes such a class covers.

Intervals are (lo, hi) of ints, None for unbounded; anything not understood is
unbounded, so a class is only dropped where it provably cannot hold."""
from __future__ import annotations

from math import inf
from typing import Dict, Optional, Tuple

import sympy

from ...arith.symbolic import floordiv, imax, imin
from ...ir import expr as E

Interval = Tuple[Optional[int], Optional[int]]
_ANY: Interval = (None, None)


def _lo(x):
    return -inf if x is None else x


def _hi(x):
    return inf if x is None else x


def _back(lo, hi) -> Interval:
    return (None if lo == -inf else int(lo)), (None if hi == inf else int(hi))


def _add(a, b):
    return _back(_lo(a[0]) + _lo(b[0]), _hi(a[1]) + _hi(b[1]))


def _mul(a, b):
    corners = [0 if x == 0 or y == 0 else x * y
               for x in (_lo(a[0]), _hi(a[1])) for y in (_lo(b[0]), _hi(b[1]))]
    return _back(min(corners), max(corners))


def _floordiv(a, d):
    """a // d for a constant d >= 1."""
    return _back(_lo(a[0]) // d if a[0] is not None else -inf, _hi(a[1]) // d if a[1] is not None else inf)


def _sympy_interval(e, box) -> Interval:
    """(lo, hi) of integer sympy expression `e` of the network's sizes, whose intervals
    `box` holds ({name: interval})."""
    if e.is_Integer:
        return int(e), int(e)
    if e.is_Symbol:
        return box.get(e.name, _ANY)
    if e.is_Add or e.is_Mul:
        op = _add if e.is_Add else _mul
        acc = _sympy_interval(e.args[0], box)
        for a in e.args[1:]:
            acc = op(acc, _sympy_interval(a, box))
        return acc
    if e.func is floordiv and e.args[1].is_Integer and int(e.args[1]) >= 1:
        return _floordiv(_sympy_interval(e.args[0], box), int(e.args[1]))
    if e.func in (imin, imax, sympy.Min, sympy.Max):
        ivs = [_sympy_interval(a, box) for a in e.args]
        pick = min if e.func in (imin, sympy.Min) else max
        return _back(pick(_lo(i[0]) for i in ivs), pick(_hi(i[1]) for i in ivs))
    return _ANY


def size_intervals(exprs: Dict[str, sympy.Expr], bounds) -> Dict[str, Interval]:
    """{kernel size variable: interval} from `exprs` ({name: its sympy expression of the
    network's sizes}) and the declared `bounds` ({network size: (low, high)}); a size
    without bounds is at least 1."""
    box = {n: (lo, hi) for n, (lo, hi) in (bounds or {}).items()}
    for e in exprs.values():
        for s in e.free_symbols:
            box.setdefault(s.name, (1, None))
    return {n: _sympy_interval(e, box) for n, e in exprs.items()}


def _interval(e, ivs) -> Interval:
    if isinstance(e, E.IntImm):
        return e.value, e.value
    if isinstance(e, E.Var):
        return ivs.get(e.name, _ANY)
    if isinstance(e, E.Cast):
        return _interval(e.value, ivs)
    if isinstance(e, (E.Add, E.Sub, E.Mul, E.Min, E.Max)):
        a, b = _interval(e.a, ivs), _interval(e.b, ivs)
        if isinstance(e, E.Add):
            return _add(a, b)
        if isinstance(e, E.Sub):
            return _add(a, _mul(b, (-1, -1)))
        if isinstance(e, E.Mul):
            return _mul(a, b)
        pick = min if isinstance(e, E.Min) else max
        return _back(pick(_lo(a[0]), _lo(b[0])), pick(_hi(a[1]), _hi(b[1])))
    if isinstance(e, (E.FloorDiv, E.FloorMod)) and isinstance(e.b, E.IntImm) and e.b.value >= 1:
        if isinstance(e, E.FloorMod):
            return 0, e.b.value - 1
        return _floordiv(_interval(e.a, ivs), e.b.value)
    return _ANY


def _outcomes(cond, ivs) -> set:
    """The values {True, False} that condition `cond` may take within intervals `ivs`."""
    both = {True, False}
    if isinstance(cond, E.Not):
        return {not v for v in _outcomes(cond.a, ivs)}
    if isinstance(cond, (E.And, E.Or)):
        a, b = _outcomes(cond.a, ivs), _outcomes(cond.b, ivs)
        op = (lambda x, y: x and y) if isinstance(cond, E.And) else (lambda x, y: x or y)
        return {op(x, y) for x in a for y in b}
    if isinstance(cond, E.IntImm):
        return {bool(cond.value)}
    rel = {E.LT: (True, False), E.LE: (True, True), E.GT: (False, False), E.GE: (False, True)}
    if isinstance(cond, (E.EQ, E.NE)):
        a, b = _interval(cond.a, ivs), _interval(cond.b, ivs)
        meet = _lo(a[0]) <= _hi(b[1]) and _lo(b[0]) <= _hi(a[1])
        single = a[0] is not None and a == b and a[0] == a[1]
        eq = ({True} if single else both) if meet else {False}
        return eq if isinstance(cond, E.EQ) else {not v for v in eq}
    for cls, (less, strict_ok) in rel.items():
        if isinstance(cond, cls):
            a, b = _interval(cond.a, ivs), _interval(cond.b, ivs)
            if not less:        # a > b is b < a
                a, b = b, a
            # a < b (a <= b): possible where a's least is below (at most) b's largest
            lo_a, hi_a, lo_b, hi_b = _lo(a[0]), _hi(a[1]), _lo(b[0]), _hi(b[1])
            can = lo_a <= hi_b if strict_ok else lo_a < hi_b
            must = hi_a <= lo_b if strict_ok else hi_a < lo_b
            return {True} if must else both if can else {False}
    return both


def may_hold(cond, ivs: Dict[str, Interval]) -> bool:
    """Whether size condition `cond` may hold for sizes within `ivs` ({size variable's
    name: interval}, size_intervals)."""
    return True in _outcomes(cond, ivs)
