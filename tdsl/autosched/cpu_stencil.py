"""Stencil pipelines on CPUs (Harris corners, unsharp masks, separable blurs): what Halide's
autoschedulers do with them, as one rule.

A pointwise stage read by its consumer at several shifted indices (`B[y + 1, x]`,
`B[y, x - 2]`: the taps of a stencil) would be recomputed once per tap if inlined. The
stages are visited producers first, everything below a stage assumed inlined: when the
recomputations cost more than storing the stage and loading it back (`(taps - 1) x work >
STENCIL_MIN_SAVED` arithmetic operations, the work counting the pointwise stages that
would be inlined into it), the stage is materialized. So in a Harris detector the
gradients Ix and Iy are, and the products Ix * Iy read at the box sum's 9 taps are not
(one multiply each once the gradients are in memory): Halide's Mullapudi2016 choice.

A materialized stage is not computed over the whole image but at a tile of its consumer
(the group's owner), the region the tile needs plus the stencil's halo (bound inference
derives it), so it is produced and consumed while in cache. The owner:
- is tiled into rows x columns over its last two axes: the columns a whole number of
  vectors (COL_VECTORS), the rows a power of two such that the members' tiles with their
  halos take 1/L2_SHARE of the target's L2 together;
- runs its tiles in parallel (outer loops fused until there are enough tasks), every
  member computed at the innermost tile loop (or at the fused parallel one);
- vectorizes the column loop, and each member's.
A stage read at one index only (a product, a sharpen step) stays inlined.

Members computed at one tile over the same region (Harris's Ix and Iy) are marked to be
fused into one loop nest (`passes/fuse_siblings.py`, Halide's `compute_with`): the input
taps they share are loaded once.

Each member prefetches the rows of the inputs it reads from memory a few rows ahead
(`Stage.prefetch`): a tile reads each row in a run of its width, too short for the
hardware prefetchers to follow from row to row.

Sliding windows (storage folding across rows, each row of a member computed once) were
not adopted: with tiles of tens of rows the halo's recomputation is a few percent."""
from __future__ import annotations

from typing import Dict, FrozenSet, Optional, Tuple

from .. import dtype as dt
from ..ir import expr as E
from ..ir.visitor import walk
from .analysis import EXPENSIVE_CALLS
from .cpu_base import BIG
from .inline import Materialize
from .rule import INLINE_PHASE, Rule

STENCIL_MIN_SAVED = 8       # arithmetic operations saved per point to pay a store and loads
CALL_OPS = 16               # a vectorized exp/log/tanh: a polynomial and a range reduction
COL_VECTORS = 16            # columns of a tile, in vectors: long rows for the prefetcher
L2_SHARE = 4                # the members' tiles together take this fraction of L2, leaving
#                             room for the input rows they read and the output tile
PREFETCH_AHEAD = 4096       # bytes of input rows fetched ahead of a member's row loop

Offsets = FrozenSet[Tuple[int, ...]]


def index_offset(e, var) -> Optional[int]:
    """c when `e` is `var + c` (or `var`, `var - c`, `c + var`), else None."""
    if isinstance(e, E.Var):
        return 0 if e is var else None
    if isinstance(e, (E.Add, E.Sub)):
        a, b = e.a, e.b
        if isinstance(b, E.IntImm):
            o = index_offset(a, var)
            return None if o is None else o + (b.value if isinstance(e, E.Add) else -b.value)
        if isinstance(e, E.Add) and isinstance(a, E.IntImm):
            o = index_offset(b, var)
            return None if o is None else o + a.value
    return None


def arith_ops(body) -> int:
    """Arithmetic nodes of a body, index arithmetic inside loads not counted; a costly
    intrinsic (exp, sqrt, ...) counts as the CALL_OPS operations its expansion takes."""
    n = [0]

    def f(node):
        if isinstance(node, E.Call) and node.name in EXPENSIVE_CALLS:
            n[0] += CALL_OPS
        elif isinstance(node, (E.BinaryOp, E.Call, E.Select)):
            n[0] += 1
        elif isinstance(node, E.ProducerLoad):
            for ix in node.indices:
                walk(ix, g)

    def g(node):
        if isinstance(node, (E.BinaryOp, E.Call, E.Select)):
            n[0] -= 1
    walk(body, f)
    return n[0]


class Stencil(Rule):
    """Inline phase: a stage of the stencil plan (`stencil_plan`) is kept, to be computed
    per tile of its consumer, unless a contraction reads it (then it is materialized)."""
    name = "stencil"
    phase = INLINE_PHASE

    def applies(self, ctx, st):
        return st in ctx.stencil_plan and not ctx.contraction_readers(st)

    def apply(self, ctx, st):
        ctx.stencil.add(st)
        self.note(ctx, st, "materialize per tile", ctx.stencil_plan[st])


class StencilTile(Rule):
    """Schedule phase: the owner of a stencil group is tiled, its members computed per tile."""
    name = "stencil tile"

    def applies(self, ctx, st):
        return st in ctx.tiles

    def apply(self, ctx, st):
        stencil_tile(ctx, st, ctx.tiles[st])


STENCIL = Stencil()
STENCIL_TILE = StencilTile()


def read_taps(ctx, st, reader) -> Optional[Offsets]:
    """The offsets at which `reader` reads `st` (each index its own axis plus a
    constant), None when some read is not of that form."""
    ri = ctx.infos[reader]
    out = set()
    for ld in ri.loads_of(st.op.output(0)):
        if len(ld.indices) != len(ri.axes):
            return None
        offs = tuple(index_offset(ix, iv.var) for ix, iv in zip(ld.indices, ri.axes))
        if any(o is None for o in offs):
            return None
        out.add(offs)
    return frozenset(out)


def taps_at(ctx, st, through) -> Optional[Tuple[object, Offsets]]:
    """(owner, offsets): the one stage outside `through` that reads `st` (through the
    stages in `through`) and the offsets of those reads relative to its point; None
    if there are several such readers or some read is not a shifted one."""
    owner, total = None, set()
    for c in ctx.readers[st]:
        own = read_taps(ctx, st, c)
        if own is None:
            return None
        if c in through:
            up = taps_at(ctx, c, through)
            if up is None:
                return None
            o, outer = up
            own = {tuple(a + b for a, b in zip(u, i)) for u in outer for i in own}
        else:
            o = c
        if owner is not None and o is not owner:
            return None
        owner = o
        total |= own
    return None if owner is None else (owner, frozenset(total))


def pointwise(ctx, st) -> bool:
    info = ctx.infos.get(st)
    return info is not None and not info.is_reduction and not st.is_output


def point_work(ctx, st, planned) -> int:
    """Arithmetic per point of `st`, with the pointwise producers inlined into it (those
    not materialized) counted once per read."""
    info = ctx.infos[st]
    n = sum(arith_ops(b) for b in st.op.bodies)
    for p in ctx.sched.producers(st):
        if pointwise(ctx, p) and p not in planned:
            n += point_work(ctx, p, planned) * len(info.loads_of(p.op.output(0)))
    return n


def stencil_plan(ctx) -> Dict:
    """{stage: why} for the pointwise stages to compute per tile of their consumer,
    decided producers first, every stage below assumed inlined: a producer
    materialized makes the stages reading it cheap to inline (a product of two
    materialized gradients stays inlined into its box sum)."""
    plan = {}
    for st in ctx.comp:
        info = ctx.infos[st]
        if not pointwise(ctx, st) or len(info.axes) < 2 or \
                st.op.output(0).dtype == "bool":
            continue
        # a stage looked up at an index read from data is kept (inline.Materialize): the
        # taps stop at it, it can own the stages it reads (a bilateral grid's blurs)
        through = {c for c in ctx.comp if pointwise(ctx, c) and c not in plan and c is not st
                   and not Materialize.looked_up(ctx, c)}
        found = taps_at(ctx, st, through)
        if found is None or len(found[1]) < 2 or ctx.infos[found[0]].is_reduction:
            continue
        owner, taps = found
        w = point_work(ctx, st, plan)
        saved = (len(taps) - 1) * w
        if saved > STENCIL_MIN_SAVED:
            plan[st] = (f"read at {len(taps)} shifted points by '{owner.op.name}': inlined "
                        f"it would cost {saved} more operations per point than computing "
                        f"it once ({w} each)")
    return plan


def owner_of(ctx, st):
    """The stage whose tile `st` is computed at: the first reader, through inlined and
    other stencil stages, that is neither."""
    readers = ctx.eff_readers(st)
    out = set()
    for c in readers:
        out |= {owner_of(ctx, c)} if c in ctx.stencil else {c}
    return out.pop() if len(out) == 1 else None


def stencil_groups(ctx) -> Dict:
    """{owner: members, producers first}; a stencil stage whose tile has no single
    pointwise owner free of other groupings is computed at the root instead."""
    groups = {}
    for st in [m for m in ctx.comp if m in ctx.stencil]:
        owner = owner_of(ctx, st)
        if owner is None or owner in ctx.attach or owner in ctx.level or \
                ctx.infos[owner].is_reduction:
            ctx.stencil.discard(st)
            ctx.rec.add(st, "stencil", "compute_root", "no single pointwise consumer to "
                        "tile: computed once over the whole image")
            continue
        if not shifts_last_two(ctx, st):
            ctx.stencil.discard(st)
            ctx.rec.add(st, "stencil", "compute_root", f"'{owner.op.name}' reads it shifted "
                        "along leading axes only: its last two axes, which a tile would cut, "
                        "are one contiguous run of cells; computed once, vectorized along them")
            continue
        groups.setdefault(owner, []).append(st)
    return groups


def shifts_last_two(ctx, st) -> bool:
    """Whether the taps at which its owner reads `st` shift either of the last two axes
    (the rows and columns a stencil tile cuts)."""
    found = taps_at(ctx, st, ctx.stencil | ctx.inlined)
    if found is None:
        return True
    return any(len({t[d] for t in found[1]}) > 1 for d in (-2, -1))


def memory_inputs(ctx, st):
    """The stages `st` reads from memory: its producers, looking through inlined ones."""
    out, todo = [], list(ctx.sched.producers(st))
    while todo:
        p = todo.pop()
        if p in ctx.inlined:
            todo.extend(ctx.sched.producers(p))
        elif p not in out:
            out.append(p)
    return out


def shifted_reads(ctx, p, reader) -> Optional[Offsets]:
    """The offsets at which `reader` reads `p`, through inlined stages too; None unless
    every read is at the reader's own point shifted by constants (rows read in order)."""
    out = set()
    for q in ctx.sched.producers(reader):
        if q is p:
            own = read_taps(ctx, p, reader)
        elif q in ctx.inlined:
            inner, outer = shifted_reads(ctx, p, q), read_taps(ctx, q, reader)
            own = None if inner is None or outer is None else \
                {tuple(a + b for a, b in zip(u, i)) for u in outer for i in inner}
        else:
            continue
        if own is None:
            return None
        out |= own
    return frozenset(out)


def prefetch_rows(ctx, m, members, fetched, row_bytes):
    """Prefetches, at member `m`'s row loop, the input rows its tile reads a few rows
    ahead. Each tile reads its rows in short runs (the tile's width), too short for
    the hardware prefetchers to follow across rows: at 4096^2 a Harris tile waited on
    memory for a fifth of its time. Each input is fetched by its first member only."""
    for p in memory_inputs(ctx, m):
        # rows read in order: a transposed or gathered read would fetch a line a point
        if p in members or p in fetched or not shifted_reads(ctx, p, m):
            continue
        fetched.add(p)
        row = m.op.axis[-2]
        ahead = max(1, -(-PREFETCH_AHEAD // max(1, row_bytes)))
        ctx.sched[m].prefetch(p.op.output(0), row, ahead)
        ctx.rec.add(m, "prefetch", f"prefetch({p.op.name}, {row.var.name}, {ahead})",
                    f"the rows of '{p.op.name}' a tile reads are fetched {ahead} row(s) "
                    f"(~{PREFETCH_AHEAD // 1024} KiB) ahead: runs of {row_bytes} bytes "
                    "are too short for the hardware prefetcher to follow")


def stencil_tile(ctx, owner, members):
    """Tiles `owner` (rows x vector columns), computes `members` at the tile with their
    halo, parallel over tiles, vectorized along the columns."""
    info = ctx.infos[owner]
    axes, exts = list(owner.op.axis), list(info.extents)
    dtype = owner.op.output(0).dtype
    lanes = ctx.lanes(dtype)
    esize = max(1, dt.bits(dtype) // 8)
    through = set(members) | set(ctx.inlined)
    halos = []
    for m in members:
        found = taps_at(ctx, m, through)
        taps = found[1] if found else {(0,) * len(axes)}
        halos.append(tuple(max(t[d] for t in taps) - min(t[d] for t in taps) for d in (-2, -1)))
    hy = max(h[0] for h in halos)
    hx = max(h[1] for h in halos)
    W, H = exts[-1], exts[-2]
    # columns: a whole number of vectors, at most the row; rows: a power of two such
    # that the members' tiles with their halos take a share of L2 together
    cols = lanes * COL_VECTORS
    if W is not None:
        cols = min(cols, -(-W // lanes) * lanes)
    budget = ctx.target.cache_bytes(2) // (L2_SHARE * len(members))
    rows = max(1, budget // (esize * (cols + hx)) - hy)
    rows = max(1, min(rows, 1 << (rows.bit_length() - 1)))   # a power of two
    if H is not None:
        rows = min(rows, H)
    yo, xo, yi, xi = owner.tile(axes[-2], axes[-1], rows, cols)
    ctx.rec.add(owner, "stencil tile", f"tile({axes[-2].var.name}, {axes[-1].var.name}, "
                f"{rows}, {cols})", f"{len(members)} stage(s) computed per tile with a halo of "
                f"{hy} x {hx}: each member's tile within {budget // 1024} KiB, 1/{L2_SHARE} of "
                f"L2 ({ctx.target.cache_bytes(2) // 1024} KiB) across {len(members)} buffer(s)")
    ctx.vector_split(owner, xi, cols, dtype)
    nty = None if H is None else -(-H // rows)
    ntx = None if W is None else -(-W // cols)
    loops = [(iv, e, False) for iv, e in zip(axes[:-2], exts[:-2])]
    loops += [(yo, nty, H is None or H % rows != 0), (xo, ntx, W is None or W % cols != 0)]
    work = info.outputs(BIG)
    # a fused loop cannot carry the members when its extent is symbolic (bound
    # inference cannot bound their region through it): then only the rows go parallel
    if H is None or W is None:
        loops = loops[:-1]
    par = ctx.parallel_prefix(owner, loops, work, "tiles of a stencil group")
    at = par if xo not in owner.leaf_iter_vars else xo
    fetched = set()
    for m in members:
        ms = ctx.sched[m]
        ms.compute_at(owner, at)
        prefetch_rows(ctx, m, members, fetched, (cols + hx) * esize)
        maxes, mlanes = list(m.op.axis), ctx.lanes(m.op.output(0).dtype)
        ctx.rec.add(m, "stencil", f"compute_at({owner.op.name}, {at.var.name}); "
                    f"storage_align({maxes[-2].var.name}, {mlanes}, 0)",
                    f"computed per tile of '{owner.op.name}' with its halo: produced and "
                    "consumed while in cache; rows padded to whole vectors")
        # rows start on a vector boundary (Halide rounds them up likewise): the
        # consumer's unshifted tap is an aligned load
        ms.storage_align(maxes[-2], mlanes, 0)
        ctx.vector_split(m, maxes[-1], None, m.op.output(0).dtype)
        if len(members) > 1:
            # members over the same region at one place: one loop computes them all,
            # loading the inputs they share once (passes/fuse_siblings.py)
            ms.pragma(maxes[0], "fuse_siblings")
    if len(members) > 1:
        ctx.rec.add(owner, "fuse siblings", "pragma(fuse_siblings) on every member",
                    "members over the same region are computed in one loop nest where "
                    "they do not depend on each other: the inputs they share are loaded "
                    "once")

