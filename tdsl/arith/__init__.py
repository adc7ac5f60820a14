"""Integer index algebra: simplification, bounds and proofs under loop ranges.

This package is the only place in tdsl that imports sympy, and it does so lazily (on the
first call), so `import tdsl` stays fast. All functions take and return tdsl Expr nodes;
`ranges` is a mapping {Var: Range(min, extent)} (a `(min, extent)` tuple also works)
whose extents may be symbolic. Variables without a range are free symbols; a Var's
`nonneg` and `multiple_of` facts are used.

    simplify(e, ranges=None) -> Expr
    bound(e, ranges=None) -> (lo, hi)          inclusive; a side is None when unknown
    const_bound(e, ranges=None) -> (lo, hi)    Python ints, None = unbounded
    can_prove(cond, ranges=None) -> bool       conservative
    equal(a, b, ranges=None) -> bool           proves a == b
    is_divisible(a, b, ranges=None) -> bool
    linear_coeff(e, var, ranges=None) -> (int, Expr) | None
    ceil_div(a, b) -> Expr
    to_sympy(e) / from_sympy(s, dtype="int32")
    RangeScope(ranges)                         prepared ranges for many queries
    clear_caches()

Semantics: integer division and modulo are Python's floor semantics everywhere; integer
casts are treated as value-preserving (indices are assumed not to overflow); a divisor is
assumed nonzero (a nonneg symbolic divisor counts as positive).

How it works (and why this way): expressions are hash-consed into structure ids
(`convert.py`), converted once to sympy with our own `floordiv`/`floormod`/`imin`/`imax`/
`iselect` functions carrying a small audited rule set (`symbolic.py`), and simplified
bottom-up with integer interval arithmetic (`context.py`, `intervals.py`, `analysis.py`,
`normal.py`). sympy's `simplify()`, `Mod` and `floor` are never used (slow, and `Mod` has
wrong results); `expand` is replaced by a cheap distribution of products. Results are cached by (structure id, relevant ranges,
dtype), so repeated queries cost a tree walk and a dict look-up.
"""
from __future__ import annotations

from .errors import NotIndexExpr


def _core():
    from . import core
    return core


def simplify(e, ranges=None):
    """`e` simplified under `ranges`. Integer and boolean expressions are rewritten into
    a canonical form (`i*4 + j`, comparisons as `<`, provable comparisons folded to
    True/False); other expressions keep their structure with their integer parts
    (load indices, select conditions, casts of indices) simplified."""
    return _core().simplify(e, ranges)


simplify_index = simplify     # the name used in DESIGN.md


def bound(e, ranges=None):
    """Inclusive (lo, hi) of an integer expression as Exprs, over all values of the
    ranged variables; free variables stay symbolic: bound(io*8 + ii, {ii: [0, 8)}) is
    (io*8, io*8 + 7). A side that cannot be bounded is None."""
    return _core().bound(e, ranges)


def const_bound(e, ranges=None):
    """Inclusive (lo, hi) as Python ints; None for an unbounded side."""
    return _core().const_bound(e, ranges)


def can_prove(cond, ranges=None):
    """True only when `cond` holds for every value of the ranged variables."""
    return _core().can_prove(cond, ranges)


def equal(a, b, ranges=None):
    """True when a == b is provable (structural equality included)."""
    return _core().equal(a, b, ranges)


def is_divisible(a, b, ranges=None):
    """True when a % b == 0 is provable."""
    return _core().is_divisible(a, b, ranges)


def linear_coeff(e, var, ranges=None):
    """(coeff, base) with e == coeff*var + base and base free of var (after
    simplification under ranges), or None when e is not linear in var."""
    return _core().linear_coeff(e, var, ranges)


def ceil_div(a, b):
    """(a + b - 1) // b, folded for constants and simplified."""
    return _core().ceil_div(a, b)


def to_sympy(e):
    """The sympy form of an integer/boolean Expr; raises NotIndexExpr otherwise."""
    from . import convert
    return convert.to_sympy(e)


def from_sympy(s, dtype="int32"):
    """An Expr from a sympy expression built by to_sympy (or tdsl.arith's functions)."""
    from . import convert
    return convert.from_sympy(s, dtype)


def RangeScope(ranges=None):
    """Ranges prepared once for many queries (pass it wherever `ranges` is accepted)."""
    return _core().RangeScope(ranges)


def clear_caches():
    _core().clear_caches()


__all__ = ["NotIndexExpr", "simplify", "simplify_index", "bound", "const_bound", "can_prove", "equal",
           "is_divisible", "linear_coeff", "ceil_div", "to_sympy", "from_sympy",
           "RangeScope", "clear_caches"]
