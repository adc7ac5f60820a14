"""The ranges of the size variables where a size class's condition holds: a variant runs
only there (the executor picks it by that condition), so its lowering may assume them
(Schedule.assume_range) and drop the loops and tails that cannot run: a "short_keys"
attention below 32 keys keeps no blocked main loop over the keys, a "short" row no loop
of whole vector blocks past its length.

Conditions are read as the strategies write them: comparisons of a size variable with a
constant, joined by and / or. Anything else constrains nothing (the variant is then
compiled for every size, as before)."""
from __future__ import annotations

from typing import Dict, Optional, Tuple

from ...ir import expr as E

BIG = 2**31 - 1
Ranges = Dict[str, Tuple[int, int]]


def condition_ranges(cond) -> Optional[Ranges]:
    """{size variable name: (least, greatest)} that every sizes satisfying `cond` lie
    in (variables it does not bound are left out); None where no sizes satisfy it."""
    if isinstance(cond, E.And):
        a, b = condition_ranges(cond.a), condition_ranges(cond.b)
        if a is None or b is None:
            return None
        out = dict(a)
        for n, (lo, hi) in b.items():
            lo0, hi0 = out.get(n, (0, BIG))
            lo, hi = max(lo, lo0), min(hi, hi0)
            if lo > hi:
                return None
            out[n] = (lo, hi)
        return out
    if isinstance(cond, E.Or):
        a, b = condition_ranges(cond.a), condition_ranges(cond.b)
        if a is None or b is None:
            return b if a is None else a
        # the hull of the two, for the variables both bound
        return {n: (min(a[n][0], b[n][0]), max(a[n][1], b[n][1])) for n in a.keys() & b.keys()}
    return _compare(cond)


def _compare(cond) -> Ranges:
    if not isinstance(cond, E.CmpOp) or isinstance(cond, E.NE):
        return {}
    a, b, kind = cond.a, cond.b, type(cond)
    if isinstance(a, E.IntImm) and isinstance(b, E.Var):
        # c < v  is  v > c
        a, b, kind = b, a, {E.LT: E.GT, E.LE: E.GE, E.GT: E.LT, E.GE: E.LE, E.EQ: E.EQ}[kind]
    if not (isinstance(a, E.Var) and isinstance(b, E.IntImm)):
        return {}
    c = b.value
    lo, hi = {E.LT: (0, c - 1), E.LE: (0, c), E.GT: (c + 1, BIG), E.GE: (c, BIG), E.EQ: (c, c)}[kind]
    return {a.name: (max(lo, 0), hi)}


def variant_ranges(cond, bounds) -> Ranges:
    """The ranges a variant of condition `cond` may assume: the condition's, within the
    declared `bounds` ({name: (low, high or None)}) of the variables it bounds."""
    out = {}
    for n, (lo, hi) in (condition_ranges(cond) or {}).items():
        if n in (bounds or {}):
            dlo, dhi = bounds[n]
            lo, hi = max(lo, dlo or 0), min(hi, BIG if dhi is None else dhi)
        if lo <= hi:
            out[n] = (lo, hi)
    return out
