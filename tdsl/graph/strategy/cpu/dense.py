"""Dense with constant weights packed at build time, (N/lanes, K, lanes): a register tile
of rows x column vectors accumulates over K, each step loading whole vectors of packed
weights and broadcasting the rows' elements."""
from __future__ import annotations

import numpy as np

import tdsl

from .... import tiling
from ....ir import expr as E
from .. import tag, topi
from ..stages import ishape
from .loops import PAR_MIN_MACS, inline_except, parallel_loop

# how much better than gemm_tile's tile a shifted one must score (static_tile): where the
# rows' count has small divisors only, gemm_tile took a tile of few FMAs per load, ViT's
# 394 rows at 2 images (2 x 197) a 2-row tile, 8 FMAs for 6 loads, which the model scores
# 1.19x below the 4-row tile shifted and which ran 1.4x slower than the dynamic build's
# (issue 44); a close call (AVX2's 6 rows against 4 on BERT's 128, 1.04x) keeps its code
SHIFT_GAIN = 1.1


def applies(g, n):
    """nn.dense of a float32 group parameter by constant weights (the rows may be a
    symbolic size: a batch, or batch x sequence)."""
    x_e, w_e = n.args
    return g.const_param(w_e) is not None and x_e.type.dtype == "float32" and x_e in g.pidx \
        and isinstance(x_e.type.shape[1], int)


def dense_packed(g, n, tensors):
    x_e, w_e = n.args
    wi = g.const_param(w_e)
    x = g.param_tensor(g.pidx[x_e])
    M, K = x.shape[0], x_e.type.shape[1]
    N = w_e.type.shape[0]
    lanes = g.target.vector_lanes(x_e.type.dtype)
    nb = -(-N // lanes)

    def pack(w):
        # from w.T, (K, N): contiguous when w is a folded transpose of MatMul's (K, N)
        # weights, so packing is one copy of `lanes`-long runs, not a transpose
        wp = w.T
        if N % lanes:
            wp = np.zeros((K, nb * lanes), w.dtype)
            wp[:, :N] = w.T
        return np.ascontiguousarray(wp.reshape(K, nb, lanes).transpose(1, 0, 2))
    Wp = g.packed_param(wi, (nb, K, lanes), pack)
    k = tdsl.reduce_axis((0, K), "k")
    D = tdsl.compute((M, N), lambda i, j: tdsl.sum(x[i, k] * Wp[j // lanes, k, j % lanes], axis=k), name=topi.uname("dense"))
    return tag.mark(D, tag.DENSE_PACKED, dense=D, lanes=lanes)


def schedule(s, out, g, parallel=True):
    info, target = g.anchor.tensor.op.attrs, g.target
    D, lanes = info["dense"], info["lanes"]
    inline_except(s, out, [D])
    if D is out:
        D = s.cache_write(out, "local")
    M, N = ishape(out)
    # rows of a symbolic size (M is then a representative number): the column blocks
    # outside, so the threads split the weights, whose number is known; a size class
    # where that is wrong: fewer rows than a tile at run time (a single token), whose
    # guarded rows would do the work of a whole tile. More rows than columns, which a
    # static schedule puts outside, take no variant: the column blocks outside ran as
    # fast there (BERT and GPT-2 at 8x128: 0.99x, one thread's CPU time), and such a
    # variant of each dense layer was a tenth of a dynamic BERT's or GPT-2's build
    symbolic = not isinstance(out.shape[0], int) and getattr(out.shape[0], "value", None) is None
    if symbolic:
        mr, nr = tiling.gemm_tile(target, M, N, out.dtype)
        # the rows' last tile shifted back onto the one before (their outputs computed
        # twice, the same both times: the accumulator is the tile's own) instead of a
        # guarded copy of the tile, where the kernel never runs with fewer rows than a
        # tile: the default kernel, below which "small" runs; not a kernel generic in its
        # channel count, which no variant fronts
        shift = g.classes_run and g.size_class is None and mr > 1
        if g.size_class is None and mr > 1:
            g.size_classes["small"] = out.shape[0] < mr
    else:
        mr, nr, shift = static_tile(target, M, N, out.dtype)
    mo, mi = s[out].split(out.op.axis[0], factor=mr, tail="shift" if shift else "guard")
    no, ni = s[out].split(out.op.axis[1], factor=nr)
    s[out].reorder(mo, no, mi, ni)
    s[out].vectorize(ni)
    # the operand re-read by the inner tile loop should be the smaller one: with more
    # weight columns than rows (a language model's vocabulary projection: 50k x 256
    # weights, 128 rows) the columns go outside, so each packed weight panel streams from
    # memory once instead of once per row block. More rows than columns put the rows
    # outside only where the packed weights, re-read by every row tile, stay in L2:
    # ViT's 768x768 and 3072x768 weights (2.4 and 9.4 MB) at 788 rows ran 1.2-1.3x
    # slower so than with the columns outside, the dynamic build's order (issue 44), and
    # Whisper's 256x1024 and 1024x256 (1 MB, 1500 rows) 1.3x (one thread, Zen 5)
    K = topi.dim(D.op.reduce_axis[0].dom.extent) if hasattr(D.op.reduce_axis[0], "dom") else 1
    weights_in_l2 = K * N * np.dtype(out.dtype).itemsize <= target.cache_bytes(2) // 2
    cols_outer = N > M or (g.size_class is None if symbolic else not weights_in_l2)
    if cols_outer:
        s[out].reorder(no, mo, mi, ni)
    s[D].compute_at(s[out], mo if cols_outer else no)
    mc, nc = s[D].op.axis
    (k,) = s[D].op.reduce_axis
    nco, nci = s[D].split(nc, factor=lanes)
    s[D].reorder(k, mc, nco, nci)
    s[D].unroll(mc)
    s[D].unroll(nco)
    s[D].vectorize(nci)
    if not (parallel and M * N * K >= PAR_MIN_MACS):
        return
    # a fused loop keeps a guard in its body when a tile is ragged: parallelize the
    # unfused loop instead, so that loop partitioning peels the ragged tiles off
    outer, inner = (no, mo) if cols_outer else (mo, no)
    outer_n = -(-N // nr) if cols_outer else -(-M // mr)
    macs = E.cast(out.shape[0], "int64") * (N * K) if symbolic else M * N * K
    if M % mr == 0 and N % nr == 0 and not symbolic:
        parallel_loop(s, out, s[out].fuse(outer, inner), macs, PAR_MIN_MACS)
    elif outer_n >= 2 * target.num_cores:
        parallel_loop(s, out, outer, macs, PAR_MIN_MACS)
    else:
        s[out].reorder(inner, outer, mi, ni)
        parallel_loop(s, out, inner, macs, PAR_MIN_MACS)


def static_tile(target, M: int, N: int, dtype="float32"):
    """(rows, columns, shift) of the register tile of a dense of `M` static rows:
    `tiling.gemm_tile`'s, or, where it scores SHIFT_GAIN times better, the best tile that
    does not divide `M` with the rows' last tile shifted back onto the one before
    (`shift`), its overlap counted as waste (as width.shifted_row_tile does for a conv's
    row). gemm_tile scores a ragged tail as a second, guarded copy of the micro-kernel
    (tiling.RAGGED_ROWS), which the shifted tail does not have: where gemm_tile's own tile
    is ragged (a prime count, ViT's 197 rows) it is that tile, shifted instead of guarded
    (0.99-1.01x on one thread, as the dynamic kernel runs it). The shift needs a tile of
    rows at least: register_tile takes no more rows than `M`."""
    rows, vecs = tiling.register_tile(target, M, N, dtype)
    srows, svecs = tiling.register_tile(target, M, N, dtype, ragged_rows=1.0)
    covered = -(-M // srows) * srows
    shifted = tiling.tile_score(target, srows, svecs, M, N, dtype, ragged_rows=1.0) * M / covered
    if M % srows and shifted > SHIFT_GAIN * tiling.tile_score(target, rows, vecs, M, N, dtype):
        return srows, svecs * target.vector_lanes(dtype), True
    return rows, vecs * target.vector_lanes(dtype), False
