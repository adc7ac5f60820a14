"""The stages of a compute with update definitions (`tdsl.update`): which stages form a
chain, and what the schedule may do with an update's loops.

A chain is the pure definition's stage followed by one stage per update, all writing one
buffer. The pure stage stands for the whole chain where a placement is concerned
(compute_at, compute_root: Halide places a Func, not its definitions); each update is
scheduled on its own loops. Its pure variables are independent (`tdsl.update` allows reads
of the state only at their own index), so their loops may be split, reordered,
vectorized, run in parallel or bound to GPU threads freely. A reduction variable's
iterations run in order: its loops may run in parallel (or as lanes, or GPU threads) only
where the update is race-free along it, or where `atomic()` makes each element's
read-modify-write indivisible on an associative update; and loops of reduction variables
keep their relative order unless the update is race-free along them or atomic.
"""
from __future__ import annotations

from typing import Dict, List

from ..errors import LoweringError, ScheduleError
from ..ir.atomic import ATOMIC_DTYPES
from ..te.update import UpdateOp
from .relations import Split, root_axes


def update_chains(sched) -> Dict[object, List[object]]:
    """{pure stage: [its update stages, in order]} for every chain in `sched`."""
    out: Dict[object, List[object]] = {}
    for st in sched.stages:
        if isinstance(st.op, UpdateOp):
            base = sched.stage_map[st.op.base]
            out.setdefault(base, []).append(st)
    for ups in out.values():
        ups.sort(key=lambda s: s.op.k)
    return out


def chain_arg(chains, chain_of, k, a, st):
    """The stage whose buffer argument `k` (tensor `a` of stage `st`) is: a chain's pure
    stage for the tensor of its last update; the tensors before it are no values any
    buffer holds once the chain ran."""
    base = chain_of.get(st, st)
    ups = chains.get(base)
    if ups and st is not ups[-1]:
        raise LoweringError(f"argument {k} '{a.name}' is '{base.name}' before its update "
                            f"{ups[-1].op.k}; pass the tensor the last tdsl.update returned")
    return base


def check_chain_readers(sched, chains, chain_of):
    """Outside its chain, a stage with updates is read through its last update."""
    for st in sched.stages:
        for p in sched.producers(st):
            base = chain_of.get(p, p)
            ups = chains.get(base)
            if ups and p is not ups[-1] and chain_of.get(st) is not base:
                raise LoweringError(
                    f"stage '{st.name}' reads '{base.name}' before its update "
                    f"{ups[-1].op.k} ('{p.name}'); read the tensor the last tdsl.update "
                    "returned")


def reduce_roots(stage, iv) -> list:
    """The root reduction variables leaf `iv` of `stage` derives from."""
    return [r for r in root_axes(stage, iv) if r.kind == "reduce"]


def _dependent(stage, roots):
    """The first of `roots` along which the update is not race-free, or None."""
    return next((r for r in roots if not stage.op.race_free(r)), None)


def check_concurrent(stage, prim, iv):
    """Raises the ScheduleError of `prim` (parallel, vectorize, bind) on leaf `iv` of
    update stage `stage` unless its iterations may run at once."""
    if any(isinstance(rel, Split) and rel.outer is iv and rel.nparts == 1
           for rel in stage.relations):
        return          # one iteration: nothing runs at once (a serial update on one thread)
    roots = reduce_roots(stage, iv)
    bad = _dependent(stage, roots)
    if bad is None or stage.atomics:
        return
    op = stage.op
    why = (f"{prim}: stage '{op.name}': reduction variable '{bad.var.name}' of the update "
           f"runs in order: its iterations may write the same element of '{op.base.name}' "
           "or read one another writes")
    if op.combine_op is None:
        raise ScheduleError(why + "; the update is not an associative update of the element "
                            "it writes (old + e, old * e, min(old, e), max(old, e)), so it "
                            "must stay serial")
    raise ScheduleError(why + f"; call atomic() on the update first (its '{op.combine_op}' "
                        "is associative), or rfactor it (schedule.rfactor)")


def check_atomic(stage):
    """Raises unless `stage` is an update that atomics can make concurrent."""
    op = stage.op
    if not isinstance(op, UpdateOp):
        raise ScheduleError(f"atomic: stage '{op.name}' is not an update definition; atomics "
                            "apply to an update (s[T].update(k).atomic())")
    if op.combine_op is None:
        raise ScheduleError(f"atomic: stage '{op.name}': the update is not an associative "
                            "update of the element it writes (old + e, old * e, min(old, e), "
                            "max(old, e), with e and the condition free of the state), so no "
                            "atomic operation computes it")
    if op.dtype not in ATOMIC_DTYPES:
        raise ScheduleError(f"atomic: stage '{op.name}': {op.dtype} has no atomic operations; "
                            f"use one of {', '.join(ATOMIC_DTYPES)}")


def canonical_reduce_order(stage) -> list:
    """The reduction leaves of `stage` in the order that runs the domain in Halide's order:
    the initial loops with each split and fuse applied in place, no reorder."""
    order = [iv for iv in stage.op.axis + stage.op.reduce_axis]
    for rel in stage.relations:
        if isinstance(rel, Split):
            k = order.index(rel.parent)
            order[k:k + 1] = [rel.outer, rel.inner]
        else:
            k = order.index(rel.outer)
            if order.index(rel.inner) == k + 1:
                order[k:k + 2] = [rel.fused]
            else:
                order.remove(rel.inner)
                order[k] = rel.fused
    return [iv for iv in order if iv.kind == "reduce"]


def check_order(stage, prim, leaves):
    """Raises the ScheduleError of `prim` when `leaves` (a new loop order of update stage
    `stage`) runs two loops of reduction variables in another order than Halide's, unless
    the update is race-free along both or atomic."""
    if stage.atomics:
        return
    want = [iv for iv in canonical_reduce_order(stage) if iv in leaves]
    have = [iv for iv in leaves if iv.kind == "reduce"]
    for k, iv in enumerate(have):
        w = want.index(iv)
        for later in have[k + 1:]:
            if want.index(later) > w:
                continue
            bad = _dependent(stage, reduce_roots(stage, iv) + reduce_roots(stage, later))
            if bad is None:
                continue
            raise ScheduleError(
                f"{prim}: stage '{stage.op.name}': loop '{later.var.name}' would run outside "
                f"'{iv.var.name}', which changes the order of the update's reduction "
                f"(reduction variable '{bad.var.name}' runs in order: the first listed "
                "innermost); reorder pure variables only, or make the update atomic()")
