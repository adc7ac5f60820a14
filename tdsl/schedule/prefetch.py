"""The statements of `Stage.prefetch(tensor, iv, offset)`: at the top of loop `iv`'s body,
the part of `tensor` that iteration `iv + offset` reads, fetched into the cache.

The region is bound inference's: the stage's reads of the tensor (through inlined
producers) bounded over the loops inside `iv`, with `iv` shifted by `offset`. Where the
region at `iv + offset` is the one at `iv + offset - 1` moved along a single dimension by
less than its extent (a stencil's input rows under a row loop), only the part coming
into it is fetched: the earlier iterations fetched the rest. The region is clipped to the
tensor's buffer, so a prefetch never names memory outside it; each row of it becomes one
`Prefetch` of its contiguous run, the code generator issuing one fetch per cache line."""
from __future__ import annotations

from typing import List, Optional, Tuple

from .. import arith
from ..errors import ScheduleError
from ..ir import expr as E
from ..ir import stmt as S
from ..ir.visitor import substitute
from ..te.tensor import PlaceholderOp
from .bound import leaf_values, loop_range, pass_up_index, reads_of


def _box(reads, root_map, var, shift, inner) -> Optional[List[Tuple[E.Expr, E.Expr]]]:
    """Inclusive (lo, hi) per dimension of the reads with `var` at `var + shift`."""
    box = None
    for idx in reads:
        bs = [arith.bound(substitute(substitute(i, root_map), {var: var + shift}), inner)
              for i in idx]
        if any(lo is None or hi is None for lo, hi in bs):
            return None
        box = bs if box is None else [
            (arith.simplify(E.minimum(a, lo)), arith.simplify(E.maximum(b, hi)))
            for (a, b), (lo, hi) in zip(box, bs)]
    return box


def _incoming(now, before):
    """The part of box `now` not in box `before` when that is a box (`now` moved along one
    dimension by less than its extent), None when nothing moved, else `now` whole."""
    moving = []
    for k, ((lo1, hi1), (lo0, hi0)) in enumerate(zip(now, before)):
        d = arith.simplify(lo1 - lo0)
        if not (isinstance(d, E.IntImm) and arith.equal(hi1 - hi0, d)):
            return now
        if d.value:
            moving.append((k, d.value))
    if not moving:
        return None
    if len(moving) > 1:
        return now
    k, d = moving[0]
    (lo1, hi1), (lo0, hi0) = now[k], before[k]
    ext = arith.const_bound(hi1 - lo1)[1]
    if ext is None or abs(d) > ext:
        return now
    out = list(now)
    out[k] = (arith.simplify(hi0 + 1), hi1) if d > 0 else (lo1, arith.simplify(lo0 - 1))
    return out


def check_prefetch_axes(st):
    """A prefetch stays on the loop it was asked at: split or fused later, it is lost."""
    for iv, attr in st.iter_var_attrs.items():
        if attr.prefetches and iv not in st.leaf_iter_vars:
            raise ScheduleError(f"prefetch: stage '{st.name}': axis '{iv.var.name}' was split or "
                                "fused after the prefetch was asked; prefetch at one of the "
                                "loops that split/fuse returned")


def prefetch_stmts(low, st, iv) -> List[S.Stmt]:
    """The prefetches `st` asked for at its leaf loop `iv` (`low`: the ScheduleLowering)."""
    attr = st.iter_var_attrs.get(iv)
    if attr is None or not attr.prefetches:
        return []
    if attr.kind is S.ForKind.VECTORIZED or attr.thread is not None:
        raise ScheduleError(f"prefetch: stage '{st.name}': axis '{iv.var.name}' is "
                            f"{attr.kind.value}; prefetch at a serial or parallel loop around it")
    b = low.bounds[st]
    leaves = st.leaf_iter_vars
    vals = pass_up_index(st, b.ranges, leaf_values(st, b.ranges))
    root_map = {r.var: vals[r] for r in list(st.op.axis) + list(st.op.reduce_axis)}
    inner = {lv.var: loop_range(b.ranges, lv) for lv in leaves[leaves.index(iv) + 1:]}
    bodies = low.bodies_of(st)
    out = []
    for tensor, offset in attr.prefetches:
        src = low.sched.stage_map.get(tensor.op)
        reads = [] if src is None else reads_of(bodies, low.sched, src)
        if not reads:
            raise ScheduleError(f"prefetch: stage '{st.name}' does not read '{tensor.name}'")
        if src.attach_type == "inline" and not isinstance(src.op, PlaceholderOp) \
                and src not in low.arg_stages:
            raise ScheduleError(f"prefetch: '{tensor.name}' is inlined into '{st.name}': it has "
                                "no memory to prefetch")
        if src.attach_type == "scope" and src not in low.arg_stages:
            raise ScheduleError(f"prefetch: '{tensor.name}' is computed at a loop of "
                                f"'{src.attach_stage.name}' (compute_at), in cache by design; "
                                "prefetch inputs and stages computed at root")
        now = _box(reads, root_map, iv.var, offset, inner)
        before = _box(reads, root_map, iv.var, offset - 1, inner)
        if now is None or before is None:
            raise ScheduleError(f"prefetch: stage '{st.name}': cannot bound the region of "
                                f"'{tensor.name}' it reads in one iteration of '{iv.var.name}'")
        region = _incoming(now, before)
        if region is not None:
            out.append(_fetch(low.buffer(src, tensor.value_index), low.offset(src), region,
                              f"{iv.var.name}.pf"))
    return out


def _fetch(buf, origin, region, prefix) -> S.Stmt:
    """Loops over the rows of `region` (clipped to `buf`), one Prefetch per row's run."""
    clipped = []
    for (lo, hi), o, n in zip(region, origin, buf.shape):
        lo, hi = arith.simplify(lo - o), arith.simplify(hi - o)
        clipped.append((arith.simplify(E.maximum(lo, E.const(0))),
                        arith.simplify(E.minimum(hi, n - 1))))
    lo, hi = clipped[-1]
    rows = [E.Var(f"{prefix}{k}", "int32") for k in range(len(clipped) - 1)]
    body = S.Prefetch(buf, tuple(rows) + (lo,),
                      arith.simplify(E.maximum(hi - lo + 1, E.const(0))))
    for v, (rlo, rhi) in reversed(list(zip(rows, clipped[:-1]))):
        body = S.For(v, rlo, arith.simplify(rhi - rlo + 1), S.ForKind.SERIAL, body)
    return body
