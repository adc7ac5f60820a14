"""Numeric intervals of integer sympy expressions (`cbound`): (lo, hi) of Python ints, None
meaning -inf / +inf. Ranged symbols take the numeric bounds of their range endpoints, free
symbols are unbounded (or [0, inf) when declared nonneg). The bounds of a sum bound pairs
k*(a//c) - k*(b//c) with a - b constant together ((x+15)//16 - x//16 is in [0, 1]), and
a floor against its own numerator (64*((n+63)//64) - n is in [0, 63]).
"""
from __future__ import annotations

from functools import lru_cache
from math import inf

import sympy
from sympy import Add

from .context import CACHE_SIZE
from .symbolic import floordiv, floormod, imin, imax, iselect


def _lo(x):
    return -inf if x is None else x


def _hi(x):
    return inf if x is None else x


def _back(x):
    if isinstance(x, float):
        return None if x in (inf, -inf) else int(x)
    return x


def _mul_num(a, b):
    if a == 0 or b == 0:
        return 0
    return a * b


def _mul_iv(a, b):
    xs = (_lo(a[0]), _hi(a[1]))
    ys = (_lo(b[0]), _hi(b[1]))
    cs = [_mul_num(x, y) for x in xs for y in ys]
    return _back(min(cs)), _back(max(cs))


def _fdiv_corner(x, d):
    # x // d for d >= 1 (d may be +inf), x may be +-inf
    if x in (inf, -inf):
        return x
    if d == inf:
        return 0 if x >= 0 else -1
    return x // d


def _pair_floordivs(args):
    """k*(a // c) - k*(b // c) with a - b = d constant lies in k*[d // c, d // c + 1]
    (exactly k*d/c when c divides d): bounds such pairs together, so that
    (x + 15) // 16 - x // 16 is known to be 0 or 1. Returns the other terms and the
    pairs' (lo, hi)."""
    divs = []
    for i, t in enumerate(args):
        k, f = t.as_coeff_Mul()
        if isinstance(f, floordiv) and f.args[1].is_Integer and k.is_Integer and int(f.args[1]) > 0:
            divs.append((i, int(k), f))
    if len(divs) < 2:
        return args, 0, 0
    used = set()
    lo = hi = 0
    for i, k, f in divs:
        if i in used or k <= 0:
            continue
        for j, k2, g in divs:
            if j in used or j == i or k2 != -k or g.args[1] != f.args[1]:
                continue
            d = f.args[0] - g.args[0]
            if d.is_Integer:
                q, r = divmod(int(d), int(f.args[1]))
                lo += k * q
                hi += k * (q + (1 if r else 0))
                used.update((i, j))
                break
    if not used:
        return args, 0, 0
    return [a for i, a in enumerate(args) if i not in used], lo, hi


def _floor_against_numerator(args):
    """A sum m*c*(a // c) + r with m*a + r a constant d lies in d - m*[0, c - 1] (m > 0;
    mirrored for m < 0): c*(a//c) is a rounded down by less than c. This is how a run-time
    extent rounded up to a split factor compares with the extent itself (the bounds of a
    split loop with a guarded tail: max(64*((n + 63)//64), n) is the first). Returns
    (lo, hi), or None when the sum is not of that form."""
    for i, t in enumerate(args):
        k, f = t.as_coeff_Mul()
        if not (isinstance(f, floordiv) and f.args[1].is_Integer and k.is_Integer):
            continue
        c, k = int(f.args[1]), int(k)
        if c <= 0 or k % c:
            continue
        m = k // c
        d = sympy.expand(Add(*args[:i], *args[i + 1:]) + m * f.args[0])
        if d.is_Integer:
            d, spread = int(d), abs(m) * (c - 1)
            return (d - spread, d) if m > 0 else (d, d + spread)
    return None


_active = set()


@lru_cache(maxsize=CACHE_SIZE)
def cbound(s, ctx):
    """Numeric (lo, hi) of an integer sympy expression; None = unbounded."""
    if s.is_Integer:
        v = int(s)
        return v, v
    if s.is_Symbol:
        r = ctx.map.get(s)
        if r is not None and s not in _active:
            _active.add(s)
            try:
                lo = cbound(r[0], ctx)[0]
                hi = cbound(r[1], ctx)[1]
            finally:
                _active.discard(s)
            return lo, hi
        if s.is_nonnegative:
            return 0, None
        return None, None
    if s.is_Add:
        args, lo, hi = _pair_floordivs(s.args)
        for a in args:
            l, h = cbound(a, ctx)
            lo = None if lo is None or l is None else lo + l
            hi = None if hi is None or h is None else hi + h
        whole = _floor_against_numerator(s.args)
        if whole is not None:   # the tighter of the two: ranges may bound the terms closer
            lo = whole[0] if lo is None else max(lo, whole[0])
            hi = whole[1] if hi is None else min(hi, whole[1])
        return lo, hi
    if s.is_Mul:
        acc = (1, 1)
        for a in s.args:
            acc = _mul_iv(acc, cbound(a, ctx))
        return acc
    if s.is_Pow:
        e = s.exp
        if e.is_Integer and int(e) >= 1:
            b = cbound(s.base, ctx)
            acc = b
            for _ in range(int(e) - 1):
                acc = _mul_iv(acc, b)
            if int(e) % 2 == 0 and (acc[0] is None or acc[0] < 0):
                acc = (0, acc[1])
            return acc
        return None, None
    f = s.func
    if f is floordiv:
        a, b = s.args
        al, ah = cbound(a, ctx)
        if b.is_Integer:
            c = int(b)
            if c > 0:
                return (None if al is None else al // c), (None if ah is None else ah // c)
            return None, None
        bl, bh = cbound(b, ctx)
        if bl is not None and bl >= 0:         # a divisor is never zero
            dl, dh = max(bl, 1), max(_hi(bh), 1)
            cs = [_fdiv_corner(x, d) for x in (_lo(al), _hi(ah)) for d in (dl, dh)]
            return _back(min(cs)), _back(max(cs))
        return None, None
    if f is floormod:
        a, b = s.args
        al, ah = cbound(a, ctx)
        if b.is_Integer:
            c = int(b)
            if c <= 0:
                return None, None
            if al is not None and ah is not None and al // c == ah // c:
                k = al // c
                return al - k * c, ah - k * c
            return 0, c - 1
        bl, bh = cbound(b, ctx)
        if bl is not None and bl >= 0:
            top = None if bh is None else max(bh, 1) - 1
            if al is not None and al >= 0 and ah is not None:
                top = ah if top is None else min(ah, top)
            return 0, top
        if bh is not None and bh <= 0:
            return (None if bl is None else bl + 1), 0
        return None, None
    if f is imin or f is imax:
        (al, ah), (bl, bh) = cbound(s.args[0], ctx), cbound(s.args[1], ctx)
        if f is imin:
            lo = None if al is None or bl is None else min(al, bl)
            hi = bh if ah is None else (ah if bh is None else min(ah, bh))
        else:
            lo = bl if al is None else (al if bl is None else max(al, bl))
            hi = None if ah is None or bh is None else max(ah, bh)
        return lo, hi
    if f is iselect:
        (al, ah), (bl, bh) = cbound(s.args[1], ctx), cbound(s.args[2], ctx)
        lo = None if al is None or bl is None else min(al, bl)
        hi = None if ah is None or bh is None else max(ah, bh)
        return lo, hi
    return None, None
