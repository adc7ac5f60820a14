"""Sympy functions for integer index algebra, with a small audited set of rewrite rules.

sympy's own `floor`/`Mod` are not used: `Mod` has known wrong results, and neither knows
Python's floor semantics for negative operands the way we need. The classes here are
plain sympy `Function`s whose `eval` applies only rules that hold for *all* integer values
of their arguments (no ranges): range-dependent rules live in `analysis.py`.

Rules (c, d, m positive integer constants; x, y, a any integer expressions; b nonzero):

floordiv(a, b)
  F1  constants fold (Python `//`); x // 1 = x; x // -c = (-x) // c
  F2  (a*b + y) // b = a + y // b           (terms of the numerator divisible by b move out;
                                             b a constant or a monomial such as n or 4*n)
  F3  (x + k) // c = (x + k % c) // c + k // c      (constant normalised into [0, c))
  F4  (g*x) // (g*c) = x // c               (g = gcd of all coefficients and c)
  F5  (x // c) // d = x // (c*d)
  F6  (x % m) // c = (x // c) % (m / c)     when c divides m;  = 0 when m <= c
floormod(a, b)
  M1  constants fold; x % 1 = 0; x % -c = -((-x) % c)
  M2  (a*b + y) % b = y % b                 (divisible terms dropped)
  M3  (x + k) % c = (x + k % c) % c
  M4  (g*x) % (g*c) = g * (x % c)
  M5  (x % m) % c = x % c when c divides m;  = x % m when m <= c;  (x % b) % b = x % b
imin/imax: constants fold, equal arguments, arguments differing by a constant,
           imin(imin(x, y), y) = imin(x, y) (and mirror)
iselect(cond, t, f): constant conditions, equal branches.

Every rule is checked against plain Python integers by tests/test_arith.py.
"""
from __future__ import annotations

from math import gcd

import sympy
from sympy import Add, Integer, Mul, S
from sympy.core.function import Function


def _int(k):
    """A sympy Integer coefficient as a Python int, or None for non-integers."""
    if k.is_Integer:
        return int(k)
    return None


def terms_of(a):
    """{term: int coefficient} of an integer polynomial; the constant under key S.One.
    Returns None when a coefficient is not an integer (never expected)."""
    d = a.as_coefficients_dict()
    out = {}
    for t, k in d.items():
        ki = _int(k)
        if ki is None:
            return None
        out[t] = ki
    return out


def _factor_counts(t):
    """Monomial -> (int coefficient, {base: int exponent}) or None."""
    c, rest = t.as_coeff_Mul()
    ci = _int(c)
    if ci is None:
        return None
    counts = {}
    for f in Mul.make_args(rest):
        if f is S.One:
            continue
        if f.is_Pow:
            e = _int(f.exp)
            if e is None or e < 1:
                return None
            counts[f.base] = counts.get(f.base, 0) + e
        elif f.is_Number:
            return None
        else:
            counts[f] = counts.get(f, 0) + 1
    return ci, counts


def monomial_quotient(t, b):
    """t / b when both are monomials and b divides t exactly (integer coefficient,
    every factor of b present in t), else None."""
    ft = _factor_counts(t)
    fb = _factor_counts(b)
    if ft is None or fb is None:
        return None
    ct, mt = ft
    cb, mb = fb
    if cb == 0 or ct % cb != 0 or not mb:
        return None
    rest = dict(mt)
    for base, e in mb.items():
        have = rest.get(base, 0)
        if have < e:
            return None
        rest[base] = have - e
    out = Integer(ct // cb)
    for base, e in rest.items():
        if e:
            out = out * base ** e
    return out


def _is_monomial(b):
    if b.is_Add or b.is_Number:
        return False
    return _factor_counts(b) is not None


def expand_mul(*factors):
    """Product of factors, distributing over sums (a cheap `expand` for polynomials)."""
    acc = [S.One]
    for f in factors:
        parts = Add.make_args(f)
        if len(parts) == 1:
            acc = [a * f for a in acc]
        else:
            acc = [a * p for a in acc for p in parts]
    return Add(*acc)


class floordiv(Function):
    """Integer division rounding toward negative infinity (Python `//`)."""
    nargs = 2
    is_integer = True

    @classmethod
    def eval(cls, a, b):
        if a is S.Zero:
            return S.Zero
        if b.is_Integer:
            c = int(b)
            if c == 0:
                return None
            if a.is_Integer:
                return Integer(int(a) // c)
            if c == 1:
                return a
            if c < 0:
                return floordiv(-a, Integer(-c))
            if isinstance(a, floordiv) and a.args[1].is_Integer and int(a.args[1]) > 0:
                return floordiv(a.args[0], Integer(int(a.args[1]) * c))          # F5
            if isinstance(a, floormod) and a.args[1].is_Integer and int(a.args[1]) > 0:
                m = int(a.args[1])
                if m <= c:
                    return S.Zero                                                # F6
                if m % c == 0:
                    return floormod(floordiv(a.args[0], b), Integer(m // c))    # F6
            return _split_const(a, c, div=True)
        if _is_monomial(b):
            return _split_sym(a, b, div=True)
        return None


class floormod(Function):
    """Integer remainder with the sign of the divisor (Python `%`)."""
    nargs = 2
    is_integer = True

    @classmethod
    def eval(cls, a, b):
        if a is S.Zero:
            return S.Zero
        if b.is_Integer:
            c = int(b)
            if c == 0:
                return None
            if a.is_Integer:
                return Integer(int(a) % c)
            if c in (1, -1):
                return S.Zero
            if c < 0:
                return -floormod(-a, Integer(-c))
            if isinstance(a, floormod) and a.args[1].is_Integer and int(a.args[1]) > 0:
                m = int(a.args[1])
                if m % c == 0:
                    return floormod(a.args[0], b)                                # M5
                if m <= c:
                    return a                                                     # M5
            return _split_const(a, c, div=False)
        if isinstance(a, floormod) and a.args[1] == b:
            return a                                                             # M5
        if _is_monomial(b):
            return _split_sym(a, b, div=False)
        return None


def _split_const(a, c, div):
    """Rules F2-F4 / M2-M4 for a positive integer divisor c. None when nothing applies."""
    terms = terms_of(a)
    if terms is None:
        return None
    out = []
    rest = []
    const = 0
    changed = False
    for t, k in terms.items():
        if t is S.One:
            const = k
        elif k % c == 0:
            changed = True
            if div:
                out.append(Integer(k // c) * t)
        else:
            rest.append((t, k))
    q, r = divmod(const, c)
    if q:
        changed = True
        if div:
            out.append(Integer(q))
    g = c
    for _, k in rest:
        g = gcd(g, k)
    g = gcd(g, r)
    if g > 1:
        changed = True
    if not changed:
        return None
    inner = Add(*[Integer(k // g) * t for t, k in rest], Integer(r // g))
    c2 = Integer(c // g)
    if div:
        return Add(*out, floordiv(inner, c2))
    return Integer(g) * floormod(inner, c2)


def _split_sym(a, b, div):
    """Rules F2 / M2 for a monomial divisor b (a symbol or a product of symbols)."""
    if a == b:
        return S.One if div else S.Zero
    out = []
    rest = []
    for t in Add.make_args(a):
        q = monomial_quotient(t, b)
        if q is None:
            rest.append(t)
        else:
            out.append(q)
    if not out:
        return None
    r = Add(*rest)
    if div:
        return Add(*out, floordiv(r, b))
    return floormod(r, b)


def _out_of_order(a, b):
    """Canonical argument order for the commutative imin/imax: constants last, the rest
    in sympy's own canonical order."""
    if a.is_Number != b.is_Number:
        return a.is_Number
    return a.compare(b) > 0


class imin(Function):
    """Minimum of two integers (own class: sympy's Min consults assumptions, slowly)."""
    nargs = 2
    is_integer = True

    @classmethod
    def eval(cls, a, b):
        r = _minmax_eval(cls, a, b, True)
        if r is None and _out_of_order(a, b):
            return cls(b, a)
        return r


class imax(Function):
    nargs = 2
    is_integer = True

    @classmethod
    def eval(cls, a, b):
        r = _minmax_eval(cls, a, b, False)
        if r is None and _out_of_order(a, b):
            return cls(b, a)
        return r


def _minmax_eval(cls, a, b, is_min):
    if a == b:
        return a
    if a.is_Integer and b.is_Integer:
        return a if (int(a) <= int(b)) == is_min else b
    if isinstance(a, cls) and b in a.args:
        return a
    if isinstance(b, cls) and a in b.args:
        return b
    d = a - b
    if d.is_Integer:
        return a if (int(d) <= 0) == is_min else b
    return None


class iselect(Function):
    """`cond ? t : f` on integers; cond is a sympy Boolean."""
    nargs = 3
    is_integer = True

    @classmethod
    def eval(cls, c, t, f):
        if c is S.true:
            return t
        if c is S.false:
            return f
        if t == f:
            return t
        return None


RELATIONALS = (sympy.StrictLessThan, sympy.LessThan, sympy.StrictGreaterThan,
               sympy.GreaterThan, sympy.Equality, sympy.Unequality)
