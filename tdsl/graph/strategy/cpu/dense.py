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


def row_tile(target, M, N, dtype="float32"):
    """(mr, nr, whole) of a dense layer's register tile over a symbolic number of rows
    (`M` a representative one). `whole`: one copy of the tile, its row loop kept whole
    (the pragma ("partition", False)) and each row guarded, the first false guard
    leaving the tile's rows, for whole tiles and the rows they leave alike, with the
    tallest of the best tiles (8 rows x 2 vectors on AVX-512), so that 1 to 8 rows (a
    few tokens) take one pass over each column block's weights: 0.8-1.18x the static
    kernel at 1 to 8 rows on Zen 5, mostly 1.02-1.14x (1.1-3.0x at 2 to 7 rows with a
    variant of one row below a tile of 4 or 8 rows and that tile shifted back above
    it, the scheme before), 1.08-1.17x at 9, 0.99-1.04x at 64; a guard-free copy for whole tiles besides ran large row counts
    ~3% faster but made a dynamic BERT's build ~8% slower.
    Only with 32 vector registers (AVX-512) and a tile that leaves a quarter of them
    free: the accumulators' values where the guards leave take registers of their
    own, and on AVX2's 16 the guarded tile spilled in its loop over K (4 x 3: 2-3x the
    static kernel at every row count; 4 x 2, 256 x 32 weights: 1.9x at 64 rows where
    the shifted tile ran 1.3x); there the tile is the static one's, shifted back, with
    a variant of one row below it."""
    t = tdsl.target.as_target(target)
    mr, nr = tiling.gemm_tile(t, M, N, dtype, tall=True)
    vecs = nr // t.vector_lanes(dtype)
    if t.vector_registers >= 32 and mr * vecs + vecs + 1 <= 3 * t.vector_registers // 4:
        return mr, nr, True
    return (*tiling.gemm_tile(t, M, N, dtype), False)


def schedule(s, out, g, parallel=True):
    info, target = g.anchor.tensor.op.attrs, g.target
    D, lanes = info["dense"], info["lanes"]
    inline_except(s, out, [D])
    if D is out:
        D = s.cache_write(out, "local")
    M, N = ishape(out)
    # rows of a symbolic size (M is then a representative number): the column blocks
    # outside, so the threads split the weights, whose number is known. More rows than
    # columns, which a static schedule puts outside, take no variant: the column blocks
    # outside ran as fast there (BERT and GPT-2 at 8x128: 0.99x, one thread's CPU time),
    # and such a variant of each dense layer was a tenth of a dynamic BERT's or GPT-2's
    # build
    symbolic = not isinstance(out.shape[0], int) and getattr(out.shape[0], "value", None) is None
    if symbolic:
        mr, nr, whole = row_tile(target, M, N, out.dtype)
    else:
        (mr, nr), whole = tiling.gemm_tile(target, M, N, out.dtype), False
    if symbolic and not whole and g.size_class is None and mr > 1:
        # fewer rows than a tile (a single token) run a variant tiled for one row
        g.size_classes["small"] = out.shape[0] < mr
    # without it, the rows' last tile shifted back onto the one before (their outputs
    # computed twice, the same both times: the accumulator is the tile's own) instead of
    # a guarded copy of the tile, where the kernel never runs with fewer rows than a
    # tile: the default kernel, below which "small" runs; not a kernel generic in its
    # channel count, which no variant fronts
    shift = symbolic and not whole and g.classes_run and g.size_class is None and mr > 1
    mo, mi = s[out].split(out.op.axis[0], factor=mr, tail="shift" if shift else "guard")
    if whole:
        s[out].pragma(mo, "partition", False)
    no, ni = s[out].split(out.op.axis[1], factor=nr)
    s[out].reorder(mo, no, mi, ni)
    s[out].vectorize(ni)
    # the operand re-read by the inner tile loop should be the smaller one: with more
    # weight columns than rows (a language model's vocabulary projection: 50k x 256
    # weights, 128 rows) the columns go outside, so each packed weight panel streams from
    # memory once instead of once per row block
    cols_outer = N > M or symbolic and g.size_class is None
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
    K = topi.dim(D.op.reduce_axis[0].dom.extent) if hasattr(D.op.reduce_axis[0], "dom") else 1
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
