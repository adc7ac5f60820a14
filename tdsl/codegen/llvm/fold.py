"""Horizontal folds: a serial loop that folds a short run of values into one element,

    for v in [lo, lo + n):  acc[c] = acc[c] op x(v)      (c not depending on v)

with `op` a float add, or a max or min, becomes one vector of the n values of x, a tree
of log2(n) vector ops over its halves, and one scalar op with acc[c]. It is the last
step of a row reduction after rfactor (the vector of partial sums folded into the
output): lane by lane it was a chain of n dependent ops, 16 adds of ~3-4 cycles each a
row on AVX-512, about as long as the rest of a 197-wide softmax row. Float adds are
reassociated, as the build's fast-math flags already allow; max and min (NaN-propagating)
and integer max and min give exactly what the loop gives.
"""
from __future__ import annotations

from llvmlite import ir

from ... import dtype as dt
from ...ir import expr as E
from ...ir import stmt as S
from .irscan import collect_refs, expr_vars, structural_key
from .lanes import Lanes, VecCtx, vector_legality
from .types import scalar_type

MIN_LANES, MAX_LANES = 4, 64


def match(loop: S.For):
    """(the store, the op's class, x, the load of acc[c]) when `loop` is such a fold, else
    None."""
    if loop.kind not in (S.ForKind.SERIAL, S.ForKind.UNROLLED) or \
            not isinstance(loop.extent, E.IntImm):
        return None
    n = loop.extent.value
    if not MIN_LANES <= n <= MAX_LANES or n & (n - 1):
        return None
    st = loop.body
    if not isinstance(st, S.BufferStore) or len(st.indices) != 1 \
            or loop.var in expr_vars(st.indices[0], set()):
        return None
    v = st.value
    op = type(v)
    if op not in (E.Add, E.Max, E.Min) or (op is E.Add and not dt.is_float(v.dtype)) \
            or v.dtype == "bool":
        return None
    key = structural_key(st.indices[0])
    acc = [a for a in (v.a, v.b) if isinstance(a, E.BufferLoad) and a.buffer is st.buffer
           and len(a.indices) == 1 and structural_key(a.indices[0]) == key]
    if not acc:
        return None
    x = v.b if acc[0] is v.a else v.a
    read = {}
    collect_refs(S.Evaluate(x), {}, read)
    if loop.var not in expr_vars(x, set()) or st.buffer in read:
        return None
    probe = S.For(loop.var, loop.min, loop.extent, S.ForKind.VECTORIZED, S.Evaluate(x))
    if vector_legality(probe) is not None:
        return None
    return st, op, x, acc[0]


def emit(em, loop: S.For, st, op, x, acc):
    """The fold of `match` at the emitter `em`'s position."""
    n = loop.extent.value
    bl = em.builder
    lo = em.cast(em.expr(loop.min), loop.min.dtype, loop.var.dtype)
    lane_ids = ir.Constant(ir.VectorType(scalar_type(loop.var.dtype), n), list(range(n)))
    em.vec = VecCtx(Lanes(loop.var, loop.min, n), lo, n)
    em.env[loop.var] = bl.add(em.splat(lo, n), lane_ids)
    try:
        xs = em.splat(em.expr(x), n)
    finally:
        em.vec = None
        em.env.pop(loop.var, None)
    while n > 1:
        n //= 2
        undef = ir.Constant(xs.type, ir.Undefined)
        lo_half = bl.shuffle_vector(xs, undef, _lanes(0, n))
        hi_half = bl.shuffle_vector(xs, undef, _lanes(n, n))
        xs = _combine(em, op, lo_half, hi_half, x.dtype)
    folded = bl.extract_element(xs, ir.Constant(ir.IntType(32), 0))
    total = _combine(em, op, em.expr(acc), folded, x.dtype)
    _with_values(em, [total], lambda v: em.stmt(S.BufferStore(st.buffer, v[0], st.indices)),
                 x.dtype)


def _lanes(first, n):
    return ir.Constant(ir.VectorType(ir.IntType(32), n), list(range(first, first + n)))


def _combine(em, op, a, b, dtype):
    """`op` of two LLVM values through the emitter's own expression code (its fast-math
    flags, its NaN-propagating max and min)."""
    return _with_values(em, [a, b], lambda v: em.expr(op(v[0], v[1])), dtype)


def _with_values(em, values, body, dtype):
    """Runs body([Var...]) with each Var bound to one of `values` in `em`'s environment."""
    vs = [E.Var(f"fold.{i}", dtype) for i in range(len(values))]
    for var, val in zip(vs, values):
        em.env[var] = val
    try:
        return body(vs)
    finally:
        for var in vs:
            em.env.pop(var, None)

