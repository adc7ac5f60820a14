"""rfactor: turn one leaf of a reduction into a spatial axis of a new partial-result stage.

Given C[i] = sum(A[i, k], k) with k split into (ko, ki), `rfactor(C, ki)` makes
C.rf[ki, i] = sum(A[i, ko*f + ki], ko) and C[i] = sum(C.rf[v, i], v). Leaves derived from
the same reduction roots as the factored axis become the new stage's reduction axes (with
guards for non-divisible splits); other reduction roots are kept whole. The original stage is
reset, as its loops changed meaning. A reduction over a tuple (argmax) factors into a
partial stage with one output per tuple element, and `rfactor` returns their list.
"""
from __future__ import annotations

from ..errors import ScheduleError
from ..ir import expr as E
from ..ir.expr import Range, Var
from ..ir.visitor import free_vars, substitute
from ..te.tensor import ComputeOp, IterVar, Tensor
from .bound import pass_down, pass_up_conditions, pass_up_index
from .relations import root_axes


def rfactor(sched, tensor, axis, factor_axis=0):
    if not isinstance(tensor, Tensor):
        raise ScheduleError(f"rfactor: expected a tensor, got {tensor!r}")
    st = sched[tensor]
    op = st.op
    if not isinstance(op, ComputeOp) or not isinstance(op.body, E.Reduce):
        raise ScheduleError(f"rfactor: stage '{op.name}' is not a reduction")
    st.check_leaf("rfactor", axis)
    if axis.kind != "reduce":
        raise ScheduleError(f"rfactor: stage '{op.name}': axis '{axis.var.name}' is not a reduction axis")
    if not 0 <= factor_axis <= len(op.axis):
        raise ScheduleError(f"rfactor: factor_axis must be in [0, {len(op.axis)}], got {factor_axis}")
    red = op.body
    roots = root_axes(st, axis)
    ranges = pass_down(st, {iv: iv.dom for iv in list(op.axis) + list(op.reduce_axis)})
    if not isinstance(ranges[axis].extent, E.IntImm):
        raise ScheduleError(f"rfactor: stage '{op.name}': axis '{axis.var.name}' needs a constant "
                            f"extent (got {ranges[axis].extent}); split the reduction by a constant first")
    derived = [iv for iv in st.leaf_iter_vars if iv.kind == "reduce" and iv is not axis
               and set(root_axes(st, iv)) <= set(roots)]
    kept = [iv for iv in op.reduce_axis if iv not in roots]

    # the new stage's axes
    fv = IterVar(Range(E.const(0), ranges[axis].extent), Var(axis.var.name + ".v"), "data_par")
    spatial = [IterVar(iv.dom, Var(iv.var.name, iv.var.dtype), "data_par") for iv in op.axis]
    new_red = [IterVar(Range(E.const(0), ranges[iv].extent), Var(iv.var.name), "reduce") for iv in derived]
    new_red += kept
    leaf_vals = {axis: fv.var}
    leaf_vals.update({iv: n.var for iv, n in zip(derived, new_red)})
    for iv in st.leaf_iter_vars:
        leaf_vals.setdefault(iv, iv.var)
    vals = pass_up_index(st, ranges, leaf_vals)
    vmap = {r.var: vals[r] for r in roots}
    vmap.update({o.var: n.var for o, n in zip(op.axis, spatial)})
    mine = {fv.var} | {n.var for n in new_red}
    loop_vars = {iv.var for iv in st.all_iter_vars}
    conds = [c for c, is_red in pass_up_conditions(st, ranges, vals)
             if is_red and free_vars(c) & loop_vars <= mine]
    cond = substitute(red.condition, vmap)
    for c in conds:
        cond = E.And(cond, c)   # likely(): loop partitioning peels the ragged last step
    n = len(red.sources)
    src = tuple(substitute(x, vmap) for x in red.sources)
    rf_axes = list(spatial)
    rf_axes.insert(factor_axis, fv)
    rf_bodies = tuple(E.Reduce(red.combiner, src if n > 1 else src[0], tuple(new_red), cond,
                               None, k) for k in range(n))
    rf_shape = list(op.shape)
    rf_shape.insert(factor_axis, fv.dom.extent)
    rf_op = ComputeOp(op.name + ".rf", op.tag, op.attrs, rf_axes, rf_bodies, rf_shape)

    # the original stage now reduces the factored dimension
    rv = IterVar(Range(E.const(0), fv.dom.extent), Var(axis.var.name + ".v"), "reduce")
    idx = [iv.var for iv in op.axis]
    idx.insert(factor_axis, rv.var)
    loads = tuple(E.ProducerLoad(t, tuple(idx)) for t in rf_op.outputs)
    bodies = tuple(E.Reduce(red.combiner, loads if n > 1 else loads[0], (rv,), E.const(True),
                            red.init, k) for k in range(n))
    new_op = ComputeOp(op.name, op.tag, op.attrs, op.axis, bodies, op.shape)
    sched.insert_stage(rf_op, st)
    sched.replace_op(st, new_op)
    st.all_iter_vars = list(op.axis) + [rv]
    st.leaf_iter_vars = list(st.all_iter_vars)
    st.relations = []
    st.iter_var_attrs = {}
    sched.trace.append(f"rfactor({op.name}, {axis.var.name}, factor_axis={factor_axis})")
    return list(rf_op.outputs) if n > 1 else rf_op.output(0)
