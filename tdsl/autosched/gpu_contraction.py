"""The GPU rule for contractions (matmul, batch matmul, convolution as an implicit GEMM over
its reduction axes), sized from the target's SMs and shared memory.

A block of ty x tx threads computes a tile of (ty*ti) x (tx*tj) outputs along the row axis
and the vector axis; each thread a contiguous ti x tj sub-tile accumulated in registers
(cache_write "local"), reading its operands from registers refilled per reduction step
(cache_read "local") so each shared-memory value feeds ti or tj multiply-adds. Per
`k_tile` steps of the outer reduction loop the block copies what it reads into shared
memory, every thread helping, consecutive threads on consecutive (float4 where the layout
allows) elements so the global reads coalesce; with double buffering the next slice is
copied while the current one is used. Other spatial axes go to blockIdx.z."""
from __future__ import annotations

from ..errors import ScheduleError
from ..te import thread_axis
from .analysis import vars_of

BLOCK = (16, 16)        # threads per block (y, x): 256, what fast SGEMMs use
THREAD_TILE = (8, 8)    # outputs per thread: 64 accumulators, ~130 registers with operands
MIN_THREAD_TILE = 4     # below 4x4 a thread does too few multiply-adds per shared load
WAVES = 2               # blocks per SM wanted, so the last wave is not mostly idle
K_TILE = 8
BLOCKS_PER_SM = 2       # resident blocks wanted, so one block's barrier does not idle the SM
LARGE = 1024            # what a symbolic extent is assumed to be
VEC = 4                 # float4 copies


def _fit(ext, threads, per):
    """Shrinks (threads, per) along an axis of extent `ext` until the tile is less than
    twice the extent: a larger tile is mostly guarded-off threads."""
    ext = LARGE if ext is None else ext
    while threads * per >= 2 * ext and per > 1:
        per //= 2
    while threads * per >= 2 * ext and threads > 1:
        threads //= 2
    return threads, per


def _ceil(a, b):
    return -(-a // b)


def footprint(info, extents):
    """Per operand (in first-read order), the extents of the box it reads when the loop
    variables range over `extents` (id(var) -> extent): an index moving with several
    variables spans the sum of their ranges (unit coefficients assumed: a strided index
    reads more than this says)."""
    boxes = {}
    for ld in info.loads:
        box = [1 + sum(extents.get(v, 1) - 1 for v in vars_of(i)) for i in ld.indices]
        old = boxes.get(ld.tensor)
        boxes[ld.tensor] = box if old is None else [max(a, b) for a, b in zip(old, box)]
    return boxes


def _prod(xs):
    p = 1
    for x in xs:
        p *= x
    return p


def _double_buffer_fits(live, threads, target):
    """tdsl's double buffering unrolls the reduction loop by two, which ptxas showed costs
    ~40% more registers (an 8x8 tile: 127 -> 175 on sm_90, one block per SM instead of two):
    use it only where the estimate (`live` values plus ~32 for addresses) stays within the
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
        ty, ti = _fit(info.extents[r], BLOCK[0], THREAD_TILE[0])
        tx, tj = _fit(info.extents[v], BLOCK[1], THREAD_TILE[1])
        others = _prod(LARGE if e is None else e
                       for n, e in enumerate(info.extents) if n not in (r, v))

        def blocks():
            return (_ceil(LARGE if info.extents[r] is None else info.extents[r], ty * ti)
                    * _ceil(LARGE if info.extents[v] is None else info.extents[v], tx * tj) * others)
        want = WAVES * target.sm_count
        while blocks() < want and max(ti, tj) > MIN_THREAD_TILE:
            if ti >= tj:
                ti //= 2
            else:
                tj //= 2
        why.append(f"{blocks()} blocks for {target.sm_count} SMs")
    kt = params.k_tile or K_TILE
    ext0 = info.rextents[0]
    if ext0 is not None:
        kt = min(kt, ext0)
    dbl = params.double_buffer
    if dbl is None:
        dbl = _double_buffer_fits(ti * tj + ti + tj, ty * tx, target)
    limit = target.shared_memory_bytes

    def smem(kt, dbl):
        ranges = {id(info.axes[r].var): ty * ti, id(info.axes[v].var): tx * tj,
                  id(info.raxes[0].var): kt}
        for iv, e in zip(info.raxes[1:], info.rextents[1:]):
            ranges[id(iv.var)] = 16 if e is None else e
        return sum(4 * _prod(b) for b in footprint(info, ranges).values()) * (2 if dbl else 1)
    while smem(kt, dbl) > limit and (dbl or kt > 1):
        if dbl and params.double_buffer is None:
            dbl = False
        else:
            kt = max(1, kt // 2)
    why.append(f"~{smem(kt, dbl) // 1024} KiB shared memory of {limit // 1024}")
    return ty, tx, ti, tj, kt, dbl, "; ".join(why)


def contraction(s, st, info, target, params, rec):
    n = len(info.axes)
    v, r = n - 1, info.row_axis()
    ty_n, tx_n, ti, tj, kt, dbl, why = sizes(info, r, v, target, params)
    operands = []
    for ld in info.loads:
        if ld.tensor not in operands:
            operands.append(ld.tensor)
    out = st.op.output(0)
    CL = s.cache_write(out, "local")
    shared = [s.cache_read(t, "shared", [CL]) for t in operands]
    local = [s.cache_read(t, "local", [CL]) for t in shared]
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
    threads = ty_n * tx_n
    for t, sh in zip(operands, shared):
        S = s[sh]
        S.compute_at(L, ko)
        a = list(S.op.axis)
        f = S.fuse(*a) if len(a) > 1 else a[0]
        if box[t][-1] % VEC == 0:
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
