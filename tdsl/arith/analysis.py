"""Range-aware analysis on sympy index expressions: symbolic intervals, proofs and
simplification, under a context (`context.Ctx`) of inclusive symbol bounds.

* `sbound(s, ctx)` -> (lo, hi) of sympy expressions, None when unknown. Ranged symbols are
  replaced by their (recursively bounded) endpoints; free symbols stay as points, so
  bound(io*8 + ii, {ii: [0, 7]}) = (8*io, 8*io + 7). Products of symbolic intervals use the
  sign of the endpoints (decided numerically, `intervals.cbound`) and fall back to
  imin/imax of the corners.

Proofs (`prove_*`, `num_bounds`) bound a difference symbolically first (so `8*io + ii - 8*q`
with io in [0, q - 1] cancels exactly to [.., -1]) and then numerically. Symbolic
relaxation goes in rounds (`Ctx.level`): a variable that appears in another one's range
(a size n with its own range [0, 2**31 - 1]) is replaced only after the variables whose
ranges mention it, so it can cancel first.

`simp(s, ctx)` rewrites bottom-up with the algebraic rules of `symbolic.py` plus rules
that need ranges: a // c and a % c when a's interval stays inside one multiple of c,
(c1*x + y) // c when 0 <= y < c1 and c1 | c, min/max with an ordered difference, selects
and comparisons with provable conditions; then the range-free normal forms of `normal.py`.

Symbolic bounds, proofs and simplification call each other (a bound simplifies its
endpoints, a simplification asks for proofs, a proof takes bounds), so they stay in one
piece here; contexts, numeric intervals and the range-free rewrites, which call none of
them, have their own modules.
"""
from __future__ import annotations

from functools import lru_cache
from math import gcd

import sympy
from sympy import Add, Integer, Mul, S
from sympy.logic.boolalg import Boolean

from .symbolic import (floordiv, floormod, imin, imax, iselect, expand_mul, terms_of,
                       RELATIONALS)
from .context import CACHE_SIZE
from .intervals import cbound
from .normal import normal_rel, recombine


# ---------------------------------------------------------------------------------------
# symbolic intervals

def _nonneg(x, ctx):
    l = cbound(x, ctx)[0]
    return l is not None and l >= 0


def _nonpos(x, ctx):
    h = cbound(x, ctx)[1]
    return h is not None and h <= 0


def smin(x, y, ctx):
    if x == y:
        return x
    l, h = cbound(x - y, ctx)
    if h is not None and h <= 0:
        return x
    if l is not None and l >= 0:
        return y
    return imin(x, y)


def smax(x, y, ctx):
    if x == y:
        return x
    l, h = cbound(x - y, ctx)
    if h is not None and h <= 0:
        return y
    if l is not None and l >= 0:
        return x
    return imax(x, y)


def _smin_list(xs, ctx):
    out = xs[0]
    for x in xs[1:]:
        out = smin(out, x, ctx)
    return out


def _smax_list(xs, ctx):
    out = xs[0]
    for x in xs[1:]:
        out = smax(out, x, ctx)
    return out


def _scale(iv, c):
    lo, hi = iv
    if c >= 0:
        return (None if lo is None else c * lo), (None if hi is None else c * hi)
    return (None if hi is None else c * hi), (None if lo is None else c * lo)


def _smul_iv(a, b, ctx):
    a1, a2 = a
    b1, b2 = b
    if b1 is not None and b1 == b2 and b1.is_Integer:
        return _scale(a, int(b1))
    if a1 is not None and a1 == a2 and a1.is_Integer:
        return _scale(b, int(a1))
    if a1 is None or a2 is None or b1 is None or b2 is None:
        return None, None
    if a1 == a2 and b1 == b2:
        p = expand_mul(a1, b1)
        return p, p

    def cls(x1, x2):
        if _nonneg(x1, ctx):
            return "pos"
        if _nonpos(x2, ctx):
            return "neg"
        if _nonpos(x1, ctx) and _nonneg(x2, ctx):
            return "mix"
        return None

    ca, cb_ = cls(a1, a2), cls(b1, b2)
    m = expand_mul
    if ca is not None and cb_ is not None:
        table = {
            ("pos", "pos"): ((a1, b1), (a2, b2)),
            ("pos", "neg"): ((a2, b1), (a1, b2)),
            ("pos", "mix"): ((a2, b1), (a2, b2)),
            ("neg", "pos"): ((a1, b2), (a2, b1)),
            ("neg", "neg"): ((a2, b2), (a1, b1)),
            ("neg", "mix"): ((a1, b2), (a1, b1)),
            ("mix", "pos"): ((a1, b2), (a2, b2)),
            ("mix", "neg"): ((a2, b1), (a1, b1)),
        }
        pick = table.get((ca, cb_))
        if pick is not None:
            (x, y), (u, v) = pick
            return m(x, y), m(u, v)
        return (smin(m(a1, b2), m(a2, b1), ctx), smax(m(a1, b1), m(a2, b2), ctx))
    corners = []
    # not a set of the two: its order would follow the hashes, which differ run to run
    for x in dict.fromkeys((a1, a2)):
        for y in dict.fromkeys((b1, b2)):
            corners.append(m(x, y))
    return _smin_list(corners, ctx), _smax_list(corners, ctx)


_sactive = set()


@lru_cache(maxsize=CACHE_SIZE)
def sbound(s, ctx, k=-1):
    """Symbolic inclusive (lo, hi) of an integer sympy expression; None = unknown.

    Ranged symbols of relaxation level <= k are replaced by their bounds (all of them
    when k < 0); the others stay symbolic."""
    if s.is_Integer:
        return s, s
    if s.is_Symbol:
        r = ctx.map.get(s)
        if r is not None and s not in _sactive and (k < 0 or ctx.level[s] <= k):
            _sactive.add(s)
            try:
                lo = sbound(r[0], ctx, k)[0]
                hi = sbound(r[1], ctx, k)[1]
            finally:
                _sactive.discard(s)
            return lo, hi
        return s, s
    if s.is_Add:
        los, his = [], []
        for a in s.args:
            l, h = sbound(a, ctx, k)
            los.append(l)
            his.append(h)
        lo = None if any(x is None for x in los) else Add(*los)
        hi = None if any(x is None for x in his) else Add(*his)
        return lo, hi
    if s.is_Mul:
        c, rest = s.as_coeff_Mul()
        factors = Mul.make_args(rest)
        acc = sbound(factors[0], ctx, k)
        for f in factors[1:]:
            acc = _smul_iv(acc, sbound(f, ctx, k), ctx)
        if c.is_Integer:
            return _scale(acc, int(c))
        return None, None
    if s.is_Pow:
        e = s.exp
        if e.is_Integer and int(e) >= 1:
            b = sbound(s.base, ctx, k)
            acc = b
            for _ in range(int(e) - 1):
                acc = _smul_iv(acc, b, ctx)
            return acc
        return None, None
    f = s.func
    if f is floordiv:
        return _sbound_div(s, ctx, k)
    if f is floormod:
        return _sbound_mod(s, ctx, k)
    if f is imin or f is imax:
        (al, ah), (bl, bh) = sbound(s.args[0], ctx, k), sbound(s.args[1], ctx, k)
        if f is imin:
            lo = None if al is None or bl is None else smin(al, bl, ctx)
            hi = bh if ah is None else (ah if bh is None else smin(ah, bh, ctx))
        else:
            lo = bl if al is None else (al if bl is None else smax(al, bl, ctx))
            hi = None if ah is None or bh is None else smax(ah, bh, ctx)
        return lo, hi
    if f is iselect:
        c = simp(s.args[0], ctx)
        if c is S.true:
            return sbound(s.args[1], ctx, k)
        if c is S.false:
            return sbound(s.args[2], ctx, k)
        (al, ah), (bl, bh) = sbound(s.args[1], ctx, k), sbound(s.args[2], ctx, k)
        lo = None if al is None or bl is None else smin(al, bl, ctx)
        hi = None if ah is None or bh is None else smax(ah, bh, ctx)
        return lo, hi
    return None, None


def _sbound_div(s, ctx, k):
    a, b = s.args
    lo, hi = sbound(a, ctx, k)
    if b.is_Integer:
        c = int(b)
        if c > 0:
            return (None if lo is None else floordiv(lo, b)), (None if hi is None else floordiv(hi, b))
        return None, None
    bl, bh = sbound(b, ctx, k)
    if bl is None or bh is None or lo is None or hi is None:
        return None, None
    if bl == bh:
        if _nonneg(bl, ctx):               # a divisor is never zero: nonneg means positive
            return floordiv(lo, bl), floordiv(hi, bl)
        if _nonpos(bl, ctx):
            return floordiv(hi, bl), floordiv(lo, bl)
        x, y = floordiv(lo, bl), floordiv(hi, bl)
        return smin(x, y, ctx), smax(x, y, ctx)
    if _nonneg(bl, ctx) and _nonneg(lo, ctx):
        bl = smax(bl, S.One, ctx)          # a divisor is never zero
        return floordiv(lo, bh), floordiv(hi, bl)
    return None, None


def _sbound_mod(s, ctx, k):
    a, b = s.args
    lo, hi = sbound(a, ctx, k)
    if b.is_Integer:
        c = int(b)
        if c <= 0:
            return None, None
        if lo is not None and lo == hi:
            # one value (an index of a fused loop at a fixed point): kept a remainder,
            # which the prover bounds by [0, c), where `lo - c*(lo//c)` is two unrelated terms
            v = floormod(lo, b)
            return v, v
        if lo is not None and hi is not None:
            ql, qh = floordiv(lo, b), floordiv(hi, b)
            if equal(ql, qh, ctx):
                return lo - c * ql, hi - c * ql
        return S.Zero, Integer(c - 1)
    if prove_nonneg(a, ctx) and prove_neg(a - b, ctx):
        return lo, hi
    bl, bh = sbound(b, ctx, k)
    # nothing in it varies (an index of a fused loop at a fixed point, the divisor a
    # run-time size): the remainder is that one value
    if lo is not None and lo == hi and bl is not None and bl == bh:
        v = floormod(lo, bl)
        return v, v
    if bl is not None and bh is not None and _nonneg(bl, ctx):
        return S.Zero, bh - 1
    return None, None


def equal(x, y, ctx):
    if x == y:
        return True
    l, h = cbound(x - y, ctx)
    return l == 0 and h == 0


# ---------------------------------------------------------------------------------------
# proofs

_nb_depth = []


@lru_cache(maxsize=CACHE_SIZE)
def num_bounds(s, ctx):
    """Best numeric (lo, hi) of s: symbolic relaxation round by round (so that symbols
    can cancel before they are bounded), each finished numerically."""
    lo, hi = cbound(s, ctx)
    for k in ctx.rounds:
        sl, sh = sbound(s, ctx, k)
        # min(100, n) - n - 6 -> min(94 - n, -6): let terms cancel inside min/max
        # (one level deep only: simp itself asks for bounds)
        if not _nb_depth:
            _nb_depth.append(1)
            try:
                if sl is not None and sl.has(imin, imax):
                    sl = simp(sl, ctx)
                if sh is not None and sh.has(imin, imax):
                    sh = simp(sh, ctx)
            finally:
                _nb_depth.pop()
        if sl is not None:
            l = cbound(sl, ctx)[0]
            if l is not None and (lo is None or l > lo):
                lo = l
        if sh is not None:
            h = cbound(sh, ctx)[1]
            if h is not None and (hi is None or h < hi):
                hi = h
    return lo, hi


def _num_lo(s, ctx):
    return num_bounds(s, ctx)[0]


def _num_hi(s, ctx):
    return num_bounds(s, ctx)[1]


def prove_nonneg(s, ctx):
    l = _num_lo(s, ctx)
    return l is not None and l >= 0


def prove_neg(s, ctx):
    h = _num_hi(s, ctx)
    return h is not None and h < 0


def prove_nonpos(s, ctx):
    h = _num_hi(s, ctx)
    return h is not None and h <= 0


# ---------------------------------------------------------------------------------------
# range-aware simplification

@lru_cache(maxsize=CACHE_SIZE)
def simp(s, ctx):
    """Simplify an integer or boolean sympy expression under the ranges of `ctx`."""
    if s.is_Atom:
        return s
    r = _simp(s, ctx)
    if ctx.map and not r.is_Atom and not isinstance(r, Boolean):
        lo, hi = cbound(r, ctx)
        if lo is not None and lo == hi:
            return Integer(lo)
    return r


def _simp(s, ctx):
    if s.is_Add:
        r = Add(*[simp(a, ctx) for a in s.args])
        if r.is_Add:
            r = recombine(r)
        if r.is_Add:
            r = _push_into_minmax(r, ctx)
        return r
    if s.is_Mul:
        return expand_mul(*[simp(a, ctx) for a in s.args])
    if s.is_Pow:
        e = s.exp
        b = simp(s.base, ctx)
        if e.is_Integer and 1 <= int(e) <= 8:
            return expand_mul(*([b] * int(e)))
        return b ** e
    f = s.func
    if f is floordiv or f is floormod:
        a, b = simp(s.args[0], ctx), simp(s.args[1], ctx)
        r = f(a, b)
        if r.func is f:
            r = _range_divmod(r, f is floordiv, ctx)
        return r
    if f is imin or f is imax:
        a, b = simp(s.args[0], ctx), simp(s.args[1], ctx)
        r = f(a, b)
        if r.func is f:
            d = simp(a - b, ctx)
            if prove_nonpos(d, ctx):
                return a if f is imin else b
            if prove_nonneg(d, ctx):
                return b if f is imin else a
        return r
    if f is iselect:
        c = simp(s.args[0], ctx)
        return iselect(c, simp(s.args[1], ctx), simp(s.args[2], ctx))
    if isinstance(s, RELATIONALS):
        return _simp_rel(s, ctx)
    if isinstance(s, sympy.And) or isinstance(s, sympy.Or):
        is_and = isinstance(s, sympy.And)
        absorb, neutral = (S.false, S.true) if is_and else (S.true, S.false)
        args = []
        for a in s.args:
            a = simp(a, ctx)
            if a is absorb:
                return absorb
            if a is neutral or a in args:
                continue
            args.append(a)
        if not args:
            return neutral
        if len(args) == 1:
            return args[0]
        return (sympy.And if is_and else sympy.Or)(*args, evaluate=False)
    if isinstance(s, sympy.Not):
        a = simp(s.args[0], ctx)
        if a is S.true:
            return S.false
        if a is S.false:
            return S.true
        if isinstance(a, RELATIONALS):
            return simp(a.negated, ctx)
        return sympy.Not(a)
    return s


def _range_divmod(r, is_div, ctx):
    a, b = r.args
    if b.is_Integer:
        c = int(b)
        if c <= 0:
            return r
        for k in ctx.rounds:
            lo, hi = sbound(a, ctx, k)
            if lo is not None and hi is not None:
                ql, qh = floordiv(lo, b), floordiv(hi, b)
                if not ql.has(floordiv, floormod) and equal(ql, qh, ctx):
                    return ql if is_div else a - c * ql
        # (c1*x + y) // c = x // (c/c1) when c1 | c and 0 <= y < c1
        terms = terms_of(a)
        if terms is None:
            return r
        cands = sorted({gcd(k, c) for t, k in terms.items() if t is not S.One} - {1, c},
                       reverse=True)
        for c1 in cands:
            big = [Integer(k // c1) * t for t, k in terms.items()
                   if t is not S.One and k % c1 == 0]
            small = Add(*[Integer(k) * t for t, k in terms.items()
                          if t is S.One or k % c1 != 0])
            if not big:
                continue
            if prove_nonneg(small, ctx) and prove_neg(small - c1, ctx):
                x = Add(*big)
                if is_div:
                    return floordiv(x, Integer(c // c1))
                return Integer(c1) * floormod(x, Integer(c // c1)) + small
        return r
    # symbolic divisor: 0 <= a < b  ->  a // b = 0, a % b = a
    if prove_nonneg(a, ctx) and prove_neg(simp(a - b, ctx), ctx):
        return S.Zero if is_div else a
    return r


def _size(x):
    if x.is_Atom:
        return 1
    return 1 + sum(_size(a) for a in x.args)


def _push_into_minmax(r, ctx):
    """min(a, b) + c -> min(a + c, b + c) (and -min -> max of negations) when smaller:
    min(io*8 + 8, n) - io*8 -> min(n - io*8, 8)."""
    found = None
    for t in r.args:
        c, f = t.as_coeff_Mul()
        if f.func in (imin, imax) and c in (S.One, S.NegativeOne):
            if found is not None:
                return r
            found = (t, c, f)
    if found is None:
        return r
    t, c, f = found
    rest = r - t
    a, b = f.args
    func = f.func
    if c is S.NegativeOne:
        a, b = -a, -b
        func = imax if func is imin else imin
    new = simp(func(simp(a + rest, ctx), simp(b + rest, ctx)), ctx)
    if _size(new) < _size(r):
        return new
    return r


def _simp_rel(s, ctx):
    lhs, rhs = simp(s.lhs, ctx), simp(s.rhs, ctx)
    if isinstance(s, sympy.StrictGreaterThan):
        kind, lhs, rhs = "lt", rhs, lhs
    elif isinstance(s, sympy.GreaterThan):
        kind, lhs, rhs = "le", rhs, lhs
    elif isinstance(s, sympy.StrictLessThan):
        kind = "lt"
    elif isinstance(s, sympy.LessThan):
        kind = "le"
    elif isinstance(s, sympy.Equality):
        kind = "eq"
    else:
        kind = "ne"
    d = simp(lhs - rhs, ctx)
    if d.is_Integer:
        v = int(d)
        res = {"lt": v < 0, "le": v <= 0, "eq": v == 0, "ne": v != 0}[kind]
        return S.true if res else S.false
    nl, nh = _num_lo(d, ctx), _num_hi(d, ctx)
    if kind == "lt":
        if nh is not None and nh < 0:
            return S.true
        if nl is not None and nl >= 0:
            return S.false
    elif kind == "le":
        if nh is not None and nh <= 0:
            return S.true
        if nl is not None and nl > 0:
            return S.false
    else:
        if (nl is not None and nl > 0) or (nh is not None and nh < 0):
            return S.false if kind == "eq" else S.true
    return normal_rel(d, kind, s)


def clear():
    cbound.cache_clear()
    sbound.cache_clear()
    num_bounds.cache_clear()
    simp.cache_clear()
