"""`nn.attention` (topi_attention.py) a block of query rows at a time: the parallel loop
runs over batch x heads x row blocks; inside it, the block's scores against every key
are computed into a buffer (R rows x N keys, kept in L2), the softmax runs in place over
it (a vector max and a vector sum per row, rfactored over the lanes), and P V
accumulates in a register tile of rows x the value's vectors. The exact two-pass
softmax: a block's whole row of scores fits in cache, so nothing is rescaled as an
online softmax would.

Register tiles are sized from the target's vectors (lanes and registers): q K^T keeps
the GEMM micro-kernel's rows x key vectors of accumulators (tiling.gemm_tile), P V `rt`
rows x the micro-kernel's value vectors.

With symbolic sizes (a dynamic batch or sequence) the same loops take run-time extents:
the row blocks (sized for the representative sequence) end in a block shifted back onto
the one before (self-attention, whose rows are at least SHORT_KEYS keys; else a guarded
block), and so do the tiles of keys of q K^T and the vectors of exp (at least
SHORT_KEYS keys), so the micro-kernels have one copy each and no guard; only the max
and the sum keep a guarded last block. Each block's scores are scratch of that call's
length, taken per iteration of the parallel loop (so concurrent calls never share one).
Below SHORT_KEYS keys the size class "short_keys" runs instead: the same blocked schedule
over the definition padded (`short_keys`: topi_attention's `pad`) to rows of SHORT_KEYS
keys and blocks of SHORT_ROWS query rows, the keys past the call's scoring -inf and the
rows past it never stored, so every stage has constant extents: one copy of each
micro-kernel and no tails (the plain stages' 8-row tiles with guarded tails of rows
and keys were three times its code). At a single key (a one-token call) the class "one"
runs: the plain stages with the key count pinned to 1 (`schedule_one`)."""
from __future__ import annotations

import functools
import operator

from .... import arith, tiling
from ....ir.expr import EQ, IntImm, const, logical_and
from ....ir.visitor import free_vars
from .. import tag, topi_attention
from . import loops
from ..stages import ishape

# query rows per block: the scores block (R x N floats, twice: scores and exp) stays in
# L2 for N of several thousand keys, and a block is R broadcasts per loaded key vector
ROW_BLOCKS = (16, 12, 10, 8, 6, 4)
PARTIALS = 4      # vectors of partial maxima and sums per row
# keys below which a kernel with a symbolic key count runs its "short_keys" variant, the
# padded definition: from here a block's last rows and keys shift back onto full tiles
# (a row block and a tile of keys are at most this long), so the blocked kernel has no
# guarded copies, and measured as fast as the three kernels it replaces or faster;
# below it, a whole row would be one guarded tile, about twice as slow
SHORT_KEYS = 32
# query rows per block of the "short_keys" variant (its rows padded to a multiple): one
# register tile of q K^T and of P V, 4 rows x 2 vectors of accumulators (on AVX-512 as
# many independent FMAs as its two FMA ports keep in flight), so a single query pads 3
# rows, not the 7 of an 8-row block, which ran it slower than the plain stages did
SHORT_ROWS = 4


def _register_tile(s, t, lanes):
    """A product's accumulators in registers: per step of its reduction, every row of the
    tile and each vector of its last axis, unrolled."""
    (k,) = t.op.reduce_axis
    i, j = t.op.axis[2], t.op.axis[3]
    jo, ji = s[t].split(j, factor=lanes)
    s[t].reorder(k, i, jo, ji)
    s[t].unroll(i)
    s[t].unroll(jo)
    s[t].vectorize(ji)


def fits(out, g):
    return out.op.tag == tag.ATTENTION and g.size_class not in ("short_keys", "one")


def fits_one(out, g):
    return out.op.tag == tag.ATTENTION and g.size_class == "one"


def schedule_one(s, out, g, parallel=True):
    """`nn.attention` in the size class "one" (the key count pinned to 1): a batch row's
    heads (and queries) a parallel step, each stage a loop over them computed there, P V
    one value vector at a time in a register, divided as it is stored. The heads' loops
    are independent chains (a dot product's reduction tree, an exp) that the core
    overlaps: one loop over rows with every stage at the row ran 1.4x slower (BERT's 12
    heads, one thread); one loop per stage over all rows (the auto-scheduler's, three of
    them parallel) as fast as this one, but LLVM vectorized and unrolled its loops over
    the run-time rows: 1.6x this one's LLVM time, for a kernel of a tenth of a
    microsecond per batch row."""
    a = out.op.attrs
    lanes = g.target.vector_lanes(out.dtype)
    b, _, _, e = out.op.axis
    if parallel:
        loops.parallel_loop(s, out, b, functools.reduce(operator.mul, out.shape), loops.PAR_MIN_ELEMS)
    eo, ei = s[out].split(e, factor=lanes)
    s[out].vectorize(ei)
    for k in ("dot", "scores", "max", "exp", "sum"):
        s[a[k]].compute_at(s[out], b)
    acc = a["acc"]
    s[acc].compute_at(s[out], eo)
    s[acc].vectorize(acc.op.axis[3])


def short_keys(g, n, tensors):
    """`nn.attention` in the size class "short_keys" (fewer keys than SHORT_KEYS): rows of
    SHORT_KEYS keys, blocks of SHORT_ROWS query rows, what lies past the call's padded."""
    return topi_attention.attention([g.operand(a, tensors) for a in n.args], g.attrs_of(n), g.node_type(n),
                                    pad=(SHORT_KEYS, SHORT_ROWS))


def in_short_keys(g, n):
    return g.size_class == "short_keys"


def _rows(M):
    """(rows per block, whether the last block shifts): the largest of ROW_BLOCKS dividing
    M (no ragged block inside the parallel loop), else the largest block M holds, the last
    one shifted back onto the one before (rows computed twice, the same both times: a
    guard on each row of the micro-kernels cost more than the repeated rows, 515 rows in
    8-row guarded blocks ran at half the speed), else 8 rows guarded."""
    r = next((r for r in ROW_BLOCKS if M % r == 0), None)
    if r is not None:
        return r, False
    r = next((r for r in ROW_BLOCKS if r <= M), None)
    return (r, True) if r is not None else (8, False)


def _divisor_at_most(n, limit):
    return max(d for d in range(1, max(1, min(n, limit)) + 1) if n % d == 0)


def schedule(s, out, g, parallel=True):
    a = out.op.attrs
    dot, scores, mx, ex, sm, acc = (a[k] for k in ("dot", "scores", "max", "exp", "sum", "acc"))
    target = g.target
    lanes = target.vector_lanes(out.dtype)
    regs = target.vector_registers
    B, H, M, E = ishape(out)
    keys = scores.shape[3]
    short_routed = g.symbolic and g.size_class is None and g.classes_run and not isinstance(keys, (int, IntImm))
    if short_routed:
        # a dynamic sequence: below SHORT_KEYS the padded variant runs, and at a single
        # key (a one-token call) the plain stages with the key count a constant, as a
        # static build's (padded to SHORT_KEYS, one key still pays a whole row)
        one = sorted(free_vars(keys), key=lambda v: v.name)
        g.size_classes["one"] = functools.reduce(logical_and, [EQ(v, const(1, v.dtype)) for v in one])
        g.size_pins["one"] = {v.name: 1 for v in one}
        g.size_classes["short_keys"] = keys < SHORT_KEYS
    padded = "queries" in a
    R, shift = (SHORT_ROWS, False) if padded else _rows(M)
    rows = out.shape[2]
    if not padded and not isinstance(rows, (int, IntImm)):
        # the last row block shifted back onto the one before (its rows computed twice,
        # the same both times: each row's scores, softmax and P V are the block's own)
        # instead of a guarded copy of the block, where this kernel never runs with fewer
        # rows than a block: self-attention's queries are its keys, at least SHORT_KEYS here
        shift = short_routed and arith.equal(rows, keys) and R <= SHORT_KEYS
    # P V: rt rows x ev value vectors of accumulators (the GEMM micro-kernel's columns),
    # plus the ev value vectors and a broadcast
    ev = max(1, min(E, tiling.gemm_tile(target, R, E, out.dtype)[1]) // lanes)
    rt = _divisor_at_most(R, max(1, (regs - ev - 2) // ev))

    b, h, i, e = out.op.axis
    io, ii = s[out].split(i, factor=R, tail="shift" if shift else "guard")
    iio, iii = s[out].split(ii, factor=rt)
    eo, ei = s[out].split(e, factor=ev * lanes)
    s[out].reorder(b, h, io, iio, eo, iii, ei)
    block = s[out].fuse(b, h, io)
    if parallel:
        s[out].parallel(block)
    eio, eii = s[out].split(ei, factor=lanes)
    s[out].vectorize(eii)

    if padded:
        # a whole block of padded rows, so that P V has no tail of rows (the output's
        # loops, guarded, only divide by the sums)
        s[acc].compute_at(s[out], block)
        aio, aii = s[acc].split(acc.op.axis[2], factor=rt)
        aeo, aei = s[acc].split(acc.op.axis[3], factor=ev * lanes)
        aeio, aeii = s[acc].split(aei, factor=lanes)
        s[acc].reorder(aio, aeo, *acc.op.reduce_axis, aii, aeio, aeii)
        s[acc].unroll(aii)
        s[acc].unroll(aeio)
        s[acc].vectorize(aeii)
        qp = a["queries"]
        s[qp].compute_at(s[out], block)
        s[qp].vectorize(qp.op.axis[3])
    else:
        s[acc].compute_at(s[out], eo)
        _register_tile(s, acc, lanes)

    for t in (scores, mx, ex, sm):
        s[t].compute_at(s[out], block)
    # q K^T: the GEMM micro-kernel's mr rows x nr keys of accumulators per step of the
    # head dimension (12 x 2 vectors with AVX-512's 32 registers, 4 x 3 with AVX2's 16)
    mr, nr = tiling.gemm_tile(target, R, ishape(scores)[3], out.dtype)
    mr = _divisor_at_most(R, mr)
    si, sj = scores.op.axis[2], scores.op.axis[3]
    sio, sii = s[scores].split(si, factor=mr)
    # keys: at least SHORT_KEYS where the short class takes shorter rows, so the last
    # tile of keys shifts back onto the one before (its scores computed twice, the same
    # both times) instead of a guarded copy of the micro-kernel, and the block's scratch
    # holds the keys and no more (schedule.bound cuts a shifted stage's region to its
    # tensor: the max's and sum's guarded blocks would ask for a multiple of theirs)
    kshift = "shift" if short_routed and max(nr, lanes) <= SHORT_KEYS else "guard"
    sjo, sji = s[scores].split(sj, factor=nr, tail=kshift)
    s[scores].reorder(sio, sjo, sii, sji)
    s[scores].vectorize(sji)
    s[dot].compute_at(s[scores], sjo)
    _register_tile(s, dot, lanes)

    ejo, eji = s[ex].split(ex.op.axis[3], factor=lanes, tail=kshift)
    s[ex].vectorize(eji)
    # the row's max and sum: PARTIALS vectors of partial results along the keys
    # (independent chains), added as vectors, then one vector's lanes. A padded row (the
    # short_keys variant's SHORT_KEYS keys, a few vectors) goes one vector of partials
    # straight to the lanes: a level less of code, and faster (short_keys 4-6% at 2 to
    # 31 keys, LLVM 6-13 ms less for BERT's)
    for t in (mx, sm):
        (k,) = t.op.reduce_axis
        rfs = []
        if not padded:
            _, ki = s[t].split(k, factor=lanes * PARTIALS)
            rfs = [s.rfactor(t, ki)]
            (k,) = s[t].op.reduce_axis      # rfactor gave the stage a new operation
        _, kvi = s[t].split(k, factor=lanes)
        rfs.append(s.rfactor(t, kvi))
        for rf in rfs:
            s[rf].compute_at(s[t], s[t].op.axis[2])
            vo, vi = s[rf].split(rf.op.axis[0], factor=lanes)
            s[rf].reorder(*rf.op.reduce_axis, vo, vi)
            s[rf].unroll(vo)
            s[rf].vectorize(vi)
