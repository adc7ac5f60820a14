"""The GPU rule for contractions (matmul, batch matmul, convolution as an implicit GEMM over
its reduction axes), sized from the target's SMs and shared memory.

A block of ty x tx threads computes a tile of (ty*ti) x (tx*tj) outputs along the row axis
and the vector axis; each thread a contiguous ti x tj sub-tile accumulated in registers
(cache_write "local"), reading its operands from registers refilled per reduction step
(cache_read "local") so each shared-memory value feeds ti or tj multiply-adds. Per
`k_tile` steps of the outer reduction loop the block copies what it reads into shared
memory, every thread helping, consecutive threads on consecutive (float4 where the layout
allows) elements so the global reads coalesce; with double buffering the next slice is
copied while the current one is used. Other spatial axes go to blockIdx.z. An output too
small to give every SM a block even with the smallest tiles (a batch-1 dense) is split
along its reduction: partial sums by more blocks, added by a second kernel (split-K); so is
a long reduction (LONG_K: a conv of many channels as one GEMM) whose grid is short, with
its tiles kept whole rather than shrunk.

The graph layer's conv/dense/matmul kernels are this rule too, with an epilogue: `out`, an
elementwise consumer of the contraction with its shape (bias, batchnorm, residual add,
activation), is the stage tiled, and the thread that holds an accumulator applies it and
writes the output once."""
from __future__ import annotations

import dataclasses

from .. import arith
from ..errors import ScheduleError
from ..ir.visitor import walk
from ..te import thread_axis
from .analysis import StageInfo, vars_of
from .gpu_flat import bind_flat
from .rule import Rule

BLOCK = (16, 16)        # threads per block (y, x): 256, what fast SGEMMs use
THREAD_TILE = (8, 4)    # outputs per thread: 32 accumulators, ~105 registers double-buffered
MIN_THREAD_TILE = 4     # below 4x4 a thread does too few multiply-adds per shared load
MIN_BLOCK = 64          # threads per block below which a block hides too little latency
WAVES = 2               # blocks per SM wanted, so the last wave is not mostly idle
K_TILE = 16
BLOCKS_PER_SM = 2       # resident blocks wanted, so one block's barrier does not idle the SM
LARGE = 1024            # what a symbolic extent is assumed to be
VEC = 4                 # float4 copies
MIN_SPLIT = 32          # reduction steps a split-K partial sum gets at least
# A reduction at least this long keeps the full tiles and is split along K to fill the SMs,
# rather than shrinking tiles and blocks until the grid is long enough: 4x4 tiles of 56
# threads do 2 multiply-adds per shared-memory load, and a K of thousands (a 3x3 conv of
# 512 channels as one GEMM) leaves each partial sum hundreds of steps.
LONG_K = 2048
# a short axis's tiles spread evenly over fewer threads (56 columns of 4: 14 threads); False
# keeps a power of two (16, two idle), so blocks are whole warps (bench/gpu_probe.py
# policies "whole_warps" compares the two)
SPREAD = True


def _fit(ext, threads, per):
    """Shrinks (threads, per) along an axis of extent `ext` until the tile is less than
    twice the extent: a larger tile is mostly guarded-off threads."""
    ext = LARGE if ext is None else ext
    # a short axis keeps its register tile and drops threads first, down to 8, so each
    # thread keeps the reuse of its loads that the tile gives (bench/gpu_probe.py policies)
    while threads * per >= 2 * ext and threads > 8:
        threads //= 2
    while threads * per >= 2 * ext and per > 1:
        per //= 2
    while threads * per >= 2 * ext and threads > 1:
        threads //= 2
    if not SPREAD:
        return threads, per
    need = _ceil(ext, per)      # then the tiles spread evenly: 56 columns of 4 take 14
    return _ceil(need, _ceil(need, threads)), per   # threads, not 16 with two idle


def _ceil(a, b):
    return -(-a // b)


def footprint(info, extents):
    """Per operand (in first-read order), the extents of the box it reads when the loop
    variables range over `extents` (id(var) -> extent): an index moving with several
    variables spans the sum of their ranges (unit coefficients assumed: a strided index
    reads more than this says)."""
    boxes = {}
    for ld in info.loads:
        box = [1 + sum(_stride(i, v) * (extents.get(id(v), 1) - 1) for v in _vars(i))
               for i in ld.indices]
        old = boxes.get(ld.tensor)
        boxes[ld.tensor] = box if old is None else [max(a, b) for a, b in zip(old, box)]
    return boxes


def block_boxes(info, r, v, rows, cols, kt, unknown):
    """footprint() of what a block's shared copies hold per refill: its rows x cols tile,
    kt steps of the first reduction axis and the inner reduction axes whole (a conv's dy,
    dx; `unknown` steps where symbolic)."""
    ranges = {id(info.axes[r].var): rows, id(info.axes[v].var): cols, id(info.raxes[0].var): kt}
    for iv, e in zip(info.raxes[1:], info.rextents[1:]):
        ranges[id(iv.var)] = unknown if e is None else e
    return footprint(info, ranges)


def contiguous_run(box, shape):
    """How many elements a box of an operand reads at consecutive addresses: its last
    extent, times the extents before it while the dimensions after are read whole (a
    conv's weight slice [f, c:c+k_tile, 3, 3] is runs of k_tile*9). A copy in runs that
    are a multiple of VEC long moves float4s: the fused copy loop then walks them in
    step with memory (the GEMM's case is a run of the tile's width)."""
    run = 1
    for b, n in zip(reversed(box), reversed(shape)):
        run *= b
        if getattr(n, "value", n) != b:
            break
    return run


def _vars(expr):
    ids, found = vars_of(expr), {}
    walk(expr, lambda n: found.setdefault(id(n), n) if id(n) in ids else None)
    return list(found.values())


def _stride(index, var):
    """How far `index` moves per step of `var` (`y * 2 + dy`: 2); 1 where not linear.
    (`linear_coeff` gives the coefficient as a Python int: read as an IntImm's value it
    was always 1, and a stride-2 conv's input tile was sized at half its width.)"""
    lin = arith.linear_coeff(index, var)
    c = lin[0] if lin else None
    return abs(c) if isinstance(c, int) and c else 1


def _prod(xs):
    p = 1
    for x in xs:
        p *= x
    return p


def grid_blocks(info, r, v, rows, cols):
    """Blocks of a grid of rows x cols output tiles."""
    ext = [LARGE if e is None else e for e in info.extents]
    return _ceil(ext[r], rows) * _ceil(ext[v], cols) * \
        _prod(e for n, e in enumerate(ext) if n not in (r, v))


def split_parts(info, blocks, target):
    """Into how many partial sums the reduction is split (1: not split): when even the
    smallest tiles leave SMs without a block (a batch-1 dense), the first reduction axis
    is cut into equal parts (a divisor of its extent, so no part reads past the
    operands), each still MIN_SPLIT long: the fewest that give every SM a block (WAVES
    blocks for a reduction of LONG_K or more, whose tiles were kept), else the most there
    can be."""
    ext = info.rextents[0]
    want = WAVES * target.sm_count if _long_k(info) else target.sm_count
    if ext is None or blocks >= want:
        return 1
    fits = [p for p in range(2, ext // MIN_SPLIT + 1) if ext % p == 0]
    enough = [p for p in fits if blocks * p >= want]
    return enough[0] if enough else fits[-1] if fits else 1


def _long_k(info):
    return info.rextents[0] is not None and info.rextents[0] >= LONG_K


def _double_buffer_fits(live, threads, target):
    """tdsl's double buffering unrolls the reduction loop by two, which costs ~40% more
    registers (enough to leave an 8x8 tile one block per SM instead of two): use it only
    where the estimate (`live` values plus ~32 for addresses) stays within the
    registers of BLOCKS_PER_SM blocks."""
    budget = target.gpu.registers_per_sm // (threads * BLOCKS_PER_SM)
    return (live + 32) * 1.4 <= min(budget, target.max_registers_per_thread)


def sizes(info, r, v, target, params):
    """(ty, tx, ti, tj, k_tile, double_buffer, why) for the contraction of `info`."""
    why = []
    if params.block or params.thread_tile:
        (ty, tx), (ti, tj) = params.block or BLOCK, params.thread_tile or THREAD_TILE
        why.append("sizes given by params")
        if ty * tx > target.max_threads_per_block:
            raise ScheduleError(f"auto_schedule: params block={ty}x{tx} is {ty * tx} threads; "
                                f"{target} allows {target.max_threads_per_block} per block")
    else:
        # threads a short row axis leaves unused go to the vector axis (a batch-1 dense:
        # one row, a block of columns)
        ty, ti = _fit(info.extents[r], BLOCK[0], THREAD_TILE[0])
        tx, tj = _fit(info.extents[v], BLOCK[0] * BLOCK[1] // ty, THREAD_TILE[1])

        def blocks():
            return grid_blocks(info, r, v, ty * ti, tx * tj)
        # too few blocks to fill the SMs: smaller register tiles first (down to 4x4), then
        # fewer threads a block (down to two warps), then smaller tiles and blocks still,
        # the last steps only until every SM has a block
        steps = [(WAVES, "tile", MIN_THREAD_TILE), (1, "threads", MIN_BLOCK),
                 (1, "tile", 1), (1, "threads", target.warp_size)]
        if _long_k(info):
            steps = []
            why.append(f"a reduction of {info.rextents[0]} steps: tiles kept, split along it "
                       "if the grid is short")
        for waves, what, floor in steps:
            while blocks() < waves * target.sm_count:
                if what == "tile" and max(ti, tj) > floor:
                    ti, tj = (ti // 2, tj) if ti >= tj else (ti, tj // 2)
                elif what == "threads" and ty * tx > floor:
                    ty, tx = (_ceil(ty, 2), tx) if ty >= tx else (ty, _ceil(tx, 2))
                else:
                    break
        why.append(f"{blocks()} blocks for {target.sm_count} SMs")
    kt = params.k_tile or K_TILE
    ext0 = info.rextents[0]
    if ext0 is not None:
        kt = min(kt, ext0)
    dbl = params.double_buffer
    if dbl is None:
        dbl = _double_buffer_fits(ti * tj + ti + tj, ty * tx, target)
    limit = target.shared_memory_bytes

    def smem():
        return shared_bytes(info, r, v, ty * ti, tx * tj, kt, dbl)
    # the block's tiles are constants (a symbolic extent only guards them), so what fits
    # here fits at every size; the register tile and the threads shrink last, where even
    # single-buffered slices of one reduction step are too large (a wide kernel's weights),
    # and never where params gave them (a tuner's point is built as given, or fails)
    chosen = not (params.block or params.thread_tile)
    while smem() > limit:
        if dbl and params.double_buffer is None:
            dbl = False
        elif kt > 1:
            kt //= 2
        elif chosen and ti * tj > 1:
            ti, tj = (ti // 2, tj) if ti >= tj else (ti, tj // 2)
        elif chosen and ty * tx > 1:
            ty, tx = (_ceil(ty, 2), tx) if ty >= tx else (ty, _ceil(tx, 2))
        else:
            break       # it does not fit: the kernel's shared-memory check names it
    why.append(f"~{smem() // 1024} KiB shared memory of {limit // 1024}")
    return ty, tx, ti, tj, kt, dbl, "; ".join(why)


def shared_bytes(info, r, v, rows, cols, kt, dbl, unknown=16):
    """Bytes of shared memory a block of rows x cols outputs stages per `kt` reduction steps
    (twice that double-buffered): each operand's box, float32."""
    boxes = block_boxes(info, r, v, rows, cols, kt, unknown)
    return sum(4 * _prod(b) for b in boxes.values()) * (2 if dbl else 1)


def contraction(s, st, info, target, params, rec, out=None):
    """Tiles the contraction `st`; with `out` (an elementwise consumer of the same shape,
    the rest of its chain inlined) the accumulators are computed per thread of `out`'s
    tiling and `st` is inlined into it: one kernel with the epilogue. A grid too short
    for the SMs is split along the reduction (`split_k`)."""
    n = len(info.axes)
    v, r = n - 1, info.row_axis()
    ty_n, tx_n, ti, tj, kt, dbl, why = sizes(info, r, v, target, params)
    parts = split_parts(info, grid_blocks(info, r, v, ty_n * ti, tx_n * tj), target)
    if parts > 1:
        return split_k(s, st, info, parts, target, params, rec, out)
    operands = []
    for ld in info.loads:
        if ld.tensor not in operands:
            operands.append(ld.tensor)
    CL = s.cache_write(st.op.output(0), "local")
    shared = [s.cache_read(t, "shared", [CL]) for t in operands]
    local = [s.cache_read(t, "local", [CL]) for t in shared]
    if out is not None and out is not st:
        st.compute_inline()
        st = out
    ax = list(st.op.axis)
    by, yi = st.split(ax[r], factor=ty_n * ti)
    bx, xi = st.split(ax[v], factor=tx_n * tj)
    ty, yi = st.split(yi, nparts=ty_n)
    tx, xi = st.split(xi, nparts=tx_n)
    others = [ax[i] for i in range(n) if i not in (r, v)]
    st.reorder(*others, by, bx, ty, tx, yi, xi)
    if others:
        bz = st.fuse(*others) if len(others) > 1 else others[0]
        st.bind(bz, thread_axis("blockIdx.z"))
    st.bind(by, thread_axis("blockIdx.y"))
    st.bind(bx, thread_axis("blockIdx.x"))
    st.bind(ty, thread_axis("threadIdx.y"))
    st.bind(tx, thread_axis("threadIdx.x"))
    # the thread's outputs index its accumulator array: unrolled, the array stays in
    # registers (a rolled epilogue loop put it on the stack: ptxas, the graph's convs)
    st.unroll(yi)
    st.unroll(xi)
    rec.add(st, "block-tile", f"blocks of {ty_n}x{tx_n} threads, {ti}x{tj} outputs per thread "
            f"({ax[r].var.name} x {ax[v].var.name})", "a contraction: the block's threads share "
            f"the operand slices they read; each thread's outputs stay in registers ({why})")
    L = s[CL]
    L.compute_at(st, tx)
    la, lr = list(L.op.axis), list(L.op.reduce_axis)
    ko, ki = L.split(lr[0], factor=kt)
    L.reorder(ko, ki, *lr[1:], *la)
    L.unroll(la[r])         # the thread's ti x tj accumulators stay in registers
    L.unroll(la[v])
    if len(lr) == 1:
        L.unroll(ki)
    inner = lr[-1] if len(lr) > 1 else ki
    # what one thread reads per reduction step: ti values of one operand, tj of the other
    per_thread = footprint(info, {id(info.axes[r].var): ti, id(info.axes[v].var): tj})
    for t, lc in zip(operands, local):
        Lc = s[lc]
        Lc.compute_at(L, inner)
        a = list(Lc.op.axis)
        for iv in a[:-1]:
            Lc.unroll(iv)
        if per_thread[t][-1] % VEC == 0:
            Lc.vectorize(a[-1])     # one 16-byte shared-memory load (where aligned)
        else:
            Lc.unroll(a[-1])
    rec.add(st, "registers", f"cache_read({', '.join(t.name for t in shared)}, local) at "
            f"{inner.var.name}", "each value read from shared memory feeds a row or column of "
            "the thread's tile")
    box = footprint(info, {id(info.axes[r].var): ty_n * ti, id(info.axes[v].var): tx_n * tj,
                           id(info.raxes[0].var): kt})
    whole = block_boxes(info, r, v, ty_n * ti, tx_n * tj, kt, unknown=1)
    threads = ty_n * tx_n
    for t, sh in zip(operands, shared):
        S = s[sh]
        S.compute_at(L, ko)
        a = list(S.op.axis)
        f = S.fuse(*a) if len(a) > 1 else a[0]
        # float4 loads where memory runs allow; float4 stores to shared memory alone (lanes
        # gathered) where the tile's last extent is a multiple of 4 (a padded conv input)
        if box[t][-1] % VEC == 0 or contiguous_run(whole[t], t.shape) % VEC == 0:
            f, vec = S.split(f, factor=VEC)
            S.vectorize(vec)
        # factor splits on thread-bound loops keep their size on a short copy (extra
        # threads are guarded off), so every loop on a tag has the block's extent
        f, t_x = S.split(f, factor=tx_n)
        _, t_y = S.split(f, factor=ty_n)
        S.bind(t_y, thread_axis("threadIdx.y"))
        S.bind(t_x, thread_axis("threadIdx.x"))
        if dbl:
            S.double_buffer()
    rec.add(st, "shared-memory", f"cache_read({', '.join(t.name for t in operands)}, shared) at "
            f"{ko.var.name}; {threads} threads copy consecutive elements"
            f"{', double-buffered' if dbl else ''}",
            f"every {kt} steps of '{lr[0].var.name}' the block stages what it reads once, with "
            "coalesced reads, instead of each thread reading global memory")


def split_k(s, st, info, parts, target, params, rec, out=None):
    """rfactor: `parts` partial sums of the contraction, each over an equal slice of its
    first reduction axis, tiled as a contraction with the slice on blockIdx.z; then a
    second kernel sums the partials, one output per thread, with the epilogue of `out`.
    Deterministic, unlike atomics, and the partials are small: the grid was short because
    the output is."""
    k = st.op.reduce_axis[0]
    ko, _ = st.split(k, nparts=parts)
    rf = s.rfactor(st.op.output(0), ko)
    rec.add(st, "split-k", f"split {k.var.name} into {parts}; rfactor -> {rf.name}",
            (f"a reduction of {info.rextents[0]} steps keeps its tiles: " if _long_k(info) else
             f"{grid_blocks(info, info.row_axis(), len(info.axes) - 1, 1, 1)} outputs leave "
             f"SMs of the {target.sm_count} without a block even with the smallest tiles: ") +
            f"{parts} blocks share each tile's reduction, a second kernel adds their results")
    # a part's reduction is a few k_tile steps, too few for double buffering to pay for
    # its unrolled copies, whose extra registers can spill
    if params.double_buffer is None:
        params = dataclasses.replace(params, double_buffer=False)
    contraction(s, s[rf], StageInfo(rf.op), target, params, rec)
    # the sum accumulates in a register of the thread that writes the output
    final, acc = (st, s[s.cache_write(st.op.output(0), "local")]) if out is None else (out, st)
    acc.compute_at(final, bind_flat(final, min(params.threads, target.max_threads_per_block)))
    rec.add(final, "bind", f"fuse all; split {params.threads}; bind blockIdx.x / threadIdx.x",
            f"each thread adds the {parts} partial sums of its output"
            + ("" if out is None else " and applies the epilogue"))


class BlockTile(Rule):
    """A contraction: block tiles staged through shared memory, register tiles per thread
    (split-K when the tiles are too few to fill the GPU)."""
    name = "block-tile"

    def applies(self, ctx, st):
        # a reduction of a run-time length: the staged k tiles would read past its end
        # (left to the rules without staging)
        info = ctx.infos[st]
        return info.is_reuse_reduction() and None not in info.rextents

    def apply(self, ctx, st):
        contraction(ctx.sched, st, ctx.infos[st], ctx.target, ctx.params, ctx.rec)


BLOCK_TILE = BlockTile()
