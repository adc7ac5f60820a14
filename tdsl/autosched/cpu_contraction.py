"""CPU rules for contractions (an operand reused along a spatial axis: matmul, conv, batch
matmul): a register tile accumulating in registers with the reused operand's strided panel
packed, or, when the operands are contiguous along the reduction (A @ B.T), a dot-product
tile of vectors of partial sums; with a long reduction and rows enough, the register tile
again, the operand that runs along the reduction copied transposed panel by panel. When the vector axis is only a few vectors long (a blocked
layout's inner block, NCHW[x]c), the tile's vectors also span blocks of an outer axis that
the broadcast operand does not use (the conv's channel blocks)."""
from __future__ import annotations

from .. import tiling
from .cpu_base import BIG
from .rule import Rule


class DotTile(Rule):
    """Operands contiguous along the reduction (A @ B.T): a tile of vectors of partial sums."""
    name = "dot-tile"

    def applies(self, ctx, st):
        pair = ctx.contraction_of(st)
        return pair is not None and dot_layout(ctx, pair[0]) \
            and not transpose_pays(ctx, pair[0])

    def apply(self, ctx, st):
        dot_tile(ctx, *ctx.contraction_of(st))


class RegisterTile(Rule):
    """Any other contraction: a register tile, the reused operand packed where it pays."""
    name = "register-tile"

    def applies(self, ctx, st):
        return ctx.contraction_of(st) is not None

    def apply(self, ctx, st):
        tile(ctx, *ctx.contraction_of(st))


def dot_layout(ctx, R) -> bool:
    """No operand is contiguous along the output's last axis, but every operand read
    moves contiguously with the innermost reduction axis (A @ B.T, attention's Q K^T):
    vectors along the reduction, not along the outputs."""
    info = ctx.infos[R]
    if not ctx.can_vectorize(R.op.output(0).dtype) or ctx.lanes(R.op.output(0).dtype) < 2:
        return False
    v, k = info.axes[-1], info.raxes[-1]
    if any(ld.contiguous_in(v) for ld in info.loads):
        return False
    ext = info.rextents[-1]
    return all(ld.contiguous_in(k) for ld in info.loads if ld.uses(k)) and (ext is None or ext >= ctx.lanes(R.op.output(0).dtype))


def dot_tile(ctx, R, T):
    """A tile of rows x cols outputs, each accumulating a vector of partial sums along the
    contiguous reduction axis (rfactor over the lanes): per step, rows + cols vector loads
    feed rows x cols FMAs; the lanes are summed once per output at the end."""
    s, info = ctx.sched, ctx.infos[R]
    n = len(info.axes)
    v, r = n - 1, info.row_axis()
    dtype = R.op.output(0).dtype
    lanes = ctx.lanes(dtype)
    regs = ctx.target.vector_registers
    side = max(x for x in range(1, 9) if x * x + 2 * x + 1 <= regs and x * x <= 3 * regs // 4)
    rows, cols = side, side
    why = (f"{rows * cols} vector accumulators and {rows + cols} loaded vectors fit "
           f"{regs} vector registers")
    if ctx.params.tile:
        rows, cols = ctx.params.tile[0] or rows, ctx.params.tile[1] or cols
        why = "given in params"
    ext_r, ext_v = info.extents[r], info.extents[v]
    rows, cols = min(rows, ext_r or BIG), min(cols, ext_v or BIG)
    k = list(s[R].op.reduce_axis)[-1]
    ko, ki = s[R].split(k, factor=lanes)
    rf = s.rfactor(R.op.output(0), ki, factor_axis=n)   # lanes last: contiguous partial sums
    F = s[rf]
    owner = T if T is not None else R
    O = s[owner.op.output(0)]
    if T is not None:
        ctx.rec.add(T, "fuse-epilogue", f"'{R.op.name}' computed inside '{T.op.name}''s tile",
                    "the elementwise consumer reads the sums while they are in cache")
    ax = list(O.op.axis)
    ro, ri = O.split(ax[r], factor=rows)
    vo, vi = O.split(ax[v], factor=cols)
    others = [ax[i] for i in range(n) if i not in (r, v)]
    O.reorder(*others, ro, vo, ri, vi)
    ctx.rec.add(R, "dot-tile", f"split({k.var.name}, {lanes}); rfactor; tile {ax[r].var.name} x "
                f"{ax[v].var.name} by {rows} x {cols}, each a vector of {lanes} partial sums", why)
    work = info.outputs(BIG) * info.reduce_size(BIG)
    ro_rag = ext_r is None or ext_r % rows != 0
    vo_rag = ext_v is None or ext_v % cols != 0
    loops = [(iv, info.extents[i], False) for i, iv in enumerate(ax) if i not in (r, v)]
    loops += [(ro, None if ext_r is None else -(-ext_r // rows), ro_rag),
              (vo, None if ext_v is None else -(-ext_v // cols), vo_rag)]
    ctx.parallel_prefix(O, loops, work, "tiles", work_expr=info.work_expr())
    leaves = O.leaf_iter_vars
    at = leaves[leaves.index(ri) - 1]
    if T is not None:
        s[R].compute_at(O, at)
    F.compute_at(O, at)
    fa, fr = list(F.op.axis), list(F.op.reduce_axis)
    kv, sp = fa[n], fa[:n]
    F.reorder(*[sp[i] for i in range(n) if i not in (r, v)], *fr, sp[r], sp[v], kv)
    F.unroll(sp[r])
    F.unroll(sp[v])
    F.vectorize(kv)
    ctx.rec.add(rf.op.name, "micro-kernel", "reduction outside; rows and columns unrolled; the "
                "lanes of the reduction vectorized", "each step: rows + cols vector loads, "
                "rows x cols vector FMAs")


def tile(ctx, R, T):
    """A register tile for contraction R; T: its elementwise consumer (epilogue) or None."""
    s, info = ctx.sched, ctx.infos[R]
    n = len(info.axes)
    v, r = n - 1, info.row_axis()
    dtype = R.op.output(0).dtype
    lanes = ctx.lanes(dtype) if ctx.can_vectorize(dtype) else 1
    ext_r, ext_v = info.extents[r], info.extents[v]
    mr, mv = ext_r or BIG, ext_v or BIG
    rows, vecs = tiling.register_tile(ctx.target, mr, mv, dtype, whole_rows=True)
    why = (f"{rows * vecs} accumulators fit {ctx.target.vector_registers} vector registers with the "
           f"loaded vectors; >= {ctx.target.fma_chains} independent FMA chains "
           f"({ctx.target.fma_units} units x latency {ctx.target.fma_latency})")
    # whole rows where they are as good; a ragged tail of rows where the model scores it
    # better (a prime extent, such as ViT's 197 tokens in Q K^T, leaves 1-row tiles with
    # few FMAs per load)
    alt = tiling.register_tile(ctx.target, mr, mv, dtype)
    score = tiling.tile_score(ctx.target, rows, vecs, mr, mv, dtype)
    alt_score = tiling.tile_score(ctx.target, *alt, mr, mv, dtype)
    if alt_score > score:
        why = (f"{alt[0] * alt[1]} accumulators, {alt[0] * alt[1] / sum(alt):.1f} FMAs per "
               f"load, and a ragged tail of rows: the tile model scores it {alt_score:.2f} "
               f"against {score:.2f} for the best tile of whole rows ({rows} x {vecs})")
        rows, vecs = alt
    b, bb = vector_block_axis(ctx, R, r, v, lanes), 1
    if b is not None:
        # the vector axis is a few whole vectors (a blocked layout's inner block): the
        # tile's vectors also span blocks of an outer axis that the broadcast operand
        # does not use (NCHW[x]c's channel blocks), as the hand schedules' tiles do
        vin = ext_v // lanes
        brows, bvecs = tiling.register_tile(ctx.target, mr, info.extents[b] * ext_v, dtype,
                                            whole_rows=True, whole_vecs=True)
        # the model (tiling.register_tile) weighs FMAs per load and chains: it spans
        # blocks only when that beats the vector axis alone
        if bvecs > vin and bvecs % vin == 0:
            rows, vecs, bb = brows, bvecs, bvecs // vin
            why = (f"{rows * vecs} accumulators ({bb} blocks of '{info.axes[b].var.name}' x "
                   f"{vin} vector(s)) fit {ctx.target.vector_registers} vector registers with the "
                   f"loaded vectors; >= {ctx.target.fma_chains} independent FMA chains "
                   f"({ctx.target.fma_units} units x latency {ctx.target.fma_latency}); the "
                   f"'{info.axes[v].var.name}' axis alone holds {vin} vector(s)")
    if ctx.params.tile:
        rows, vecs = ctx.params.tile[0] or rows, ctx.params.tile[1] or vecs
        why = f"given in params (the target's own tile: {why})"
        bb = 1
        if b is not None:
            vin = ext_v // lanes
            if vecs > vin and vecs % vin == 0 and info.extents[b] % (vecs // vin) == 0:
                bb = vecs // vin
    rows = max(1, min(rows, mr))
    nr = max(1, min(vecs * lanes, mv)) if bb == 1 else ext_v
    owner = T if T is not None else R
    out = owner.op.output(0)
    operand = pack_operand(ctx, R, r, v, nr) if ctx.params.pack is not False else None
    if operand is not None and ctx.params.pack is None and not pays_to_pack(ctx, R, operand, nr):
        operand = None
    flip = transposed_operand(ctx, R, r, v) \
        if operand is None and ctx.params.pack is not False else None
    if T is None:
        local = s.cache_write(R.op.output(0), "local")
        L = s[local]
        ctx.rec.add(R, "cache_write", "cache_write(local)", "the accumulator tile lives in "
                    "registers across the whole reduction; written out once")
    else:
        L = R
        ctx.rec.add(T, "fuse-epilogue", f"'{R.op.name}' computed inside '{T.op.name}''s tile",
                    "the elementwise consumer reads the accumulators straight from registers")
    packed = None
    if flip is not None:
        # before the tile's primitives: the tile reads the copy from here on
        operand = flip[0]
        packed = s.transform_layout(operand, [L.op.output(0)], flip[1])
    O = s[out]
    ax = list(O.op.axis)
    bi = None
    if bb > 1:
        bo, bi = O.split(ax[b], factor=bb)
    ro, ri = O.split(ax[r], factor=rows, tail=ctx.tail(O, ax[r], ext_r, rows))
    vo, vi = O.split(ax[v], factor=nr, tail=ctx.tail(O, ax[v], ext_v, nr))
    others = [(bo if bb > 1 and i == b else ax[i]) for i in range(n) if i not in (r, v)]
    oexts = [(info.extents[i] // bb if i == b else info.extents[i]) for i in range(n) if i not in (r, v)]
    ro_ext = None if ext_r is None else -(-ext_r // rows)
    vo_ext = None if ext_v is None else -(-ext_v // nr)
    ro_rag, vo_rag = ext_r is None or ext_r % rows != 0, ext_v is None or ext_v % nr != 0
    if operand is not None:
        outer = [(vo, vo_ext, vo_rag), (ro, ro_ext, ro_rag)]
    else:
        outer = [(ro, ro_ext, ro_rag), (vo, vo_ext, vo_rag)]
    inner = ([bi] if bi is not None else []) + [ri, vi]
    O.reorder(*others, *[x[0] for x in outer], *inner)
    if lanes > 1:
        O.vectorize(vi)
    shape = f"{rows} rows x {-(-nr // lanes)} vectors of {lanes}"
    if bb > 1:
        shape = f"{rows} rows x {bb} blocks x {-(-nr // lanes)} vector(s) of {lanes}"
    ctx.rec.add(R, "register-tile", f"tile {ax[r].var.name} x {ax[v].var.name} by {rows} x {nr} "
                + (f"and {ax[b].var.name} by {bb} " if bb > 1 else "") + f"({shape})", why)
    work = info.outputs(BIG) * info.reduce_size(BIG)
    loops = [(iv, e, False) for iv, e in zip(others, oexts)] + outer
    par = ctx.parallel_prefix(O, loops, work, "tiles", work_expr=info.work_expr())
    leaves = O.leaf_iter_vars
    at = leaves[leaves.index(inner[0]) - 1]
    L.compute_at(O, at)
    if operand is not None:
        pk = packed if packed is not None else s.cache_read(operand, "global", [L.op.output(0)])
        P = s[pk]
        # the panel is copied at the loop over column tiles (or the parallel loop that
        # contains it), so every row tile of that column reuses it
        pat = vo if vo in leaves else par
        P.compute_at(O, pat)
        pax = list(P.op.axis)
        if packed is None:
            ctx.rec.add(R, "pack", f"cache_read({operand.name}) at {pat.var.name}",
                        f"the reused operand's {nr}-wide panel is strided in '{operand.name}': "
                        "copied once per column of tiles into contiguous memory")
        else:
            ctx.rec.add(R, "pack", f"transform_layout({operand.name}, {list(flip[1])}) at "
                        f"{pat.var.name}", f"'{operand.name}' runs along the reduction, the tile "
                        f"loads vectors along '{ax[v].var.name}': its {nr}-wide panel is copied "
                        "transposed once per column of tiles")
        ctx.vector_split(P, pax[-1], None, operand.dtype, unroll=False)
    la = list(L.op.axis)
    lr = list(L.op.reduce_axis)
    tile_axes = ((b,) if bb > 1 else ()) + (r, v)
    lead = [la[i] for i in range(n) if i not in tile_axes]
    blk = [la[b]] if bb > 1 else []
    if lanes > 1 and nr > lanes:
        lvo, lvi = L.split(la[v], factor=lanes)
        L.reorder(*lead, *lr, *blk, la[r], lvo, lvi)
        L.unroll(lvo)
    else:
        lvi = la[v]
        L.reorder(*lead, *lr, *blk, la[r], lvi)
    for x in blk:
        L.unroll(x)
    L.unroll(la[r])
    if lanes > 1 and nr >= 2:
        L.vectorize(lvi)
    elif nr <= 16:
        L.unroll(lvi)
    ctx.rec.add(L, "micro-kernel", "reduction loops outside the tile; rows and vectors "
                "unrolled, lanes vectorized", "each reduction step: load the vectors, "
                "broadcast one value per row, one FMA per accumulator")


def vector_block_axis(ctx, R, r, v, lanes):
    """An outer axis the tile's vectors can span when the vector axis is only a few whole
    vectors long: every load that uses it is read along the vector axis and does not use
    the row axis (the reused operand, e.g. packed conv weights), and the operand
    broadcast per row does not use it. None when there is no such axis."""
    info = ctx.infos[R]
    ext_v = info.extents[v]
    if lanes < 2 or ext_v is None or ext_v % lanes or ext_v // lanes >= 4:
        return None
    row = info.axes[r]
    for i in range(v - 1, -1, -1):
        iv = info.axes[i]
        if i == r or info.extents[i] is None or info.extents[i] < 2:
            continue
        users = [ld for ld in info.loads if ld.uses(iv)]
        if users and all(ld.contiguous_in(info.axes[v]) and not ld.uses(row) for ld in users) \
                and any(ld.uses(row) for ld in info.loads):
            return i
    return None


def pack_operand(ctx, R, r, v, nr):
    """The operand loaded as vectors and reused across rows whose panel is strided: its
    last index moves with the vector axis, it does not use the row axis, and its rows are
    longer than the tile."""
    info = ctx.infos[R]
    row, vec = info.axes[r], info.axes[v]
    for ld in info.loads:
        if ld.uses(row) or not ld.contiguous_in(vec):
            continue
        if len(ld.pos_vars) < 2 or not any(ld.uses(k) for k in info.raxes):
            continue
        last = _static(ld.tensor.shape[-1])
        if last is None or last > nr:
            if len(info.loads_of(ld.tensor)) == 1:
                return ld.tensor
    return None


def transposed_operand(ctx, R, r, v):
    """(tensor, layout) for the operand that the tile would load as vectors along the
    vector axis but that is contiguous along the reduction (B in A @ B.T): read once, with
    constant extents, one index exactly the vector axis and the last exactly a reduction
    axis, the row axis unused. The layout moves the vector axis's dimension last."""
    info = ctx.infos[R]
    row, vec = info.axes[r], info.axes[v]
    for ld in info.loads:
        if ld.uses(row) or not ld.uses(vec) or ld.contiguous_in(vec) or len(ld.indices) < 2:
            continue
        if len(info.loads_of(ld.tensor)) != 1 or any(_static(d) is None for d in ld.tensor.shape):
            continue
        last = len(ld.indices) - 1
        dims = [d for d in range(last) if ld.index_is_axis(d, vec)]
        if len(dims) != 1 or not any(ld.index_is_axis(last, k) for k in info.raxes):
            continue
        if any(id(vec.var) in pv for d, pv in enumerate(ld.pos_vars) if d != dims[0]):
            continue
        return ld.tensor, tuple((d, None) for d in range(len(ld.indices)) if d != dims[0]) \
            + ((dims[0], None),)
    return None


# a reduction this long, and as many rows and columns, amortize a transposed
# copy of the operand (one pass over it); shorter ones (attention's Q K^T over a head of
# 64, small dense layers) stay dot products
TRANSPOSE_MIN_REDUCTION = 256


def transpose_pays(ctx, R) -> bool:
    """The register tile with a transposed panel beats the dot-product tile: the
    reduction is long and there are rows enough to reuse each panel."""
    info = ctx.infos[R]
    if ctx.params.pack is False or ctx.params.tile:
        return False
    n = len(info.axes)
    r = info.row_axis()
    if r is None or r == n - 1 or transposed_operand(ctx, R, r, n - 1) is None:
        return False
    ext_k, ext_r, ext_v = info.rextents[-1], info.extents[r], info.extents[n - 1]
    if None in (ext_k, ext_r, ext_v):
        return False
    # measured: with fewer rows or columns the copies and the few column tiles (the
    # parallel loop) cost more than the dot-product tile loses
    # ragged tiles (a tail of rows or columns) measured slower than the dot-product tile
    return ext_k >= TRANSPOSE_MIN_REDUCTION and ext_r >= TRANSPOSE_MIN_REDUCTION \
        and ext_v >= TRANSPOSE_MIN_REDUCTION and ext_r % 8 == 0 and ext_v % 32 == 0


def pays_to_pack(ctx, R, operand, nr):
    """A copy pays when the panel (reduction steps x tile width) outgrows the L1 cache:
    then the strided rows keep missing; a small panel stays cached as it is."""
    info = ctx.infos[R]
    (ld,) = info.loads_of(operand)
    steps = 1
    for k, e in zip(info.raxes, info.rextents):
        if ld.uses(k):
            steps *= BIG if e is None else e
    from .. import dtype as dt
    return steps * nr * dt.bits(operand.dtype) // 8 > ctx.target.cache_bytes(1) // 2


def _static(e):
    from .analysis import const_extent
    return e if isinstance(e, int) else const_extent(e)


DOT_TILE = DotTile()
REGISTER_TILE = RegisterTile()
