"""Range-free normal forms that the range-aware simplifier (`analysis.simp`) applies: the
recombination of split/fuse pairs in a sum (c*(y//c) + y%c -> y, c*((y//c)%d) + y%c ->
y%(c*d), y - c*(y//c) -> y%c) and comparisons normalised (`<` for all orders, the gcd of
the coefficients divided out).
"""
from __future__ import annotations

from math import gcd

import sympy
from sympy import Add, Integer, S

from .symbolic import floordiv, floormod, terms_of


def _nterms(x):
    return 0 if x is S.Zero else len(Add.make_args(x))


def recombine(r):
    """Rejoin split/fuse pairs in a sum (identities, no ranges needed)."""
    for _ in range(16):
        terms = terms_of(r)
        if terms is None:
            return r
        if not any(isinstance(t, (floormod, floordiv)) for t in terms):
            return r
        new = None
        for t, k in terms.items():
            if isinstance(t, floormod):
                y, b = t.args
                q = floordiv(y, b)
                target = terms_of(b * q)
                if target is not None and len(target) == 1:
                    (tq, cq), = target.items()
                    if terms.get(tq) == k * cq:
                        # k*b*(y//b) + k*(y%b) = k*y
                        new = r - Integer(k * cq) * tq - Integer(k) * t + Integer(k) * y
                        break
                if b.is_Integer:
                    c = int(b)
                    for t2, k2 in terms.items():
                        if (k2 == k * c and isinstance(t2, floormod) and t2.args[0] == q
                                and t2.args[1].is_Integer):
                            # k*c*((y//c)%e) + k*(y%c) = k*(y%(c*e))
                            e = int(t2.args[1])
                            new = (r - Integer(k2) * t2 - Integer(k) * t
                                   + Integer(k) * floormod(y, Integer(c * e)))
                            break
                    if new is not None:
                        break
            elif isinstance(t, floordiv) and t.args[1].is_Integer:
                y, b = t.args
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
