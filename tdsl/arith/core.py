"""The public operations of tdsl.arith on Expr nodes (see the package docstring).

Integer and boolean sub-expressions go through sympy (`convert.py`, `analysis.py`) with
results cached by (structure id, context, dtype); everything else (float math, loads,
calls) is walked and rebuilt with its integer parts simplified.
"""
from __future__ import annotations

import dataclasses

from sympy import Add

from ..ir import expr as E
from .. import dtype as dt
from . import convert as C
from . import analysis as A
from .context import EMPTY, make_ctx
from .errors import NotIndexExpr
from .symbolic import floordiv

_simplify_cache = {}
_bound_cache = {}
_linear_cache = {}
_CACHE_LIMIT = 1 << 18


def _put(cache, key, value):
    if len(cache) >= _CACHE_LIMIT:
        cache.clear()
    cache[key] = value


# ---------------------------------------------------------------------------------------
# ranges -> contexts

def _range_parts(r):
    if isinstance(r, E.Range):
        return r.min, r.extent
    if isinstance(r, tuple) and len(r) == 2:
        return E.convert(r[0]), E.convert(r[1])
    lo, ext = getattr(r, "min", None), getattr(r, "extent", None)
    if lo is None or ext is None:
        raise TypeError(f"a range must be a tdsl Range or (min, extent), got {r!r}")
    return E.convert(lo), E.convert(ext)


_range_items = {}          # (Var, Range object) -> (var index, nid min, nid extent) | None
_RANGE_ITEMS_LIMIT = 1 << 16


def _range_item(v, r):
    lo, ext = _range_parts(r)
    try:
        return (C.var_index(v), C.nid_of(lo), C.nid_of(ext))
    except NotIndexExpr:
        return None


class RangeScope:
    """Ranges of variables ({Var: Range(min, extent)}) prepared for repeated queries.

    Only the ranges of variables an expression uses (and, transitively, the variables
    of those ranges) enter its cache key, so a deep loop nest does not spoil caching."""

    __slots__ = ("ranges", "_items", "_ctx")

    def __init__(self, ranges=None):
        self.ranges = ranges if ranges else {}
        self._items = {}
        self._ctx = {}

    def _item(self, v):
        it = self._items.get(v, 0)
        if it == 0:
            it = None
            r = self.ranges.get(v)
            if r is not None:
                if isinstance(r, E.Range):
                    key = (v, r)
                    it = _range_items.get(key, 0)
                    if it == 0:
                        it = _range_item(v, r)
                        if len(_range_items) > _RANGE_ITEMS_LIMIT:
                            _range_items.clear()
                        _range_items[key] = it
                else:
                    it = _range_item(v, r)
            self._items[v] = it
        return it

    def ctx_for(self, vs):
        if not vs or not self.ranges:
            return EMPTY
        c = self._ctx.get(vs)
        if c is not None:
            return c
        # sets of Vars iterate in the order of their ids, which differs from run to run:
        # walk them by number, since the walk numbers the new Vars of the ranges, and
        # build the context's map in the order of its key, which the relaxation levels
        # of mutually dependent ranges follow (context.Ctx)
        entries = []
        seen = set()
        todo = sorted((v for v in vs if v in self.ranges), key=C.var_index, reverse=True)
        while todo:
            v = todo.pop()
            if v in seen:
                continue
            seen.add(v)
            it = self._item(v)
            if it is None:
                continue
            entries.append(it)
            for w in sorted(C.vars_of_nid(it[1]) | C.vars_of_nid(it[2]), key=C.var_index,
                            reverse=True):
                if w not in seen and w in self.ranges:
                    todo.append(w)
        key = frozenset(entries)
        c = make_ctx(key, lambda: _build_ctx(sorted(entries)))
        self._ctx[vs] = c
        return c


def _build_ctx(entries):
    m = {}
    for idx, nm, ne in entries:
        v = C.index_var(idx)
        q, mult = C.var_symbol(v)
        lo = C.sym_of_nid(nm)
        hi = lo + C.sym_of_nid(ne) - 1
        if mult == 1:
            m[q] = (lo, hi)
        else:
            m[q] = (floordiv(lo + (mult - 1), mult), floordiv(hi, mult))
    return m


def _scope(ranges):
    if isinstance(ranges, RangeScope):
        return ranges
    return RangeScope(ranges)


# ---------------------------------------------------------------------------------------
# simplify

def _operand_dtype(e):
    """The integer dtype of the operands of a boolean expression."""
    stack = [e]
    while stack:
        x = stack.pop()
        if isinstance(x, E.CmpOp):
            return x.a.dtype
        if isinstance(x, (E.And, E.Or)):
            stack.extend((x.b, x.a))
        elif isinstance(x, E.Not):
            stack.append(x.a)
        elif isinstance(x, E.Select):
            stack.extend((x.f, x.t, x.cond))
        elif isinstance(x, E.Call):
            stack.extend(reversed(x.args))
    return "int32"


def _is_const(e, v=None):
    return type(e) is E.IntImm and (v is None or e.value == v)


def simplify_in(e, scope):
    """simplify() with a prepared RangeScope."""
    t = type(e)
    if t is E.IntImm or t is E.Var or t is E.FloatImm:
        return e
    d = e.dtype
    if d == "bool":
        if t is E.Call and e.name == "likely" and len(e.args) == 1:
            c = simplify_in(e.args[0], scope)
            if type(c) is E.IntImm:
                return c
            return e if c is e.args[0] else E.Call("likely", (c,), "bool")
        try:
            nid = C.nid_of(e, allow_likely=False)
        except NotIndexExpr:
            return _logic(e, scope)
        return _simplify_index(e, nid, scope)
    if dt.is_int(d):
        try:
            nid = C.nid_of(e, allow_likely=False)
        except NotIndexExpr:
            return _generic(e, scope)
        return _simplify_index(e, nid, scope)
    return _generic(e, scope)


def _logic(e, scope):
    """And/Or/Not holding something sympy does not take (a likely() hint, a load)."""
    t = type(e)
    if t is E.And or t is E.Or:
        a = simplify_in(e.a, scope)
        b = simplify_in(e.b, scope)
        absorb = 0 if t is E.And else 1
        if _is_const(a, absorb) or _is_const(b, absorb):
            return E.IntImm(absorb, "bool")
        if _is_const(a):
            return b
        if _is_const(b):
            return a
        if a is e.a and b is e.b:
            return e
        return t(a, b)
    if t is E.Not:
        a = simplify_in(e.a, scope)
        if _is_const(a):
            return E.IntImm(1 - int(bool(a.value)), "bool")
        return e if a is e.a else E.Not(a)
    return _generic(e, scope)


def _simplify_index(e, nid, scope):
    ctx = scope.ctx_for(C.vars_of_nid(nid))
    odt = _operand_dtype(e) if e.dtype == "bool" else e.dtype
    key = (nid, ctx, odt)
    r = _simplify_cache.get(key)
    if r is None:
        s = C.sym_of_nid(nid)
        s2 = A.simp(s, ctx)
        r = C.from_sympy(s2, odt)
        try:
            if C.nid_of(r) == nid:
                r = e
        except NotIndexExpr:
            pass
        _put(_simplify_cache, key, r)
    return r


def _generic(e, scope):
    t = type(e)
    if t is E.Select:
        c = simplify_in(e.cond, scope)
        if _is_const(c):
            return simplify_in(e.t if c.value else e.f, scope)
        a = simplify_in(e.t, scope)
        b = simplify_in(e.f, scope)
        if c is e.cond and a is e.t and b is e.f:
            return e
        return E.Select(c, a, b)
    if not dataclasses.is_dataclass(e):
        return e
    changes = {}
    for f in dataclasses.fields(e):
        v = getattr(e, f.name)
        if isinstance(v, E.Expr):
            nv = simplify_in(v, scope)
        elif isinstance(v, tuple) and any(isinstance(x, E.Expr) for x in v):
            nv = tuple(simplify_in(x, scope) if isinstance(x, E.Expr) else x for x in v)
            if all(a is b for a, b in zip(nv, v)):
                nv = v
        else:
            continue
        if nv is not v:
            changes[f.name] = nv
    if not changes:
        return e
    return dataclasses.replace(e, **changes)


def simplify(e, ranges=None):
    return simplify_in(E.convert(e), _scope(ranges))


# ---------------------------------------------------------------------------------------
# bounds and proofs

def _index_parts(e, ranges):
    e = E.convert(e)
    nid = C.nid_of(e)
    scope = _scope(ranges)
    ctx = scope.ctx_for(C.vars_of_nid(nid))
    return e, nid, ctx


def bound(e, ranges=None):
    e, nid, ctx = _index_parts(e, ranges)
    if e.dtype == "bool":
        raise NotIndexExpr(e)
    key = (nid, ctx, e.dtype)
    r = _bound_cache.get(key)
    if r is None:
        s = A.simp(C.sym_of_nid(nid), ctx)
        lo, hi = A.sbound(s, ctx)
        lo = None if lo is None else C.from_sympy(A.simp(lo, ctx), e.dtype)
        hi = None if hi is None else C.from_sympy(A.simp(hi, ctx), e.dtype)
        r = (lo, hi)
        _put(_bound_cache, key, r)
    return r


def const_bound(e, ranges=None):
    e, nid, ctx = _index_parts(e, ranges)
    return A.num_bounds(A.simp(C.sym_of_nid(nid), ctx), ctx)


def can_prove(cond, ranges=None):
    if isinstance(cond, bool):
        return cond
    c = simplify(cond, ranges)
    return type(c) is E.IntImm and c.value != 0


def equal(a, b, ranges=None):
    a, b = E.convert(a), E.convert(b)
    if a is b:
        return True
    try:
        return can_prove(E.EQ(*E.convert_operands(a, b)), ranges)
    except NotIndexExpr:
        return False


def is_divisible(a, b, ranges=None):
    a, b = E.convert_operands(E.convert(a), E.convert(b))
    if _is_const(b, 0) or not dt.is_int(a.dtype):
        return False
    if _is_const(b) and abs(b.value) == 1:
        return True
    r = simplify(E.FloorMod(a, b), ranges)
    return _is_const(r, 0)


def linear_coeff(e, var, ranges=None):
    try:
        e, nid, ctx = _index_parts(e, ranges)
    except NotIndexExpr:
        return None
    if e.dtype == "bool":
        return None
    key = (nid, ctx, var, e.dtype)
    if key in _linear_cache:
        return _linear_cache[key]
    s = A.simp(C.sym_of_nid(nid), ctx)
    q, m = C.var_symbol(var)
    res = None
    if q not in s.free_symbols:
        res = (0, C.from_sympy(s, e.dtype))
    else:
        coeff = 0
        base = []
        ok = True
        for t in Add.make_args(s):
            if q not in t.free_symbols:
                base.append(t)
                continue
            c, rest = t.as_coeff_Mul()
            if rest == q and c.is_Integer:
                coeff += int(c)
            else:
                ok = False
                break
        if ok and coeff % m == 0:
            res = (coeff // m, C.from_sympy(Add(*base), e.dtype))
    _put(_linear_cache, key, res)
    return res


def ceil_div(a, b):
    a, b = E.convert_operands(E.convert(a), E.convert(b))
    if _is_const(a) and _is_const(b):
        return E.IntImm(-(-a.value // b.value), a.dtype)
    if _is_const(b):
        if b.value == 1:
            return a
        n = E.FloorDiv(E.Add(a, E.IntImm(b.value - 1, a.dtype)), b)
    else:
        n = E.FloorDiv(E.Sub(E.Add(a, b), E.IntImm(1, a.dtype)), b)
    return simplify(n)


def clear_caches():
    _range_items.clear()
    _simplify_cache.clear()
    _bound_cache.clear()
    _linear_cache.clear()
    A.clear()
    C.clear()
