"""GPU rule for half-precision contractions: C (float32) = A @ B with bfloat16 or float16
operands, written with casts, on CUDA sm_80 and later runs on the tensor cores
(`mma.sync.aligned.m16n8k16`, `tdsl.intrin_cuda`).

A block of threads is a grid of warps (threadIdx.y, 32 lanes on threadIdx.x). Each warp
accumulates its tile of C in registers: a `cache_write` stage in scope "mma.accumulator"
computed at the warp's loop, zeroed, updated and stored only by the fragment intrinsics,
so each lane holds just its elements in the instruction's layout. Per k step all the
block's threads copy a tile of A and of B into shared memory (rows padded so that each
starts 16-byte aligned and 8 rows fall in different banks), double-buffered where two fit,
so that the next step's copies (`cp.async`) are in flight while this step's instructions
run; each warp loads its A and B fragments with `ldmatrix` and runs one `mma.sync` per
16 x 8 block of its tile. At the
end each warp stores its accumulators straight to C (`mma_schedule`, which
`tdsl.examples.mma_gemm` also uses). B read as B[j, k] (A @ B.T), or A as A[k, i], is
copied into shared memory transposed (`transform_layout` in "shared" scope), since the
instruction takes A as M x K and B as K x N rows. An elementwise consumer of C's shape
reading C at its own indices (bias, activation, a cast) is the stage tiled over the grid:
the warps store their accumulators into a shared tile of C once, and it reads them there,
one kernel.

The block tile is the largest of a few (2 x 2 warps of 4 x 8 blocks of 16 x 8, i.e. 128 x
128, down to one warp of one block) that divides M and N and, with an epilogue, whose
shared tiles fit the 48 KiB of static shared memory; K must be a multiple of 16. When the
target, the dtypes or the sizes do not allow it, `explain()` says why and the ordinary
contraction rule (float32 FMAs) schedules it. Built for "c", the schedule runs with the
fragment intrinsics emulated lane by lane in the instruction's layout.
"""
from __future__ import annotations

from ..ir import expr as E
from ..te import intrin_cuda, thread_axis
from .rule import Rule

MT, NT, KT = intrin_cuda.M, intrin_cuda.N, intrin_cuda.K
# (warps (rows, cols), blocks of 16 x 8 per warp (rows, cols)), largest first. 2 x 2 warps
# of 64 x 64 hold 128 accumulators a lane: double-buffered, ptxas gives 214-220 registers,
# no spills, two blocks of 128 threads an SM on sm_80 and sm_90. 2 x 4 warps of 64 x 32 (the same block
# tile) would run 16 warps an SM at 94 registers but read 192 bytes of shared memory per
# mma.sync instead of 128 (an SM reads 128 a cycle). docs/low_precision.md has the table.
CONFIGS = [((2, 2), (4, 8)), ((2, 2), (4, 4)), ((2, 2), (2, 4)), ((2, 2), (2, 2)),
           ((2, 2), (2, 1)), ((2, 2), (1, 1)), ((1, 2), (1, 1)), ((1, 1), (1, 1))]
SHARED_BYTES = 48 * 1024        # the block tile's budget (one stage of A and B, the epilogue)
PAD = 8                         # elements added to every shared row (mma_schedule)
STAGES = 4                      # shared buffers of A and B at most: 3 k steps in flight
BLOCKS_PER_SM = 2               # the stages are limited so that this many blocks fit an SM


def shared_bytes(warps, tiles, k_step, dtype_bytes=2, epilogue=False, buffers=1):
    """The shared memory `mma_schedule` declares, at most (a row already 8 past a multiple
    of 16 gets no padding): the padded A and B tiles (`buffers` of each), and with an
    epilogue the float32 tile of C it reads."""
    bm, bn = warps[0] * tiles[0] * MT, warps[1] * tiles[1] * NT
    n = (bm * (k_step + PAD) + k_step * (bn + PAD)) * dtype_bytes * buffers
    return n + (bm * (bn + PAD) * 4 if epilogue else 0)


def pipeline_stages(warps, tiles, k_step, dtype_bytes, epilogue, facts):
    """How many shared buffers of the A and B tiles (`multi_buffer`) a block takes on a GPU
    with `facts` (`Target.gpu`): the most, up to STAGES, with which BLOCKS_PER_SM blocks
    still fit an SM; else two, or one, where a block may have them at all."""
    def need(n):
        return shared_bytes(warps, tiles, k_step, dtype_bytes, epilogue, buffers=n)
    for n in range(STAGES, 1, -1):
        if need(n) <= facts.shared_memory_optin_bytes and \
                BLOCKS_PER_SM * (need(n) + 1024) <= facts.shared_memory_per_sm:
            return n
    return 2 if need(2) <= facts.shared_memory_optin_bytes else 1


def mma_schedule(s, A, B, C, dtype, warps, warp_tiles, k_step, a_transposed=False,
                 b_transposed=False, out=None, stages=2):
    """Tensor-core GEMM schedule of C = A @ B (read as A[k, i] when `a_transposed`, B[j, k]
    when `b_transposed`): `warps` (rows, columns) of warps a block, each accumulating
    `warp_tiles` (rows, columns) blocks of 16 x 8 in registers, `stages` shared buffers of
    the A and B tiles taken in turn (a pipeline: the next stages - 1 k steps' copies in
    flight). `out`: an elementwise consumer of C of its shape, reading C at its own
    indices, computed by the same kernel from the accumulators staged in shared memory."""
    wm, wn = warp_tiles[0] * MT, warp_tiles[1] * NT
    bm, bn = warps[0] * wm, warps[1] * wn
    nwarps = warps[0] * warps[1]
    if a_transposed:
        AS = s.transform_layout(A, [C], [(1, None), (0, None)], scope="shared")
    else:
        AS = s.cache_read(A, "shared", [C])
    if b_transposed:
        BS = s.transform_layout(B, [C], [(1, None), (0, None)], scope="shared")
    else:
        BS = s.cache_read(B, "shared", [C])
    CF = s.cache_write(C, intrin_cuda.ACCUMULATOR)
    tx, ty = thread_axis("threadIdx.x"), thread_axis("threadIdx.y")
    if out is None:
        O = s[C]
        by, bx, ii, jj = O.tile(O.op.axis[0], O.op.axis[1], bm, bn)
        store, rows, cols = O, ii, jj
    else:
        CS = s.cache_read(CF, "shared", [C])
        s[C].compute_inline()
        O = s[out]
        by, bx, ii, jj = O.tile(O.op.axis[0], O.op.axis[1], bm, bn)
        _spread(O, O.fuse(ii, jj), nwarps, tx, ty)
        s[CS].compute_at(O, bx)
        # rows 8 floats (32 bytes) longer than the tile: the 8 rows a warp's store writes
        # at once then fall in different banks
        s[CS].storage_align(CS.op.axis[0], 2 * PAD, PAD)
        store, (rows, cols) = s[CS], CS.op.axis
    O.bind(by, thread_axis("blockIdx.y"))
    O.bind(bx, thread_axis("blockIdx.x"))
    # each warp stores its tile of accumulators, from the lanes' registers, in one call
    wi, ri = store.split(rows, factor=wm)
    wj, rj = store.split(cols, factor=wn)
    store.reorder(wi, wj, ri, rj)
    warp = store.fuse(wi, wj)
    store.bind(warp, ty)
    store.tensorize(ri, intrin_cuda.mma_store(warp_tiles))

    # the accumulators of one warp, at the warp's loop: per lane, its elements only
    s[CF].compute_at(store, warp)
    ci, cj = CF.op.axis
    ko, kk = s[CF].split(CF.op.reduce_axis[0], factor=k_step)
    kt, ki = s[CF].split(kk, factor=KT)
    s[CF].reorder(ko, kt, ci, cj, ki)
    s[CF].unroll(kt)
    s[CF].tensorize(ci, intrin_cuda.mma_m16n8k16(dtype, warp_tiles))

    # the next stages - 1 k steps' tiles in flight (cp.async on sm_80+) while this step's
    # mma run
    for T, transposed in ((AS, a_transposed), (BS, b_transposed)):
        s[T].compute_at(s[CF], ko)
        if stages > 1:
            s[T].multi_buffer(stages)
        # rows padded to an odd number of 16-byte chunks: every row starts 16-byte aligned
        # (ldmatrix reads 8 such rows) and 8 consecutive rows hit different banks
        s[T].storage_align(T.op.axis[0], 2 * PAD, PAD)
        axis = s[T].fuse(*s[T].op.axis)
        if not transposed:      # a row of 8 elements a lane: one 16-byte load and store
            axis, vec = s[T].split(axis, factor=PAD)
            s[T].vectorize(vec)
        # rolled: unrolled, nvcc issues every 16-byte load of the tile before the stores,
        # 16 more registers (and a spill on sm_90 with 2 x 2 blocks a warp)
        s[T].pragma(_spread(s[T], axis, nwarps, tx, ty), "unroll", 1)


def _spread(stage, axis, nwarps, tx, ty):
    """Consecutive elements of `axis` to consecutive lanes, the rest over the warps;
    returns the serial loop left over each thread's share."""
    rest, lane = stage.split(axis, factor=32)
    warp, serial = stage.split(rest, nparts=nwarps)
    stage.bind(warp, ty)
    stage.bind(lane, tx)
    return serial


def _sm(target):
    """The compute capability code is built for: -arch, else the device's (or the default
    PTX architecture without one)."""
    arch = target.gpu_arch
    if not arch:
        from ..runtime.cuda import default_arch
        arch = default_arch()
    digits = "".join(ch for ch in arch if ch.isdigit())
    return int(digits) if digits else 0


def _load(e):
    if isinstance(e, E.Cast) and e.dtype == "float32" and isinstance(e.value, E.ProducerLoad):
        return e.value
    return None


def mma_plan(st, info, target, with_epilogue=False):
    """(plan, None) when stage `st` can run on mma.sync, else (None, why not); why is None
    for contractions that are not half precision. `with_epilogue`: an elementwise consumer will
    read C from a shared tile, which the block tile must leave room for."""
    body = st.op.body
    if not isinstance(body, E.Reduce) or body.combiner.name != "sum" or \
            st.op.output(0).dtype != "float32":
        return None, None
    src = body.source[0] if isinstance(body.source, tuple) else body.source
    if not isinstance(src, E.Mul):
        return None, None
    a, b = _load(src.a), _load(src.b)
    if a is None or b is None or a.dtype not in intrin_cuda.DTYPES:
        return None, None
    if b.dtype != a.dtype:
        return None, f"{a.dtype} x {b.dtype}: mma.sync multiplies two operands of one type"
    if target.kind != "cuda":
        return None, f"target '{target}' has no tensor-core instruction tdsl uses (CUDA sm_80+)"
    sm = _sm(target)
    if sm < 80:
        return None, f"sm_{sm}: mma.sync m16n8k16 with {a.dtype} needs sm_80 or later"
    if len(info.axes) != 2 or len(info.raxes) != 1:
        return None, "the rule takes a matrix product (2 output axes, 1 reduction axis)"
    (M, N), (K,) = info.extents, info.rextents
    if None in (M, N, K):
        return None, "symbolic sizes: the block tiles need constant extents"
    (i, j), (k,) = info.axes, info.raxes
    if len(a.indices) != 2 or {a.indices[0], a.indices[1]} != {i.var, k.var} or \
            not all(isinstance(x, E.Var) for x in a.indices):
        return None, f"'{a.tensor.name}' is not read as {a.tensor.name}[i, k] or [k, i]"
    if len(b.indices) != 2 or {b.indices[0], b.indices[1]} != {j.var, k.var} or \
            not all(isinstance(x, E.Var) for x in b.indices):
        return None, f"'{b.tensor.name}' is not read as {b.tensor.name}[k, j] or [j, k]"
    if K % KT:
        return None, f"K={K} is not a multiple of {KT}"
    k_step = 2 * KT if K % (2 * KT) == 0 else KT
    for warps, tiles in CONFIGS:
        bm, bn = warps[0] * tiles[0] * MT, warps[1] * tiles[1] * NT
        if M % bm == 0 and N % bn == 0 and \
                shared_bytes(warps, tiles, k_step, epilogue=with_epilogue) <= SHARED_BYTES:
            break
    else:
        return None, f"M={M}, N={N}: no block tile fits (multiples of {MT} and {NT} needed)"
    stages = pipeline_stages(warps, tiles, k_step, 2, with_epilogue, target.gpu)
    return dict(A=a.tensor, B=b.tensor, dtype=a.dtype, warps=warps, tiles=tiles,
                k_step=k_step, stages=stages, a_transposed=a.indices[0] is k.var,
                b_transposed=b.indices[0] is j.var, sm=sm), None


def epilogue(st, info, readers, infos):
    """The one elementwise reader of contraction `st` with its shape that reads it at its
    own indices (bias, activation, a cast), or None."""
    if st.is_output or len(readers) != 1:
        return None
    T = readers[0]
    ti = infos[T]
    if ti.is_reduction or ti.extents != info.extents:
        return None
    loads = ti.loads_of(st.op.output(0))
    if not loads or not all(ld.index_is_axis(n, ti.axes[n]) for ld in loads
                            for n in range(len(ti.axes))):
        return None
    return T


def tensor_core(s, st, info, target, rec, readers=(), infos=None):
    """Schedules `st` on mma.sync when it can, with its elementwise epilogue among
    `readers` (its readers that are not inlined) when there is one; returns the stages
    scheduled, or None after saying why (if it is a half-precision contraction)."""
    T = epilogue(st, info, list(readers), infos) if infos is not None else None
    plan, why = mma_plan(st, info, target, with_epilogue=T is not None)
    if plan is None:
        if why is not None:
            rec.add(st, "tensorize", "none", why + "; the float32 contraction rule instead")
        return None
    mma_schedule(s, plan["A"], plan["B"], st.op.output(0), plan["dtype"], plan["warps"],
                 plan["tiles"], plan["k_step"], plan["a_transposed"], plan["b_transposed"],
                 out=None if T is None else T.op.output(0), stages=plan["stages"])
    w, t = plan["warps"], plan["tiles"]
    rec.add(st, "tensorize", f"mma.sync m16n8k16 ({plan['dtype']}); {w[0]} x {w[1]} warps "
            f"of {t[0]} x {t[1]} blocks of {MT} x {NT}, k step {plan['k_step']}, "
            f"{plan['stages']} shared stages",
            f"sm_{plan['sm']} tensor cores: a warp multiplies 16 x 16 by 16 x 8 per instruction, "
            "its accumulators in registers (mma.accumulator); A and B tiles staged in shared "
            "memory (the next stages - 1 k steps' in flight) and loaded with ldmatrix" +
            ("; A copied transposed (it is read as A[k, i])" if plan["a_transposed"] else "") +
            ("; B copied transposed (it is read as B[j, k])" if plan["b_transposed"] else ""))
    if T is not None:
        rec.add(T, "fuse-epilogue", f"'{st.op.name}' accumulated in registers inside "
                f"'{T.op.name}''s blocks", "one kernel: the warps store the accumulators to a "
                "shared tile once, the epilogue reads it there and writes the output once")
        return {st, T}
    return {st}



class TensorCore(Rule):
    """A half-precision contraction on the tensor cores, with its elementwise epilogue;
    where it cannot run there, it says why and the next rules schedule the contraction."""
    name = "tensorize"

    def applies(self, ctx, st):
        return ctx.infos[st].is_reuse_reduction()

    def apply(self, ctx, st):
        readers = [c for c in ctx.readers[st] if c not in ctx.inlined]
        done = tensor_core(ctx.sched, st, ctx.infos[st], ctx.target, ctx.rec, readers, ctx.infos)
        if not done:
            return False
        ctx.taken |= done


TENSOR_CORE = TensorCore()


WG_K = 64       # k a step of the wgmma schedule: one 128-byte row of a swizzled A tile


def wgmma_schedule(s, A, B, C, dtype, warpgroups=2, n_blocks=2, stages=3):
    """Hopper schedule of C = A @ B on `wgmma.mma_async` (sm_90a): a block of `warpgroups`
    x 4 warps (threadIdx.y; 32 lanes on threadIdx.x) computes 64 warpgroups x 64 n_blocks
    of C, each warp 16 rows of it in registers (scope "mma.accumulator", the mma layout:
    warp r of a warpgroup holds its rows 16 r on, as the instruction hands them out). Per
    k step of 64 the block copies the A tile (rows of 64 k) and the B tile (as 64-column
    blocks of 64 k-rows: `transform_layout` [n / 64][k][n % 64]) into shared memory laid
    out with the 128-byte swizzle (`storage_swizzle`), the layout the instruction's matrix
    descriptors describe, through `stages` buffers (cp.async, the next stages - 1 tiles in
    flight); each warpgroup then runs n_blocks calls of 4 m64n64k16 instructions."""
    bm, bn = 64 * warpgroups, intrin_cuda.WG_N * n_blocks
    nwarps = bm // MT
    AS = s.cache_read(A, "shared", [C])
    BS = s.transform_layout(B, [C], [(1, None), (0, None), (1, intrin_cuda.WG_N)],
                            scope="shared")
    CF = s.cache_write(C, intrin_cuda.ACCUMULATOR)
    tx, ty = thread_axis("threadIdx.x"), thread_axis("threadIdx.y")
    O = s[C]
    by, bx, ii, jj = O.tile(O.op.axis[0], O.op.axis[1], bm, bn)
    O.bind(by, thread_axis("blockIdx.y"))
    O.bind(bx, thread_axis("blockIdx.x"))
    # a warp a 16 rows of the tile, all its columns: threadIdx.y = 4 warpgroup + rank
    warp, ri = O.split(ii, factor=MT)
    O.reorder(warp, ri, jj)
    O.bind(warp, ty)
    O.tensorize(ri, intrin_cuda.mma_store((1, bn // NT)))

    s[CF].compute_at(O, warp)
    ci, cj = CF.op.axis
    ko, ki = s[CF].split(CF.op.reduce_axis[0], factor=WG_K)
    cjo, cji = s[CF].split(cj, factor=intrin_cuda.WG_N)
    s[CF].reorder(ko, cjo, ci, cji, ki)
    s[CF].tensorize(ci, intrin_cuda.wgmma_m64n64k16(dtype, WG_K // KT))

    for T in (AS, BS):
        s[T].compute_at(s[CF], ko)
        if stages > 1:
            s[T].multi_buffer(stages)
        s[T].storage_swizzle(intrin_cuda.SWIZZLE)
        axis, vec = s[T].split(s[T].fuse(*s[T].op.axis), factor=PAD)   # 16-byte moves
        s[T].vectorize(vec)
        s[T].pragma(_spread(s[T], axis, nwarps, tx, ty), "unroll", 1)
