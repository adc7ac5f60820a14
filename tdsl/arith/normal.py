"""Range-free normal forms that the range-aware simplifier (`analysis.simp`) applies: the
recombination of split/fuse pairs in a sum (c*(y//c) + y%c -> y, c*((y//c)%d) + y%c ->
y%(c*d), y - c*(y//c) -> y%c; the first two also for multiples that hold symbols, as
S*S*(f//S) + S*(f%S) -> S*f) and comparisons normalised (`<` for all orders, the gcd of
the coefficients divided out).
"""
from __future__ import annotations

from math import gcd

import sympy
from sympy import Add, Integer, Mul, S

from .symbolic import expand_mul, floordiv, floormod, terms_of


def _nterms(x):
    return 0 if x is S.Zero else len(Add.make_args(x))


def _split_term(t, k):
    """(cofactor, g) with k*t == cofactor*g and g the one floordiv/floormod factor of the
    monomial t (the cofactor may hold symbols: S*(f%S) is a multiple of f%S); None when t
    has no such factor or more than one."""
    if isinstance(t, (floormod, floordiv)):
        return Integer(k), t
    if not t.is_Mul:
        return None
    found = [f for f in t.args if isinstance(f, (floormod, floordiv))]
    if len(found) != 1:
        return None
    g = found[0]
    return Integer(k) * Mul(*[f for f in t.args if f is not g]), g


def _join_mod(r, terms, kk, t):
    """r with the pair kk*b*(y//b) + kk*(y%b) -> kk*y for t = y % b, or with
    kk*c*((y//c)%e) + kk*(y%c) -> kk*(y%(c*e)) for a constant c; None when neither pair
    is in r. kk may hold symbols, so that the row index S*(f//S) + f%S of a kernel with a
    symbolic size S folds back to f."""
    y, b = t.args
    q = floordiv(y, b)
    target = terms_of(kk * b * q)
    if target is not None and len(target) == 1:
        (tq, cq), = target.items()
        if terms.get(tq) == cq:
            return r - Integer(cq) * tq - kk * t + expand_mul(kk, y)
    if not b.is_Integer:
        return None
    c = int(b)
    for t2, k2 in terms.items():
        split = _split_term(t2, k2)
        if split is None:
            continue
        kk2, g2 = split
        if (isinstance(g2, floormod) and g2.args[0] == q and g2.args[1].is_Integer
                and kk2 == kk * c):
            e = int(g2.args[1])
            return r - kk2 * g2 - kk * t + kk * floormod(y, Integer(c * e))
    return None


def recombine(r):
    """Rejoin split/fuse pairs in a sum (identities, no ranges needed)."""
    for _ in range(16):
        terms = terms_of(r)
        if terms is None:
            return r
        if not any(t.has(floormod, floordiv) for t in terms):
            return r
        new = None
        for t, k in terms.items():
            split = _split_term(t, k)
            if split is None:
                continue
            kk, g = split
            if isinstance(g, floormod):
                new = _join_mod(r, terms, kk, g)
                if new is not None:
                    break
            elif g is t and g.args[1].is_Integer:
                y, b = g.args
                c = int(b)
                if c > 0 and k % c == 0:
                    # k*(y//c) = -kk*y + kk*(y%c) with kk = -k/c; keep when y cancels
                    kk = -k // c
                    rest = r - Integer(k) * t
                    rest2 = rest - Integer(kk) * y
                    if _nterms(rest2) < _nterms(rest):
                        new = rest2 + Integer(kk) * floormod(y, b)
                        break
        if new is None:
            return r
        r = new
        if not r.is_Add:
            return r
    return r


def normal_rel(d, kind, orig):
    terms = terms_of(d)
    if terms is None:
        return orig
    c = terms.pop(S.One, 0)
    g = 0
    for k in terms.values():
        g = gcd(g, k)
    if g == 0:
        return orig
    if kind in ("lt", "le"):
        if kind == "lt":
            c += 1                      # d < 0  <=>  d + 1 <= 0
        # g*e + c <= 0  <=>  e <= floor(-c/g)  <=>  e - floor(-c/g) - 1 < 0
        c = -((-c) // g) - 1
        rel = sympy.StrictLessThan
    else:
        if c % g:
            return S.false if kind == "eq" else S.true
        c //= g
        rel = sympy.Equality if kind == "eq" else sympy.Unequality
    left = [Integer(k // g) * t for t, k in terms.items() if k > 0]
    right = [Integer(-k // g) * t for t, k in terms.items() if k < 0]
    # sum(left) - sum(right) + c  (kind) 0
    if not left:
        if kind in ("eq", "ne"):
            return rel(Add(*right), Integer(c), evaluate=False)
        return rel(Integer(c), Add(*right), evaluate=False)
    if not right:
        return rel(Add(*left), Integer(-c), evaluate=False)
    return rel(Add(*left), Add(*right) - c, evaluate=False)
