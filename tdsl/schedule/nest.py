"""Small statement builders shared by the schedule lowering (`schedule_ops.py`) and its
cross-thread reductions (`cross_thread.py`). The nest builder that needs the schedule's
bounds and attachments (`loop`, `wrap`, `allocate`, `predicate`) is `ScheduleLowering`'s."""
from __future__ import annotations

from ..ir import expr as E
from ..ir import stmt as S
from ..ir.visitor import walk


def bound_tag(st, iv) -> str:
    attr = st.iter_var_attrs.get(iv)
    return attr.thread.thread_tag if attr is not None and attr.thread is not None else ""


def allocate_all(bufs, body):
    for b in reversed(bufs):
        body = S.Allocate(b, body)
    return body


def store_values(bufs, idx, vals):
    """bufs[k][idx] = vals[k]; with several buffers every value is computed (let-bound)
    before any store, as each may read all the old elements (a tuple reduction)."""
    reads = set()
    for v in vals:
        walk(v, lambda n: reads.add(n.buffer) if isinstance(n, E.BufferLoad) else None)
    if len(bufs) == 1 or not reads & set(bufs):
        return S.seq(*[S.BufferStore(b, v, idx) for b, v in zip(bufs, vals)])
    tmps = [E.Var(f"{b.name}.next", b.dtype) for b in bufs]
    body = S.seq(*[S.BufferStore(b, t, idx) for b, t in zip(bufs, tmps)])
    for t, v in reversed(list(zip(tmps, vals))):
        body = S.LetStmt(t, v, body)
    return body


def combine_into(combiner, bufs, idx, rhs):
    """bufs[idx] = combine(bufs[idx], rhs), element-wise over a tuple reduction. A tuple's
    old and new elements are let-bound first: its combiner reads each several times, often
    under selects, which would otherwise re-read (and, being lazy, guard) every load."""
    lhs = tuple(E.BufferLoad(b, idx) for b in bufs)
    rhs = tuple(rhs)
    if len(bufs) == 1:
        return store_values(bufs, idx, combiner.combine_values(lhs, rhs))
    xs = [E.Var(f"{b.name}.x", b.dtype) for b in bufs]
    ys = [E.Var(f"{b.name}.y", b.dtype) for b in bufs]
    body = store_values(bufs, idx, combiner.combine_values(tuple(xs), tuple(ys)))
    for v, value in reversed(list(zip(xs + ys, lhs + rhs))):
        body = S.LetStmt(v, value, body)
    return body


def wrap_threads(wraps, stmt):
    """`stmt` inside loops bound to thread tags that no enclosing loop has (a store
    predicate that reads them): on a GPU each thread runs its own index."""
    for var, ext, tag in wraps:
        stmt = S.For(var, E.const(0), ext, S.ForKind.THREAD_BINDING, stmt, tag)
    return stmt


def guarded(conds, stmt):
    if not conds:
        return stmt
    c = conds[0]
    for x in conds[1:]:
        c = E.And(c, x)
    return S.IfThenElse(c, stmt)
