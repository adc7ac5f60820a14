"""CPU rule for elementwise stages: vectorized and unrolled along the last axis (fused with
the axes before it when too short for a vector; for a transpose, square tiles transposed
in registers); outer loops fused until there are enough
parallel tasks (tiling.parallel_chunks), never fusing a loop whose tiles are ragged (the
fused loop would keep the tail's guard in its body; alone, loop partitioning peels the
tail off). The stages computed per row of it (`cpu_groups`) are attached to its row loop."""
from __future__ import annotations

from .. import dtype as dt
from .. import tiling
from ..arith import linear_coeff, simplify
from ..ir.expr import FloorMod, IntImm
from ..ir.visitor import substitute, uses_var
from ..schedule.store_with import store_with_holds
from ..te.tensor import ComputeOp
from .cpu_base import BIG
from .cpu_groups import attach_members, members_of
from .rule import Rule


class Elementwise(Rule):
    name = "elementwise"

    def applies(self, ctx, st):
        return not ctx.infos[st].is_reduction

    def apply(self, ctx, st):
        elementwise(ctx, st, ctx.level.get(st, 0), members_of(ctx, st))


def elementwise(ctx, st, lvl, members):
    info = ctx.infos[st]
    axes, exts = list(st.op.axis), list(info.extents)
    if not axes:
        return
    dtype = st.op.output(0).dtype
    work = info.outputs(BIG)
    if lvl:
        loop = ctx.row_loop(st, axes[:lvl], exts[:lvl], work)
        if len(axes) > lvl:
            ctx.vector_split(st, axes[-1], exts[-1], dtype)
        attach_members(ctx, st, loop, members, lvl)
        store_in_output(ctx, st, members)
        return
    if transposed(ctx, st, info, dtype, work):
        return
    axes, exts = trailing_run(ctx, st, axes, exts, dtype)
    vs = ctx.vector_split(st, axes[-1], exts[-1], dtype)
    loops = [(iv, e, False) for iv, e in zip(axes[:-1], exts[:-1])]
    if vs is not None:
        loops.append(vs)
    else:
        loops.append((axes[-1], exts[-1], False))
    ctx.parallel_prefix(st, loops, work, "elementwise")


def trailing_run(ctx, st, axes, exts, dtype):
    """(axes, extents) with the last axes fused into one loop when the last alone is too
    short for a vector and they are together: a grid's (z, c) cells of 12 x 2 floats are
    one contiguous run of 24 (row-major: the trailing axes of a stage are contiguous), a
    vector and a half where the channel axis alone left the loop nest scalar."""
    if exts[-1] is None or not ctx.can_vectorize(dtype) or \
            tiling.worth_a_vector(ctx.target, exts[-1], dtype):
        return axes, exts
    k, n = len(axes) - 1, exts[-1]
    while k > 0 and exts[k - 1] is not None and not tiling.worth_a_vector(ctx.target, n, dtype):
        k -= 1
        n *= exts[k]
    if k == len(axes) - 1 or not tiling.worth_a_vector(ctx.target, n, dtype):
        return axes, exts
    fused = st.fuse(*axes[k:])
    names = ", ".join(iv.var.name for iv in axes[k:])
    ctx.rec.add(st, "vectorize", f"fuse({names})", f"the last axis ({exts[-1]}) is too short "
                f"for a vector: the trailing axes are one contiguous run of {n}")
    return axes[:k] + [fused], exts[:k] + [n]


def transposed(ctx, st, info, dtype, work) -> bool:
    """A transpose (an input read contiguously along another axis than the output's
    last, and strided along the last, itself or through inlined stages): square tiles,
    the other axis split by the tile and unrolled just outside the vector loop, so the
    backend reads each tile as rows and transposes it in registers instead of
    gathering every vector. The contiguous index may also be that axis modulo a
    multiple of the tile (`layout.from_blocked`'s `ch % bn`): within a tile it is the
    axis plus a constant all the same."""
    axes, exts = info.axes, info.extents
    if not ctx.can_vectorize(dtype) or len(axes) < 2:
        return False
    ranges = {iv.var: iv.dom for iv in axes}
    last = axes[-1].var
    for tensor, idx in memory_loads(ctx, st):
        idx = [simplify(i, ranges) for i in idx]
        if not idx or dt.itemsize(tensor.dtype) != dt.itemsize(dtype) or \
                not any(uses_var(i, last) for i in idx[:-1]) or uses_var(idx[-1], last):
            continue
        k = next((k for k, iv in enumerate(axes[:-1])
                  if (linear_coeff(idx[-1], iv.var, ranges) or (0,))[0] == 1), None)
        period = None
        if k is None:
            k, period = _modulo_axis(idx[-1], axes[:-1], ranges)
        # the rows' extent must be known (tiles that divide it); the columns' may be
        # symbolic (a sequence): their ragged last tile is peeled off
        n = 0 if k is None or exts[k] is None else \
            tiling.transpose_tile(ctx.target, exts[k], exts[-1] or BIG, dtype)
        if n and (period is None or period % n == 0):
            break
    else:
        return False
    vo, vi = st.split(axes[-1], factor=n)
    ko, ki = st.split(axes[k], factor=n)
    outer = [ko if iv is axes[k] else iv for iv in axes[:-1]] + [vo]
    st.reorder(*outer, ki, vi)
    st.unroll(ki)
    st.vectorize(vi)
    ctx.rec.add(st, "vectorize", f"split({last.name}, {n}), split({axes[k].var.name}, "
                f"{n}); unroll {axes[k].var.name}.inner; vectorize",
                f"reads '{tensor.name}' transposed: {n} x {n} tiles transposed in registers")
    oext = [e // n if i == k else e for i, e in enumerate(exts[:-1])] + \
        [None if exts[-1] is None else -(-exts[-1] // n)]
    ragged = [False] * (len(outer) - 1) + [exts[-1] is None or exts[-1] % n != 0]
    ctx.parallel_prefix(st, list(zip(outer, oext, ragged)), work, "elementwise")
    return True


def _modulo_axis(e, axes, ranges):
    """(position in `axes`, m) when `e` is an axis plus a constant modulo a constant m
    (a channel within its block), else (None, None)."""
    if not isinstance(e, FloorMod) or not isinstance(e.b, IntImm):
        return None, None
    k = next((k for k, iv in enumerate(axes) if (linear_coeff(e.a, iv.var, ranges) or (0,))[0] == 1), None)
    if k is None or any(uses_var(e.a, iv.var) for i, iv in enumerate(axes) if i != k):
        return None, None
    return k, int(e.b.value)


def memory_loads(ctx, st):
    """(tensor, indices in st's axes) of every read of st from memory, through the
    stages inlined into it (their index maps composed)."""
    out = []
    for ld in ctx.infos[st].loads:
        p = ctx.sched[ld.tensor.op] if isinstance(ld.tensor.op, ComputeOp) else None
        if p is None or p not in ctx.inlined:
            out.append((ld.tensor, ld.indices))
            continue
        vmap = {iv.var: i for iv, i in zip(p.op.axis, ld.indices)}
        out += [(t, tuple(substitute(i, vmap) for i in idx)) for t, idx in memory_loads(ctx, p)]
    return out


def store_in_output(ctx, st, members):  # called once the members are scheduled
    """A costly elementwise member (kept, not inlined: softmax's exponentials) of the
    output's shape and dtype is stored in the output's buffer (`store_with`) where the
    whole schedule passes store_with's checks (read by the output only at its own
    indices, by the other members at the same loop, over exactly the output's region):
    the output's cache lines are fetched while the costly values are computed, and the
    output's own pass rewrites them in cache."""
    if not st.is_output:
        return
    out = st.op.output(0)
    for m in members:
        t = m.op.output(0)
        if ctx.infos[m].is_reduction or m.op.num_outputs != 1 or t.dtype != out.dtype or \
                ctx.infos[m].extents != ctx.infos[st].extents:
            continue
        m.stored_with = st          # tried on the whole schedule before it is asked for
        holds = store_with_holds(ctx.sched)
        m.stored_with = None
        if not holds:   # e.g. a reduction split that does not divide the row reads past it
            continue
        m.store_with(out)
        ctx.rec.add(m, "store_with", f"store_with({out.name})",
                    f"read by '{st.op.name}' only at its own indices: written where the "
                    "output goes, whose lines are then fetched while it is computed")


ELEMENTWISE = Elementwise()
