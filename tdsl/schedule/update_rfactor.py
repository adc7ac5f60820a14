"""rfactor of an update definition (Halide's `f.update(k).rfactor(r, v)`).

For an associative update `f[idx(r)] = f[idx(r)] <op> e(r)` whose reduction variable `r`
is split into `(ro, ri)`, `rfactor(f, ri)` makes an intermediate stage with one more
dimension `v` for `ri`'s values, `f.rf[v, ...]`: its pure definition is the identity of
`<op>`, and its update is the original one with `ri` replaced by the pure variable `v`
(`f.rf[v, idx(ro * n + v)] <op>= e(ro * n + v)` over `ro`). Each `v` is then independent:
a parallel histogram is one partial histogram per `v`. The original update becomes the
merge, `f[x] = f[x] <op> f.rf[v, x]` over every element `x` of `f` and reduction variable
`v`. Reduction variables not derived from `r`'s roots stay in the intermediate whole.
"""
from __future__ import annotations

import numpy as np

from .. import dtype as dt
from ..errors import ScheduleError
from ..ir import expr as E
from ..ir.expr import Range, Var
from ..ir.visitor import free_vars, substitute
from ..te.tensor import ComputeOp, IterVar
from ..te.update import UpdateOp
from .bound import pass_down, pass_up_conditions, pass_up_index
from .updates import reduce_roots

_COMBINE = {"add": E.Add, "mul": E.Mul, "min": E.minimum, "max": E.maximum}


def _identity(op, dtype):
    if op == "add":
        return E.const(0, dtype)
    if op == "mul":
        return E.const(1, dtype)
    high = op == "min"
    if dt.is_float(dtype):
        return E.const(float("inf") if high else float("-inf"), dtype)
    info = np.iinfo(dtype)
    return E.const(int(info.max if high else info.min), dtype)


def rfactor_update(sched, st, axis, factor_axis=0):
    """Factors leaf `axis` of update stage `st` into an intermediate stage (its tensor is
    returned); `st` becomes the merge."""
    op = st.op
    prim = "rfactor"
    st.check_leaf(prim, axis)
    if axis.kind != "reduce":
        raise ScheduleError(f"rfactor: stage '{op.name}': axis '{axis.var.name}' is a pure variable; rfactor takes a "
                        "reduction variable of the update")
    comb = op.combine_op
    if comb is None:
        raise ScheduleError(f"rfactor: stage '{op.name}': the update is not an associative update of the element it "
                        "writes (old + e, old * e, min(old, e), max(old, e)); its partial "
                        "results could not be merged")
    ndim = len(op.shape)
    if not 0 <= factor_axis <= ndim:
        raise ScheduleError(f"rfactor: stage '{op.name}': factor_axis must be in [0, {ndim}], got {factor_axis}")
    roots = reduce_roots(st, axis)
    ranges = pass_down(st, {iv: iv.dom for iv in list(op.axis) + list(op.reduce_axis)})
    ext = ranges[axis].extent
    if not isinstance(ext, E.IntImm):
        raise ScheduleError(f"rfactor: stage '{op.name}': axis '{axis.var.name}' needs a constant extent (got {ext}); "
                        "split the reduction by a constant first")
    derived = [iv for iv in st.leaf_iter_vars if iv.kind == "reduce" and iv is not axis
               and set(reduce_roots(st, iv)) <= set(roots)]
    kept = [iv for iv in op.reduce_axis if iv not in roots]

    # the intermediate: identity, then the update with `axis` as a pure variable
    base = op.base
    fv = Var(axis.var.name + ".v")
    new_red = [IterVar(Range(E.const(0), ranges[iv].extent), Var(iv.var.name), "reduce")
               for iv in derived] + kept
    leaf_vals = {axis: fv}
    leaf_vals.update({iv: n.var for iv, n in zip(derived, new_red)})
    for iv in st.leaf_iter_vars:
        leaf_vals.setdefault(iv, iv.var)
    vals = pass_up_index(st, ranges, leaf_vals)
    pure = [Var(iv.var.name) for iv in op.axis]
    vmap = {r.var: vals[r] for r in roots}
    vmap.update({iv.var: p for iv, p in zip(op.axis, pure)})
    mine = {fv} | {n.var for n in new_red}
    loop_vars = {iv.var for iv in st.all_iter_vars}
    conds = [c for c, red in pass_up_conditions(st, ranges, vals)
             if red and free_vars(c) & loop_vars <= mine]
    shape = list(base.shape)
    shape.insert(factor_axis, ext)
    names = [f"ax{d}" for d in range(len(shape))]
    rf_axis = [IterVar(Range(E.const(0), E.convert(n)), Var(name), "data_par")
               for name, n in zip(names, shape)]
    rf_base = ComputeOp(base.name + ".rf", base.tag, None, rf_axis,
                        _identity(comb, op.dtype), shape)
    rf_state = rf_base.output(0)
    idx = [substitute(i, vmap) for i in op.index]
    idx.insert(factor_axis, fv)
    dims = [d + (d >= factor_axis) for d in op.pure_dims] + [factor_axis]
    # the split's guard first: the condition may read at the index it keeps in range
    where = substitute(op.where, vmap)
    for c in reversed(conds):
        where = E.And(c, where)
    delta = substitute(op.delta(), vmap)
    value = _COMBINE[comb](E.ProducerLoad(rf_state, tuple(idx)), delta)
    rf_pure = [IterVar(Range(E.const(0), E.convert(shape[d])), v, "data_par")
               for v, d in zip(pure + [fv], dims)]
    rf_upd = UpdateOp(rf_base, rf_base, 0, rf_pure, list(reversed(new_red)), idx, value,
                      where, dims)

    # the merge: every element of the stage combined with its partial results
    rv = IterVar(Range(E.const(0), ext), Var(axis.var.name + ".v"), "reduce")
    mpure = [Var(f"ax{d}") for d in range(ndim)]
    at = list(mpure)
    at.insert(factor_axis, rv.var)
    mvalue = _COMBINE[comb](E.ProducerLoad(op.state, tuple(mpure)),
                            E.ProducerLoad(rf_upd.outputs[0], tuple(at)))
    maxis = [IterVar(Range(E.const(0), E.convert(n)), v, "data_par")
             for v, n in zip(mpure, base.shape)]
    merge = UpdateOp(base, op.prev, op.k, maxis, [rv], mpure, mvalue, E.const(True),
                     range(ndim))
    sched.insert_stage(rf_base, st)
    sched.insert_stage(rf_upd, st)
    sched.replace_op(st, merge)
    st.all_iter_vars = list(maxis) + [rv]
    st.leaf_iter_vars = list(st.all_iter_vars)
    st.relations = []
    st.iter_var_attrs = {}
    st.atomics = False
    sched.trace.append(f"rfactor({op.name}, {axis.var.name}, factor_axis={factor_axis})")
    return rf_upd.outputs[0]
