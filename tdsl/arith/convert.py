"""Expr nodes <-> sympy, through a hash-consing table.

Every convertible integer/boolean expression gets a small integer *structure id* (`nid`):
two expressions with the same structure (same node types, constants and Var objects) get
the same id, whatever their object identity. Sympy forms are built once per id, so the
caches of `tdsl.arith` are keyed by (id, ranges) and a warm call costs a walk of the node
tree and a few dict look-ups, no sympy at all.

Vars map to interned sympy `Dummy` symbols (one per Var object; integer=True, and
nonnegative=True when `var.nonneg`). A Var with `multiple_of=m > 1` is modelled as `m*q`
for its symbol q, so divisibility by m is visible to the coefficient-based rules;
`from_sympy` maps `m*k*q` back to `var*k` and a lone `q` to `var // m`.
"""
from __future__ import annotations

from functools import lru_cache

import sympy
from sympy import Integer, Mul, S

from ..ir import expr as E
from .. import dtype as dt
from .errors import NotIndexExpr
from .symbolic import (floordiv, floormod, imin, imax, iselect, expand_mul, RELATIONALS)
from ..errors import InternalError

# ---------------------------------------------------------------------------------------
# Var <-> symbol interning

_var_info = {}    # Var -> (index, symbol q, multiple m)
_sym_info = {}    # symbol q -> (Var, m, index)
_idx_vars = {}    # index -> Var


def var_symbol(v):
    """(q, m): the interned sympy symbol of a Var and its multiple (v == m*q)."""
    info = _var_info.get(v)
    if info is None:
        m = int(getattr(v, "multiple_of", 1) or 1)
        if m < 1:
            m = 1
        if getattr(v, "nonneg", False):
            q = sympy.Dummy(v.name, integer=True, nonnegative=True)
        else:
            q = sympy.Dummy(v.name, integer=True)
        idx = len(_var_info)
        info = (idx, q, m)
        _var_info[v] = info
        _sym_info[q] = (v, m, idx)
        _idx_vars[idx] = v
    return info[1], info[2]


def symbol_order(q):
    info = _sym_info.get(q)
    return info[2] if info is not None else 1 << 30


def var_index(v):
    """The number of a Var, which `index_var` maps back: Vars are numbered in the order
    they are first met, so sorting by it is the same from run to run (a Var's hash is its
    id)."""
    info = _var_info.get(v)
    if info is None:
        var_symbol(v)
        info = _var_info[v]
    return info[0]


# ---------------------------------------------------------------------------------------
# structure ids

_table = {}       # key tuple -> nid
_keys = []        # nid -> key tuple
_vars = []        # nid -> frozenset of Vars
_syms = []        # nid -> sympy expr (built lazily)

_EMPTY = frozenset()

_BIN_TAGS = {E.Add: "add", E.Sub: "sub", E.Mul: "mul", E.FloorDiv: "fdiv",
             E.FloorMod: "fmod", E.Min: "min", E.Max: "max"}
_CMP_TAGS = {E.LT: "lt", E.LE: "le", E.GT: "gt", E.GE: "ge", E.EQ: "eq", E.NE: "ne"}
_LOGIC_TAGS = {E.And: "and", E.Or: "or"}


def _intern(key, vs):
    nid = _table.get(key)
    if nid is None:
        nid = len(_keys)
        _table[key] = nid
        _keys.append(key)
        _vars.append(vs)
        _syms.append(None)
    return nid


_INT_DTYPES = frozenset(d for d in dt.DTYPES if dt.is_int(d))


def _is_intlike(d):
    return d in _INT_DTYPES


_by_obj = ({}, {})   # per allow_likely: Expr object -> nid (-1: not an index expression)
_BY_OBJ_LIMIT = 1 << 18


def nid_of(e, memo=None, allow_likely=True):
    """The structure id of an integer/boolean expression; NotIndexExpr if `e` holds
    anything else (loads, floats, calls other than `likely`). Cached per object (nodes
    are immutable)."""
    cache = _by_obj[allow_likely]
    r = cache.get(e)
    if r is None:
        try:
            r = _nid(e, {} if memo is None else memo, allow_likely)
        except NotIndexExpr:
            r = -1
        if len(cache) > _BY_OBJ_LIMIT:
            cache.clear()
        cache[e] = r
    if r < 0:
        raise NotIndexExpr(e)
    return r


def _nid(e, memo, allow_likely):
    k = id(e)
    r = memo.get(k)
    if r is not None:
        return r
    t = type(e)
    if t is E.IntImm:
        if e.dtype == "bool":
            r = _intern(("b", bool(e.value)), _EMPTY)
        elif _is_intlike(e.dtype):
            r = _intern(("c", e.value), _EMPTY)
        else:
            raise NotIndexExpr(e)
    elif t is E.Var:
        if not _is_intlike(e.dtype):
            raise NotIndexExpr(e)
        r = _intern(("v", var_index(e)), frozenset((e,)))
    elif t in _BIN_TAGS:
        if not _is_intlike(e.a.dtype) or not _is_intlike(e.b.dtype):
            raise NotIndexExpr(e)
        a = _nid(e.a, memo, allow_likely)
        b = _nid(e.b, memo, allow_likely)
        r = _intern((_BIN_TAGS[t], a, b), _union(a, b))
    elif t in _CMP_TAGS:
        if not _is_intlike(e.a.dtype) or not _is_intlike(e.b.dtype):
            raise NotIndexExpr(e)
        a = _nid(e.a, memo, allow_likely)
        b = _nid(e.b, memo, allow_likely)
        r = _intern((_CMP_TAGS[t], a, b), _union(a, b))
    elif t in _LOGIC_TAGS:
        a = _nid(e.a, memo, allow_likely)
        b = _nid(e.b, memo, allow_likely)
        r = _intern((_LOGIC_TAGS[t], a, b), _union(a, b))
    elif t is E.Not:
        a = _nid(e.a, memo, allow_likely)
        r = _intern(("not", a), _vars[a])
    elif t is E.Select:
        if not (_is_intlike(e.dtype) or e.dtype == "bool"):
            raise NotIndexExpr(e)
        c = _nid(e.cond, memo, allow_likely)
        a = _nid(e.t, memo, allow_likely)
        b = _nid(e.f, memo, allow_likely)
        r = _intern(("sel", c, a, b), _vars[c] | _vars[a] | _vars[b])
    elif t is E.Cast:
        src = e.value.dtype
        if _is_intlike(e.dtype) and _is_intlike(src):
            r = _nid(e.value, memo, allow_likely)       # integer casts: values assumed to fit
        elif _is_intlike(e.dtype) and src == "bool":
            c = _nid(e.value, memo, allow_likely)
            one = _intern(("c", 1), _EMPTY)
            zero = _intern(("c", 0), _EMPTY)
            r = _intern(("sel", c, one, zero), _vars[c])
        else:
            raise NotIndexExpr(e)
    elif t is E.Call and e.name == "likely" and allow_likely and len(e.args) == 1:
        r = _nid(e.args[0], memo, allow_likely)
    else:
        raise NotIndexExpr(e)
    memo[k] = r
    return r


def _union(a, b):
    va, vb = _vars[a], _vars[b]
    if not vb or va is vb:
        return va
    if not va:
        return vb
    return va | vb


def vars_of_nid(nid):
    return _vars[nid]


def is_bool_nid(nid):
    return _keys[nid][0] in ("b", "lt", "le", "gt", "ge", "eq", "ne", "and", "or", "not")


def sym_of_nid(nid):
    s = _syms[nid]
    if s is None:
        s = _build(nid)
        _syms[nid] = s
    return s


def _build(nid):
    key = _keys[nid]
    tag = key[0]
    if tag == "c":
        return Integer(key[1])
    if tag == "b":
        return S.true if key[1] else S.false
    if tag == "v":
        v = index_var(key[1])
        q, m = var_symbol(v)
        return q if m == 1 else Integer(m) * q
    if tag == "sel":
        c, a, b = (sym_of_nid(x) for x in key[1:])
        if is_bool_nid(key[2]):
            return sympy.Or(sympy.And(c, a), sympy.And(sympy.Not(c), b))
        return iselect(c, a, b)
    if tag == "not":
        return sympy.Not(sym_of_nid(key[1]))
    a = sym_of_nid(key[1])
    b = sym_of_nid(key[2])
    if tag == "add":
        return a + b
    if tag == "sub":
        return a - b
    if tag == "mul":
        return expand_mul(a, b)
    if tag == "fdiv":
        return floordiv(a, b)
    if tag == "fmod":
        return floormod(a, b)
    if tag == "min":
        return imin(a, b)
    if tag == "max":
        return imax(a, b)
    if tag == "and":
        return sympy.And(a, b)
    if tag == "or":
        return sympy.Or(a, b)
    rel = {"lt": sympy.StrictLessThan, "le": sympy.LessThan, "gt": sympy.StrictGreaterThan,
           "ge": sympy.GreaterThan, "eq": sympy.Equality, "ne": sympy.Unequality}[tag]
    return rel(a, b, evaluate=False)


def index_var(idx):
    """The variable that `var_index` numbered `idx`."""
    return _idx_vars[idx]


def to_sympy(e):
    """The sympy form of an integer or boolean expression (cached by structure).

    `likely(c)` converts as `c`. Raises NotIndexExpr for anything else (loads, floats,
    other calls), so callers can fall back to leaving the expression alone."""
    e = E.convert(e)
    return sym_of_nid(nid_of(e))


# ---------------------------------------------------------------------------------------
# sympy -> Expr


def from_sympy(s, dtype="int32"):
    """An Expr for a sympy expression made of integers, tdsl symbols and the functions
    of `tdsl.arith.symbolic` (sums print as `i*4 + j - 1`). Booleans come back as
    comparison/logic nodes whose integer operands have `dtype`."""
    return _from(s, dtype)


@lru_cache(maxsize=65536)
def _from(s, dtype):
    if s.is_Integer:
        return E.IntImm(int(s), dtype)
    if s is S.true:
        return E.IntImm(1, "bool")
    if s is S.false:
        return E.IntImm(0, "bool")
    if s.is_Symbol:
        info = _sym_info.get(s)
        if info is None:
            raise InternalError(f"unknown symbol {s} in an index expression")
        v, m, _ = info
        ve = _typed(v, dtype)
        return ve if m == 1 else E.FloorDiv(ve, E.IntImm(m, dtype))
    if s.is_Add:
        return _from_add(s, dtype)
    if s.is_Mul or s.is_Pow:
        return _from_mul(s, dtype)
    f = s.func
    if f is floordiv:
        return E.FloorDiv(_from(s.args[0], dtype), _from(s.args[1], dtype))
    if f is floormod:
        return E.FloorMod(_from(s.args[0], dtype), _from(s.args[1], dtype))
    if f is imin:
        return E.Min(_from(s.args[0], dtype), _from(s.args[1], dtype))
    if f is imax:
        return E.Max(_from(s.args[0], dtype), _from(s.args[1], dtype))
    if f is iselect:
        return E.Select(_from(s.args[0], dtype), _from(s.args[1], dtype),
                        _from(s.args[2], dtype))
    if isinstance(s, RELATIONALS):
        cls = {sympy.StrictLessThan: E.LT, sympy.LessThan: E.LE,
               sympy.StrictGreaterThan: E.GT, sympy.GreaterThan: E.GE,
               sympy.Equality: E.EQ, sympy.Unequality: E.NE}[type(s)]
        return cls(_from(s.lhs, dtype), _from(s.rhs, dtype))
    if isinstance(s, sympy.And) or isinstance(s, sympy.Or):
        cls = E.And if isinstance(s, sympy.And) else E.Or
        args = sorted((_from(a, dtype) for a in s.args), key=lambda x: _term_key_expr(x))
        out = args[0]
        for a in args[1:]:
            out = cls(out, a)
        return out
    if isinstance(s, sympy.Not):
        return E.Not(_from(s.args[0], dtype))
    raise InternalError(f"cannot convert {s} ({type(s).__name__}) back to tdsl")


def _typed(v, dtype):
    if v.dtype == dtype:
        return v
    return E.Cast(dtype, v)


def _term_key_expr(x):
    # deterministic order for logic operands: by printed text
    return str(x)


def _order_key(s):
    """Sort key for the terms of a sum: larger coefficients (strides) first, so that
    outer loops usually come first (`m.o*32000 + m.i*1000 + n.i`), then by the order in
    which variables were first seen; constants last."""
    if s.is_Number:
        return (1, 0, ())
    c, _ = s.as_coeff_Mul()
    k = -abs(int(c)) if c.is_Integer else 0
    idx = sorted(symbol_order(q) for q in s.free_symbols)
    return (0, k, tuple(idx), _skey(s))


def _factor_key(s):
    idx = sorted(symbol_order(q) for q in s.free_symbols)
    return (tuple(idx), _skey(s))


@lru_cache(maxsize=65536)
def _skey(s):
    """A cheap deterministic structural sort key (sympy's str() is slow)."""
    if s.is_Integer:
        return (0, int(s))
    if s.is_Symbol:
        return (1, symbol_order(s))
    return (2, type(s).__name__, tuple(_skey(a) for a in s.args))


def _from_add(s, dtype):
    terms = sorted(s.args, key=_order_key)
    # start with a term that has a positive coefficient when one exists
    first = 0
    for i, t in enumerate(terms):
        if not _is_negative_term(t):
            first = i
            break
    out = _from(terms[first], dtype)
    for i, t in enumerate(terms):
        if i == first:
            continue
        if _is_negative_term(t):
            out = E.Sub(out, _from(-t, dtype))
        else:
            out = E.Add(out, _from(t, dtype))
    return out


def _is_negative_term(t):
    if t.is_Number:
        return t.is_negative
    c, _ = t.as_coeff_Mul()
    return c.is_Number and c.is_negative


def _from_mul(s, dtype):
    c, rest = s.as_coeff_Mul()
    if not c.is_Integer:
        raise InternalError(f"non-integer coefficient in index expression {s}")
    c = int(c)
    factors = []
    for f in Mul.make_args(rest):
        if f.is_Pow:
            e = f.exp
            if not e.is_Integer or int(e) < 1:
                raise InternalError(f"cannot convert power {f} in an index expression")
            factors.extend([f.base] * int(e))
        else:
            factors.append(f)
    factors.sort(key=_factor_key)
    nodes = []
    for f in factors:
        info = _sym_info.get(f) if f.is_Symbol else None
        if info is not None and info[1] > 1 and c % info[1] == 0:
            c //= info[1]
            nodes.append(_typed(info[0], dtype))     # m*q -> var
        else:
            nodes.append(_from(f, dtype))
    if c == -1 and not nodes:
        return E.IntImm(-1, dtype)
    out = None
    for n in nodes:
        out = n if out is None else E.Mul(out, n)
    if out is None:
        return E.IntImm(c, dtype)
    if c == -1:
        return E.Sub(E.IntImm(0, dtype), out)
    if c != 1:
        out = E.Mul(out, E.IntImm(c, dtype))
    return out


def clear():
    _by_obj[0].clear()
    _by_obj[1].clear()
    _from.cache_clear()
    _skey.cache_clear()
