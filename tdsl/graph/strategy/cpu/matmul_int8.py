"""The integer matmul of quantized networks (qnn.matmul: uint8 data, constant int8 (K, N)
weights with zero point 0; the dense layers and projections of a QDQ network) on
AVX512-VNNI: the weights packed once as [N/16][K/4][16][4], one `vpdpbusd` per 16
columns x 4 products, in the low-precision GEMM's micro-kernel (examples/lowp_gemm.py,
autosched/cpu_tensorize.dot_micro_kernel), the leading axes of the data rows of one GEMM.
sum((a - z) * w) = sum(a * w) - z * sum(w): the products stay unsigned x signed bytes, the
zero point's share is one int32 per column (the weights' column sums, a derived constant).
Where the register tile does not divide the output (GPT-2's 50257-word head, ViT's 197
tokens) whole tiles go to a root stage that the output reads."""
from __future__ import annotations

import numpy as np

import tdsl

from .... import tiling
from ....autosched.cpu_tensorize import dot_micro_kernel
from ....te import intrin_x86
from .. import tag, topi
from ..stages import stages_of
from .loops import vec_split

LANES, GROUP = intrin_x86.LANES, 4


def applies(g, n):
    """qnn.matmul on a VNNI target: uint8 data in a group parameter with static sizes and
    one constant zero point, constant int8 (K, N) weights of zero point 0, K a multiple
    of 4."""
    a_e, b_e, az_e, bz_e = n.args
    bi, azi, bzi = g.const_param(b_e), g.const_param(az_e), g.const_param(bz_e)
    if None in (bi, azi, bzi) or a_e not in g.pidx or not g.target.has_vnni or len(b_e.type.shape) != 2 \
            or a_e.type.dtype != "uint8" or b_e.type.dtype != "int8" or np.any(g.consts[bzi] != 0) \
            or g.consts[azi].size != 1:
        return False
    return b_e.type.shape[0] % GROUP == 0 and all(isinstance(d, int) for d in a_e.type.shape)


def qmatmul(g, n, tensors):
    """The VNNI form of node `n` (qnn.matmul)."""
    a_e, b_e, az_e, bz_e = n.args
    bi, azi = g.const_param(b_e), g.const_param(az_e)
    K, N = b_e.type.shape
    a = g.param_tensor(g.pidx[a_e])
    lead = tuple(a_e.type.shape[:-1])
    R = int(np.prod(lead))
    NB = -(-N // LANES)
    mr, vecs = tiling.register_tile(g.target, R, NB * LANES, "int32", whole_vecs=True)
    Rp = -(-R // mr) * mr

    def pack(b):
        bp = np.zeros((K, NB * LANES), np.int8)
        bp[:, :N] = b
        return np.ascontiguousarray(bp.reshape(K // GROUP, GROUP, NB, LANES).transpose(2, 0, 3, 1))
    Bp = g.packed_param(bi, (NB, K // GROUP, LANES, GROUP), pack)
    sums = g.derived_param(bi, 1, (N,), "int32",
                           lambda b: b.astype(np.int32).sum(axis=0, dtype=np.int32))
    zi = g.param_tensor(azi)[()].astype("int32")
    k = tdsl.reduce_axis((0, K), "k")
    # the leading axes are rows of one GEMM (a (197, 1, 768) sequence-first activation is
    # 197 rows, not 197 GEMMs of one); rows past R (a ragged last tile) read row R - 1
    L = tdsl.compute((Rp, NB * LANES), lambda r, j: tdsl.sum(
        a[_unravel(tdsl.min(r, R - 1) if Rp > R else r, lead) + (k,)].astype("int32") *
        Bp[j // LANES, k // GROUP, j % LANES, k % GROUP].astype("int32"), axis=k), name=topi.uname("qmatmul"))
    # columns past N (a ragged last block) repeat N - 1's sum: of no meaning
    if Rp == R and NB * LANES == N:
        O = tdsl.compute(lead + (N,), lambda *i: L[_ravel(i[:-1], lead), i[-1]] - zi * sums[i[-1]],
                         name=topi.uname("qmatmul_out"))
        return tag.mark(O, tag.QMATMUL_VNNI, sum=L, blocked=None, tile=(mr, vecs))
    # a tile that does not divide the output: whole tiles into a root stage, which the
    # output reads (a tile cut short would narrow the accumulators below the instruction's
    # 16 lanes, or its rows below the unrolled ones)
    Ob = tdsl.compute((Rp, NB * LANES), lambda r, j: L[r, j] - zi * sums[tdsl.min(j, N - 1)],
                      name=topi.uname("qmatmul_out"))
    out = tdsl.compute(lead + (N,), lambda *i: Ob[_ravel(i[:-1], lead), i[-1]], name=topi.uname("unpad"))
    return tag.mark(out, tag.QMATMUL_VNNI, sum=L, blocked=Ob, tile=(mr, vecs))


def schedule(s, out, g, parallel=True):
    info, target = g.anchor.tensor.op.attrs, g.target
    L, Ob = info["sum"], info["blocked"]
    keep = {L} | ({Ob} if Ob is not None else set())
    for t in stages_of(out):
        if t is not out and t not in keep:
            s[t].compute_inline()
    if Ob is not None:      # the output reads the whole blocks of a root stage
        *lead, j = out.op.axis
        rows = s[out].fuse(*lead) if len(lead) > 1 else lead[0]
        if parallel:
            s[out].parallel(rows)
        vec_split(s, out, j, topi.dim(out.shape[-1]), target)
        out = Ob
    *lead, j = out.op.axis
    rows = s[out].fuse(*lead) if len(lead) > 1 else lead[0]
    mr, vecs = info["tile"]
    no, mo = dot_micro_kernel(s, s[out], s[L], mr, vecs, GROUP, intrin_x86.dot_u8s8_int32(target), (rows, j))
    par = s[out].fuse(no, mo)
    if parallel:
        s[out].parallel(par)


def _unravel(r, shape):
    idx = []
    for d in reversed(shape[1:]):
        idx.append(r % d)
        r = r // d
    return (r,) + tuple(reversed(idx))


def _ravel(idx, shape):
    r = idx[0]
    for i, d in zip(idx[1:], shape[1:]):
        r = r * d + i
    return r
