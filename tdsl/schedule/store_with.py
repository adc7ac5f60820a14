"""The legality of `Stage.store_with(tensor)`: a stage that stores its values in an output's
buffer, at the output's own indices, must have all of them read before the output
overwrites them.

Conservatively, for stage P stored with output T:
- T is an argument and P is computed at a loop L of T (compute_at);
- T has no reduction axis and reads P (itself or through inlined stages) only at T's own
  indices, so T's value at a point replaces P's value at that point and nothing else;
- every other reader of P is computed at the same loop L (itself, or a stage it is
  computed at): attached stages run before the loops of T inside L, so they have read
  all of P's region before T writes any of it;
- the region of P computed per iteration of L is exactly the part of T that iteration
  writes, and inside T's shape: a larger one (a split of T that does not divide its axis,
  a reader that needs a halo) would write over values of T that other iterations own.
"""
from __future__ import annotations

from .. import arith
from ..errors import LoweringError, ScheduleError
from ..ir import expr as E
from ..ir.expr import is_const_int
from ..te.tensor import PlaceholderOp
from .bound import (attach_leaf, effective_bodies, infer_bounds, leaf_values, loop_range, pass_up_index,
                    reads_of)


def check_store_with(sched, bounds, arg_stages):
    bodies = {}
    for st in sched.stages:
        T = st.stored_with
        if T is None:
            continue

        def err(msg, st=st, T=T):
            return ScheduleError(f"store_with: stage '{st.name}' in '{T.name}': {msg}")
        if T not in arg_stages:
            raise err(f"'{T.name}' is not an argument of the build (only an argument's buffer "
                      "outlives the kernel's own)")
        if T.attach_type == "inline" or T.stored_with is not None:
            raise err(f"'{T.name}' has no buffer of its own")
        if st.attach_type != "scope" or st.attach_stage is not T:
            raise err(f"it must be computed at a loop of '{T.name}' (compute_at)")
        if st.scope != T.scope or st.storage_aligns or st.storage_swizzle_bytes or st.double_buffered:
            raise err("its buffer has a layout or scope of its own")
        if T.op.reduce_axis:
            raise err(f"'{T.name}' is a reduction: it would overwrite a value it reads again")
        axes = [iv.var for iv in T.op.axis]
        for idx in reads_of(effective_bodies(sched, T, bodies), sched, st):
            if len(idx) != len(axes) or any(i is not a for i, a in zip(idx, axes)):
                raise err(f"'{T.name}' reads it at {[str(i) for i in idx]}, not at its own "
                          f"indices {[str(a) for a in axes]}")
        leaf = attach_leaf(st)
        for r in sched.stages:
            if r is st or r is T or isinstance(r.op, PlaceholderOp) or r.attach_type == "inline":
                continue
            if not reads_of(effective_bodies(sched, r, bodies), sched, st):
                continue
            if _leaf_in(r, T) is not leaf:
                raise err(f"'{r.name}' reads it but is not computed at the same loop of "
                          f"'{T.name}' ('{leaf.var.name}'); it could read a value after "
                          f"'{T.name}' overwrote it")
        _check_region(st, T, leaf, bounds, err)


def store_with_holds(sched) -> bool:
    """Whether the schedule's store_with stages pass these checks, its outputs taken as the
    build's arguments (the auto-scheduler's test before it keeps one)."""
    try:
        check_store_with(sched, infer_bounds(sched), {st for st in sched.stages if st.is_output})
    except (ScheduleError, LoweringError):
        return False
    return True


def _leaf_in(r, T):
    """The loop of T that stage r is computed in, through its attach chain (None: outside)."""
    while r.attach_type == "scope":
        if r.attach_stage is T:
            return attach_leaf(r)
        r = r.attach_stage
    return None


def _check_region(st, T, leaf, bounds, err):
    tb, sb = bounds[T], bounds[st]
    leaves = T.leaf_iter_vars
    a = leaves.index(leaf)
    inner = {iv.var: loop_range(tb.ranges, iv) for iv in leaves[a + 1:]}
    vals = pass_up_index(T, tb.ranges, leaf_values(T, tb.ranges))
    outer = {iv.var: loop_range(tb.ranges, iv) for iv in leaves[:a + 1]}
    for k, iv in enumerate(T.op.axis):
        lo, hi = arith.bound(vals[iv], inner)
        ext = arith.simplify(hi - lo + 1) if lo is not None and hi is not None else None
        if ext is None or not is_const_int(arith.simplify(sb.region_min[k] - lo), 0) or \
                not is_const_int(arith.simplify(E.convert(sb.alloc_shape[k]) - ext), 0):
            raise err(f"its region along axis {k} is not the part of '{T.name}' one iteration "
                      f"of '{leaf.var.name}' writes")
        top = arith.bound(hi, outer)[1]
        limit = E.convert(T.op.shape[k]) - 1
        if top is None or not is_const_int(arith.simplify(E.maximum(top, limit) - limit), 0):
            raise err(f"along axis {k} it would be computed past the end of '{T.name}' (a split "
                      "of it that does not divide the axis)")
