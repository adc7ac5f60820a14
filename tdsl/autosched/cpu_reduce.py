"""CPU rule for reductions: vectorized along the contiguous axis (rfactor over the lanes when
that is the reduction axis, with several vectors of independent partial sums, added as
vectors by a second rfactor before one vector's lanes are summed); long
reductions with too few outputs to keep the cores busy are split by rfactor into parallel
partial sums."""
from __future__ import annotations

from .analysis import StageInfo
from .cpu_base import BIG, PAR_MIN_WORK, RFACTOR_MIN_REDUCE
from .cpu_groups import attach_members, members_of
from .rule import Rule


class Reduction(Rule):
    name = "reduction"

    def applies(self, ctx, st):
        return ctx.infos[st].is_reduction

    def apply(self, ctx, st):
        reduction(ctx, st, ctx.level.get(st, 0), members_of(ctx, st))


def reduction(ctx, st, lvl, members):
    info = ctx.infos[st]
    axes = list(st.op.axis)
    work = info.outputs(BIG) * info.reduce_size(BIG)
    if not members and info.outputs(BIG) < ctx.chunks and info.reduce_size(BIG) >= RFACTOR_MIN_REDUCE \
            and ctx.params.parallel:
        parallel_rfactor(ctx, st)
        return
    if lvl:
        loop = ctx.row_loop(st, axes[:lvl], info.extents[:lvl], work)
        attach_members(ctx, st, loop, members, lvl)
        ctx.reduce_inner(st, axes[lvl:], None)
        return
    ctx.reduce_inner(st, axes, work)


def parallel_rfactor(ctx, st):
    info = ctx.infos[st]
    raxes = list(st.op.reduce_axis)
    # the outermost reduction axis with enough steps: splitting it keeps the inner one
    # contiguous inside each task
    n = next((i for i, e in enumerate(info.rextents) if e is None or e >= ctx.chunks), len(raxes) - 1)
    k = raxes[n]
    ko, ki = st.split(k, nparts=ctx.chunks)
    rf = ctx.sched.rfactor(st.op.output(0), ko)
    rst = ctx.sched[rf]
    rinfo = StageInfo(rf.op)
    ctx.infos[rst] = rinfo
    ctx.rec.add(st, "rfactor-parallel", f"split({k.var.name}, nparts={ctx.chunks}); rfactor",
                f"{info.outputs(BIG)} output(s) and {info.reduce_size(BIG)} reduction steps: "
                "partial sums in parallel, then one short sum")
    ctx.reduce_inner(rst, list(rst.op.axis), rinfo.outputs(BIG) * rinfo.reduce_size(BIG) + PAR_MIN_WORK)


REDUCTION = Reduction()
