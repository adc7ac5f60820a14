"""The loop nest of one update definition (`tdsl.update`), built with the schedule
lowering's nest builder: the update's leaf loops, guards for non-divisible splits, for a
region that passes the tensor's edge and for its `where`, and one store into the buffer
of its pure stage at the (possibly data-dependent) index it computes. The value reads the
same buffer, so a read of the state at an element written earlier in the update (the
`f[x, r - 1]` of a recursive filter) sees the new value.

An `atomic()` update stores with `BufferStore.atomic` set to its combining operation;
every code generator then makes the read-modify-write one atomic operation. A write
outside the buffer is no silent write: an index read from memory is checked in every
build (`bounds_check`), any other in a `bounds_check=True` build, and an affine one that
constant sizes put outside is refused before any code runs (`tdsl.te.regions`).
"""
from __future__ import annotations

from .. import arith
from ..errors import LoweringError
from ..ir import expr as E
from ..ir import stmt as S
from .bound import enclosing_ranges, leaf_values, pass_up_conditions, pass_up_index
from .nest import guarded, wrap_threads


def make_update(low, st) -> S.Stmt:
    """The loop nest of update stage `st` (`low`: the ScheduleLowering)."""
    op = st.op
    b = low.bounds[st]
    vals = pass_up_index(st, b.ranges, leaf_values(st, b.ranges))
    vmap = {iv.var: vals[iv] for iv in list(op.axis) + list(op.reduce_axis)}
    conds = [c for c, _ in pass_up_conditions(st, b.ranges, vals)]
    base = low.sched.stage_map[op.base]
    if base.attach_type == "scope":
        around = enclosing_ranges(low.sched, base, low.bounds)
        around.update(low.size_ranges)
        for iv in op.axis:
            x, rng, dom = vals[iv], b.ranges[iv], iv.dom
            if not arith.can_prove(E.LE(dom.min, rng.min), around):
                conds.append(E.likely(x >= dom.min))
            if not arith.can_prove(E.LE(rng.min + rng.extent, dom.min + dom.extent), around):
                conds.append(E.likely(x < dom.min + dom.extent))
    lower = low.lowerer(vmap)
    buf = low.buffer(st)
    off = low.offset(st)
    idx = tuple(arith.simplify(lower.visit(i) - o) if not E.is_const_int(o, 0)
                else lower.visit(i) for i, o in zip(op.index, off))
    where = lower.visit(op.where)
    if not E.is_const_int(where, 1):
        conds.append(where)
    pred, wraps = low.predicate(st, lower)
    atomic = ""
    if st.atomics:
        atomic = op.combine_op
        if atomic is None:
            raise LoweringError(f"atomic: stage '{op.name}' is no longer an associative update")
    store = S.BufferStore(buf, lower.visit(op.value), idx, atomic)
    body = wrap_threads(wraps, guarded(conds + pred, store))
    return low.wrap(st, st.leaf_iter_vars, body)
