"""Convs and dense with constant weights re-laid out at build time: which definition a conv
takes (`conv_path`; the blocked NCHW[x]c conv itself is conv_blocked.py), the
register-blocked dense with its schedule, and the depthwise conv with a column stride."""
from __future__ import annotations

import numpy as np

import tdsl

from .... import tiling
from .. import topi
from ..stages import _ishape
from . import conv1x1, conv_blocked, conv_spatial, squeeze
from .loops import PAR_MIN_MACS, _inline_except


def conv_fast(g, n, tensors):
    """nn.conv2d and nn.conv3d (conv1d arrives as a conv2d of one row: passes/conv_forms)
    and their transposes, groups 1, constant weights."""
    x_e, w_e = n.args
    wi = g.const_param(w_e)
    if wi is None or x_e.type.dtype != "float32" or n.attrs["groups"] != 1:
        return None
    if n.op.endswith("_transpose"):
        if id(x_e) not in g.pidx:
            return None
        return conv_blocked.conv_transpose(g, n, g.param_tensor(g.pidx[id(x_e)]), wi)
    x = g.param_tensor(g.pidx[id(x_e)]) if id(x_e) in g.pidx else None
    if x is None:
        scaled = _channel_scaled_input(g, x_e, tensors)
        if scaled is None:
            return None
        # conv(x * s[ci], W) = conv(x, W * s[ci]): the conv reads x as it is and scales its
        # (packed) weights once per call, CO*CI*KH*KW multiplies instead of a pass over x
        x, g.channel_scale = scaled
        try:
            return _conv2d_strategy(g, n, x, wi)
        finally:
            g.channel_scale = None
    return _conv2d_strategy(g, n, x, wi)


def conv_blocked_fast(g, n, tensors):
    """nn.conv2d_blocked (ir/ops_layout.py), its input as it is or the squeeze-excite
    multiply fused into it (the scale then goes into the packed weights, as in conv_fast)."""
    x_e = n.args[0]
    if id(x_e) in g.pidx:
        return conv_blocked.conv2d_blocked(g, n, g.param_tensor(g.pidx[id(x_e)]))
    scaled = _channel_scaled_input(g, x_e, tensors) if n.attrs["groups"] == 1 else None
    if scaled is None:
        return None
    x, g.channel_scale = scaled
    try:
        return conv_blocked.conv2d_blocked(g, n, x)
    finally:
        g.channel_scale = None


def _channel_scaled_input(g, x_e, tensors):
    """(image, per-channel scale) placeholders when the conv's input is the squeeze-excite
    multiply that fuse_ops moved into this group (batch 1: one scale per input channel)."""
    if id(x_e) not in tensors or getattr(x_e, "op", None) != "multiply" or x_e.type.shape[0] != 1:
        return None
    big = [a for a in x_e.args if a.type.shape == x_e.type.shape]
    small = [a for a in x_e.args if a.type.shape != x_e.type.shape]
    if len(big) != 1 or len(small) != 1 or not all(id(a) in g.pidx for a in (big[0], small[0])):
        return None
    return g.param_tensor(g.pidx[id(big[0])]), g.param_tensor(g.pidx[id(small[0])])


def conv_path(g, n):
    """Which definition takes conv node `n`: "matvec" (a 1x1 image), "rows" (stems, convs
    whose blocked tile is latency-bound), "1x1" (conv1x1.py) or "blocked" (NCHW[x]c; the
    only one with other than two spatial dimensions)."""
    if n.op != "nn.conv2d":
        return "blocked"
    CO = n.args[1].type.shape[0]
    bn = g.target.vector_lanes(n.args[0].type.dtype)
    # the blocked conv's register tile: rows must divide the output row, so a prime width
    # (13 in squeezenet) on 16 registers leaves it one accumulator; the strategies that
    # vectorize along the image take such convs
    xb, cbb = tiling.register_tile(g.target, n.type.shape[3], -(-CO // bn) * bn, whole_rows=True,
                                   whole_vecs=True)
    if squeeze.is_matvec_conv(n):
        return "matvec"
    if conv_spatial.applies(g, n, xb * cbb):
        return "rows"
    if conv1x1.applies(g, n, xb * cbb):
        return "1x1"
    return "blocked"


def _conv2d_strategy(g, n, x, wi):
    path = conv_path(g, n)
    if path == "matvec":
        return squeeze.conv_matvec(g, n, x, wi)
    if path == "rows":
        return conv_spatial.conv2d_rows(g, n, x, wi)
    if path == "1x1":
        return conv1x1.conv1x1(g, n, x, wi)
    return conv_blocked.conv_padded(g, n, x, wi)


def dense_fast(g, n):
    x_e, w_e = n.args
    wi = g.const_param(w_e)
    if wi is None or x_e.type.dtype != "float32" or id(x_e) not in g.pidx:
        return None
    x = g.param_tensor(g.pidx[id(x_e)])
    M, K = x_e.type.shape
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
    g.anchor = (D, {"kind": "dense_packed", "dense": D, "lanes": lanes})
    return D


def depthwise_strided_fast(g, n, tensors):
    """Depthwise 2-D conv with a column stride: the padded input is stored split by column
    phase, (N, C, Hp, sw, Wq) with [.., r, p, q] = padded[.., r, q * sw + p], so every tap
    reads a contiguous run of the row (one strided read per input element instead of one
    per tap)."""
    x_e, w_e = n.args
    a = n.attrs
    N, C, H, W = x_e.type.shape
    CO, CI, KH, KW = w_e.type.shape
    (sh, sw), (dh, dw) = a["strides"], a["dilation"]
    if x_e.type.dtype != "float32" or a["groups"] != C or CO != C or CI != 1 or sw == 1:
        return None
    x = g.operand(x_e, tensors)
    w = g.operand(w_e, tensors)
    pt, pl = a["padding"][0], a["padding"][1]
    OH, OW = n.type.shape[2:]
    hp = (OH - 1) * sh + (KH - 1) * dh + 1
    wq = OW + ((KW - 1) * dw) // sw
    ph = topi.phase_split_pad(x, hp, wq, sw, pt, pl)
    ky = tdsl.reduce_axis((0, KH), "ky")
    kx = tdsl.reduce_axis((0, KW), "kx")
    y = tdsl.compute((N, C, OH, OW), lambda b, ch, oy, ox: tdsl.sum(
        ph[b, ch, oy * sh + ky * dh, (kx * dw) % sw, ox + (kx * dw) // sw] * w[ch, 0, ky, kx], axis=[ky, kx]),
        name=topi.uname("conv"))
    y._graph_info = {"kind": "conv_generic", "pad": ph, "depthwise": True}
    return y


def _schedule_dense_packed(s, out, info, parallel, target):
    D, lanes = info["dense"], info["lanes"]
    _inline_except(s, out, [D])
    if D is out:
        D = s.cache_write(out, "local")
    M, N = _ishape(out)
    mr, nr = tiling.gemm_tile(target, M, N, out.dtype)
    mo, no, mi, ni = s[out].tile(out.op.axis[0], out.op.axis[1], mr, nr)
    s[out].vectorize(ni)
    # the operand re-read by the inner tile loop should be the smaller one: with more
    # weight columns than rows (a language model's vocabulary projection: 50k x 256
    # weights, 128 rows) the columns go outside, so each packed weight panel streams from
    # memory once instead of once per row block
    cols_outer = N > M
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
    K = topi._dim(D.op.reduce_axis[0].dom.extent) if hasattr(D.op.reduce_axis[0], "dom") else 1
    if not (parallel and M * N * K >= PAR_MIN_MACS):
        return
    # a fused loop keeps a guard in its body when a tile is ragged: parallelize the
    # unfused loop instead, so that loop partitioning peels the ragged tiles off
    outer, inner = (no, mo) if cols_outer else (mo, no)
    outer_n = -(-N // nr) if cols_outer else -(-M // mr)
    if M % mr == 0 and N % nr == 0:
        s[out].parallel(s[out].fuse(outer, inner))
    elif outer_n >= 2 * target.num_cores:
        s[out].parallel(outer)
    else:
        s[out].reorder(inner, outer, mi, ni)
        s[out].parallel(inner)
