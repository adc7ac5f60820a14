"""The GPU rule for rows: reductions that only feed one elementwise stage, per row of it
(softmax's max and sum, layer norm's mean and variance), are computed by the block that
writes the row. One block per row: its threads reduce the row together (as in
`gpu_reduce`), keep the result in shared memory and then write the row's outputs. The row
is read from DRAM once; the later passes over it hit the cache, and there is one kernel
instead of one per reduction plus one for the outputs (torch's softmax and layer norm work
the same way).

A stage S of rank d is a member of owner O's row group when every read of S, directly or
through inlined stages, is at the reader's own first d loop variables, and all those
readers end in O (or in other members of O's group): O's row (i_1..i_d) then needs exactly
S's element (i_1..i_d)."""
from __future__ import annotations

from typing import Dict, List, Tuple

from ..te import thread_axis
from .gpu_reduce import row_threads, wants_cross_thread
from .rule import Rule


def _aligned(tensor, reader_info, d) -> bool:
    """Every read of `tensor` in the reader is at the reader's own first d loop variables."""
    if len(reader_info.axes) < d:
        return False
    return all(all(ld.index_is_axis(n, reader_info.axes[n]) for n in range(d))
               for ld in reader_info.loads_of(tensor))


def _row_readers(st, d, infos, readers, inlined):
    """The non-inlined stages that read `st` per row (through inlined stages); None when
    some read is not at the reader's own first d loop variables."""
    out, todo, seen = [], [st], set()
    while todo:
        p = todo.pop()
        for c in readers[p]:
            if not _aligned(p.op.output(0), infos[c], d):
                return None
            if c in inlined:
                if c not in seen:
                    seen.add(c)
                    todo.append(c)
            elif c not in out:
                out.append(c)
    return out


def row_groups(s, comp, infos, readers, inlined, target, params) -> Dict[object, Tuple[int, List]]:
    """owner -> (d, members, consumers first): the row groups of the schedule."""
    owner_of: Dict[object, object] = {}
    groups: Dict[object, Tuple[int, List]] = {}
    for st in reversed(comp):
        info = infos[st]
        if st in inlined or st.is_output or not info.is_reduction or info.is_reuse_reduction():
            continue
        d = len(info.axes)
        if d == 0 or not info.reduce_contiguous() or not wants_cross_thread(info, target, params):
            continue
        rr = _row_readers(st, d, infos, readers, inlined)
        if not rr:
            continue
        owners = {owner_of.get(c, c) for c in rr}
        if len(owners) != 1:
            continue
        (owner,) = owners
        oinfo = infos[owner]
        if oinfo.is_reduction or len(oinfo.axes) <= d or owner in owner_of:
            continue
        # the row loop fuses the first d axes: bound inference cannot bound the members'
        # region at a fused loop of a symbolic extent (their shared buffers would be
        # whole rows of a run-time length)
        if d > 1 and None in oinfo.extents[:d]:
            continue
        if groups.get(owner, (d,))[0] != d:
            continue
        owner_of[st] = owner
        groups.setdefault(owner, (d, []))[1].append(st)
    return groups


def schedule_row_group(s, owner, d, members, infos, target, params, rec):
    """One block per row of `owner`: members reduce the row across the block's threads (in
    producer order), then the threads write the row's outputs."""
    T = max(row_threads(infos[m], target, params) for m in members)
    axes = list(owner.op.axis)
    row = owner.fuse(*axes[:d]) if d > 1 else axes[0]
    rest = owner.fuse(*axes[d:]) if len(axes) - d > 1 else axes[d]
    ro, ri = owner.split(rest, factor=T)
    owner.bind(row, thread_axis("blockIdx.x"))
    owner.bind(ri, thread_axis("threadIdx.x"))
    names = ", ".join(f"'{m.op.name}'" for m in reversed(members))
    rec.add(owner, "row-group", f"one block per row ({row.var.name}), {T} threads along it; "
            f"{names} computed at the row",
            "the row's reductions feed only this stage, row by row: the block reduces the row, "
            "keeps the results in shared memory and writes the outputs, reading the row from "
            "DRAM once, in one kernel")
    for m in reversed(members):
        ms = m
        ms.compute_at(owner, row)
        raxes = list(ms.op.reduce_axis)
        k = ms.fuse(*raxes) if len(raxes) > 1 else raxes[0]
        ko, ki = ms.split(k, factor=T)
        ms.reorder(ki, ko)
        ms.bind(ki, thread_axis("threadIdx.x"))
        rec.add(m, "cross-thread", f"compute_at({owner.op.name}, {row.var.name}); {T} threads "
                f"reduce the row; bind {ki.var.name} to threadIdx.x, {ko.var.name} serial",
                "coalesced reads, partial results in registers, combined by warp shuffles and "
                "shared memory")


class RowGroup(Rule):
    """The owner of a row group (`row_groups`): one block per row computes the row's
    reductions, then its outputs."""
    name = "row-group"

    def applies(self, ctx, st):
        return st in ctx.row_groups

    def apply(self, ctx, st):
        schedule_row_group(ctx.sched, st, *ctx.row_groups[st], ctx.infos, ctx.target,
                           ctx.params, ctx.rec)


ROW_GROUP = RowGroup()
