"""The integer conv of quantized networks (qnn.conv2d and its blocked form
qnn.conv2d_blocked: uint8 data, constant int8 weights with zero point 0) laid out for
AVX512-VNNI: NCHW data padded with its zero point into NCHW[4c] (4 input channels
adjacent: one 32-bit lane of `vpdpbusd`), NCHW[16c] data read as it is (padded where the
conv pads), the weights packed once as [CO/16][CI/4][KH][KW][16][4], one instruction per
16 output channels x 4 input channels. sum((x - z) * w) = sum(x * w) - z * sum(w): the
products stay unsigned x signed bytes, and the zero point's share is one int32 per output
channel (the sums of the weights are packed once with them, a derived constant). Targets
without VNNI get the same definition in int32 arithmetic, which LLVM vectorizes."""
from __future__ import annotations

import numpy as np

import tdsl

from .... import tiling
from ....target import as_target
from ....te import intrin_x86
from .. import tag, topi
from ..stages import ishape
from . import conv_blocked
from .loops import inline_except, vec_split

LANES, GROUP = intrin_x86.LANES, 4


def _pack_weights(g, wi, CO, CI, KH, KW, blocked_in):
    """The weights as [CO/16][CI/4][KH][KW][16][4] (one vpdpbusd's operand innermost), or
    for blocked data [CO/16][CI/16][KH][KW][4][16][4]: the 4 groups of a data block's 16
    channels innermost, next to each other."""
    CB, C4 = -(-CO // LANES), _groups_of_4(CI, blocked_in)

    def pack(w):
        wp = np.zeros((CB * LANES, C4 * GROUP, KH, KW), np.int8)
        wp[:CO, :CI] = w
        wp = wp.reshape(CB, LANES, C4, GROUP, KH, KW).transpose(0, 2, 4, 5, 1, 3)
        if blocked_in:
            wp = wp.reshape(CB, C4 // 4, 4, KH, KW, LANES, GROUP).transpose(0, 1, 3, 4, 2, 5, 6)
        return np.ascontiguousarray(wp)
    shape = (CB, C4 // 4, KH, KW, 4, LANES, GROUP) if blocked_in else (CB, C4, KH, KW, LANES, GROUP)
    return g.packed_param(wi, shape, pack)


def _groups_of_4(CI, blocked_in):
    """The groups of 4 input channels the conv reduces over: of whole 16-channel blocks for
    blocked data (the lanes past CI, of no meaning, meet zero weights)."""
    return -(-CI // LANES) * 4 if blocked_in else -(-CI // GROUP)


def _channels_along_reduction(g, wi, x, zero, a, xs, ws, os_, blocked_in):
    """The conv on 4 input channels in each 32-bit lane of vpdpbusd: plain NCHW data is
    packed (and padded) into NCHW[4c]; blocked NCHW[16c] data holds them already (four
    groups a block), padded where the conv pads."""
    (N, CI, H, W), (CO, KH, KW), (OH, OW) = xs, ws, os_
    CB, C4 = -(-CO // LANES), _groups_of_4(CI, blocked_in)
    (sh, sw), (dh, dw) = a["strides"], a["dilation"]
    pt, pl, pb, pr = a["padding"]
    Wp = _pack_weights(g, wi, CO, CI, KH, KW, blocked_in)
    ky = tdsl.reduce_axis((0, KH), "ky")
    kx = tdsl.reduce_axis((0, KW), "kx")
    j = tdsl.reduce_axis((0, GROUP), "j")
    if blocked_in:
        src = conv_blocked.pad_blocked(x, [H + pt + pb, W + pl + pr], [pt, pl], fill=zero)
        P = src if src is not x else None
        cbi = tdsl.reduce_axis((0, C4 // 4), "cbi")
        q = tdsl.reduce_axis((0, 4), "q")
        Cv = tdsl.compute((N, CB, OH, OW, LANES), lambda b, cb, y, xx, ln: tdsl.sum(
            src[b, cbi, y * sh + ky * dh, xx * sw + kx * dw, q * GROUP + j].astype("int32") *
            Wp[cb, cbi, ky, kx, q, ln, j].astype("int32"), axis=[cbi, ky, kx, q, j]), name=topi.uname("qconv"))
        return P, Cv
    # padding (and the channels that fill the last group of 4) read as the zero point
    P = tdsl.compute((N, C4, H + pt + pb, W + pl + pr, GROUP), lambda b, c4, y, xx, jj: tdsl.if_then_else(
        tdsl.all(y >= pt, y < H + pt, xx >= pl, xx < W + pl, c4 * GROUP + jj < CI),
        x[b, c4 * GROUP + jj, y - pt, xx - pl], zero), name=topi.uname("pack4"))
    c4 = tdsl.reduce_axis((0, C4), "c4")
    Cv = tdsl.compute((N, CB, OH, OW, LANES), lambda b, cb, y, xx, ln: tdsl.sum(
        P[b, c4, y * sh + ky * dh, xx * sw + kx * dw, j].astype("int32") * Wp[cb, c4, ky, kx, ln, j].astype("int32"),
        axis=[c4, ky, kx, j]), name=topi.uname("qconv"))
    return P, Cv


def _is_depthwise(n):
    CO, CI = n.args[1].type.shape[:2]
    return n.op == "qnn.conv2d_blocked" and n.attrs["in_blocked"] and n.attrs["groups"] == CO and CI == 1


def _applies(g, n):
    x_e, w_e, xz_e, wz_e = n.args
    wzi = g.const_param(wz_e)
    if None in (g.const_param(w_e), g.const_param(xz_e), wzi) or x_e not in g.pidx \
            or x_e.type.dtype != "uint8" or w_e.type.dtype != "int8" or np.any(g.consts[wzi] != 0):
        return False
    return n.op != "qnn.conv2d_blocked" or n.attrs["bn"] == LANES


def applies(g, n):
    """qnn.conv2d or qnn.conv2d_blocked of groups 1: uint8 data in a group parameter,
    constant int8 weights of zero point 0, a constant data zero point."""
    return n.attrs["groups"] == 1 and _applies(g, n)


def applies_depthwise(g, n):
    """The depthwise qnn.conv2d_blocked of blocked data (what `applies` asks otherwise)."""
    return _is_depthwise(n) and _applies(g, n)


def _operands(g, n):
    """The data and its zero point: read at run time (kernels are shared by groups that
    differ only in their constants' values)."""
    x = g.param_tensor(g.pidx[n.args[0]])
    return x, g.param_tensor(g.const_param(n.args[2]))[()]


def qconv2d(g, n, tensors):
    """qnn.conv2d (NCHW in, NCHW out) and qnn.conv2d_blocked (ir/ops_layout.py: NCHW or
    NCHW[16c] in, NCHW[16c] out, the layout passes/layout.py keeps between the convs of a
    quantized network: the epilogue then requantizes whole accumulator vectors, where an
    NCHW output gathers each channel's row out of them, and the next conv reads the data
    as it is, where NCHW data is packed again)."""
    x_e, w_e = n.args[:2]
    a = n.attrs
    wi = g.const_param(w_e)
    blocked_out = n.op == "qnn.conv2d_blocked"
    blocked_in = blocked_out and a["in_blocked"]
    CO, CI, KH, KW = w_e.type.shape
    x, zero = _operands(g, n)
    N, H, W = x_e.type.shape[0], x_e.type.shape[2], x_e.type.shape[3]
    OH, OW = n.type.shape[2:4]
    # a stem of 3 channels is padded to a group of 4: putting a kernel row's (kx, channel)
    # pairs along the reduction instead saves instructions, but its larger data layout
    # gives the time back
    P, Cv = _channels_along_reduction(g, wi, x, zero, a, (N, CI, H, W), (CO, KH, KW), (OH, OW), blocked_in)
    sums = weight_sums(g, wi, CO)
    zi = zero.astype("int32")
    ragged = CO % LANES != 0
    kind = tag.QCONV2D_VNNI if g.target.has_vnni else tag.QCONV2D_INT32
    # channels past CO (a ragged last block) repeat CO - 1's sum: of no meaning
    Ob = tdsl.compute((N, -(-CO // LANES), OH, OW, LANES), lambda b, cb, y, xx, ln: Cv[b, cb, y, xx, ln] - zi * sums[
        tdsl.min(cb * LANES + ln, CO - 1) if ragged else cb * LANES + ln], name=topi.uname("qconv_out"))
    O = Ob if blocked_out else tdsl.compute(
        (N, CO, OH, OW), lambda b, co, y, xx: Ob[b, co // LANES, y, xx, co % LANES], name=topi.uname("unpack"))
    return tag.mark(O, kind, conv=Cv, pad=P, ow=OW, blocked=Ob if ragged else None)


def weight_sums(g, wi, CO):
    """sum(w) of each output channel, which times the zero point is its share: a constant
    derived from the weights once, at build time."""
    def sums(w):
        return w.reshape(CO, -1).astype(np.int32).sum(axis=1, dtype=np.int32)
    return g.derived_param(wi, 1, (CO,), "int32", sums)


def qdepthwise(g, n, tensors):
    """The blocked depthwise integer conv: per tap, a vector of 16 channels' int32 products
    (the data widened from bytes, the weights packed as int32 once), in the float depthwise
    conv's register tile and schedule (cpu/conv_blocked.py); the padding reads as the zero
    point."""
    x, zero = _operands(g, n)
    wi = g.const_param(n.args[1])
    a = n.attrs
    N, (C, _, KH, KW), (OH, OW) = n.type.shape[0], n.args[1].type.shape, n.type.shape[2:4]
    CB = -(-C // LANES)
    (sh, sw), (dh, dw), p = a["strides"], a["dilation"], a["padding"]
    H, W = n.args[0].type.shape[2:4]
    src = conv_blocked.pad_blocked(x, [H + p[0] + p[2], W + p[1] + p[3]], p[:2], fill=zero)

    def pack(w):
        wp = np.zeros((CB * LANES, KH, KW), np.int32)
        wp[:C] = w[:, 0]
        return np.ascontiguousarray(wp.reshape(CB, LANES, KH, KW).transpose(0, 2, 3, 1))
    Wp = g.derived_param(wi, 2, (CB, KH, KW, LANES), "int32", pack)
    ky = tdsl.reduce_axis((0, KH), "ky")
    kx = tdsl.reduce_axis((0, KW), "kx")
    Cv = tdsl.compute((N, CB, OH, OW, LANES), lambda b, cb, oy, ox, c: tdsl.sum(
        src[b, cb, oy * sh + ky * dh, ox * sw + kx * dw, c].astype("int32") * Wp[cb, ky, kx, c], axis=[ky, kx]),
        name=topi.uname("qdepthwise"))
    sums = weight_sums(g, wi, C)
    zi = zero.astype("int32")
    O = tdsl.compute(n.type.shape, lambda b, cb, y, xx, c: Cv[b, cb, y, xx, c] - zi * sums[
        tdsl.min(cb * LANES + c, C - 1)], name=topi.uname("qdepthwise_out"))
    xb, rb = tiling.depthwise_tile(g.target, OH, OW, max_rows=4)
    return tag.mark(O, tag.DEPTHWISE_BLOCKED, conv=Cv, xb=xb, rb=rb, bn=LANES)


# accumulators of the register tile of the VNNI conv: vpdpbusd takes the weights from
# memory, so a tile needs its accumulators and one register for the broadcast data only
VNNI_MAX_ACC = 28


def vnni_tile(target, ow, cb):
    """(output columns, 16-channel blocks) of the VNNI conv's register tile: the most
    instructions per load (rows * vecs / (rows + vecs)) among tiles that divide the row and
    the blocks, at most VNNI_MAX_ACC accumulators (of the registers there are, less 4)."""
    regs = max(as_target(target).vector_registers, 8)
    cap = min(VNNI_MAX_ACC, regs - 4)
    best, key = (1, 1), None
    for vecs in range(1, min(cb, 4) + 1):
        if cb % vecs:
            continue
        for rows in range(1, min(ow, 16) + 1):
            if ow % rows or rows * vecs > cap:
                continue
            k = (rows * vecs / (rows + vecs), vecs)
            if key is None or k > key:
                best, key = (rows, vecs), k
    return best


def schedule(s, out, g, parallel=True):
    target = g.target
    info = g.anchor.tensor.op.attrs
    Cv, P, Ob = info["conv"], info["pad"], info["blocked"]
    # an NCHW output would narrow the lanes of a ragged last block of output channels
    # (bound inference), which then no longer match the 16 of the instruction: the conv
    # goes to a blocked stage, which the output relays out, so that it keeps the VNNI
    # instruction rather than falling back to the int32 loops (SqueezeNet's 1000-channel
    # classifier)
    relaid = Ob is not None and len(out.op.axis) == 4
    inline_except(s, out, [Cv] + [t for t in (P, Ob if relaid else None) if t is not None])
    if relaid:
        b, co, y, x = out.op.axis
        rows = s[out].fuse(b, co, y)
        if parallel:
            s[out].parallel(rows)
        vec_split(s, out, x, ishape(out)[-1], as_target(target))
        out = Ob
    _, CB, _, OW, _ = ishape(Cv)
    vnni = g.anchor.tensor.op.tag == tag.QCONV2D_VNNI
    if vnni:      # vpdpbusd reads the weights from memory, leaving registers for accumulators
        xb, cbb = vnni_tile(target, OW, CB)
    else:
        xb, cbb = tiling.register_tile(target, OW, CB * LANES, "int32", whole_rows=True, whole_vecs=True)
    if len(out.op.axis) == 5:
        # blocked out: the epilogue along the 16 channels of each accumulator vector (a
        # blocked conv's group that ends in layout.from_blocked stores NCHW, as below)
        b, cb, y, x, ln = out.op.axis
        cob, cbi = s[out].split(cb, factor=cbb)
        xo, xi = s[out].split(x, factor=xb)
        s[out].reorder(b, cob, y, xo, cbi, xi, ln)
        s[out].vectorize(ln)
    else:
        b, co, y, x = out.op.axis
        cob, coi = s[out].split(co, factor=LANES * cbb)
        xo, xi = s[out].split(x, factor=xb)
        s[out].reorder(b, cob, y, xo, coi, xi)
        s[out].vectorize(xi)       # the epilogue (requantize, residual adds) along a row
    par = s[out].fuse(b, cob, y)
    if parallel:
        s[out].parallel(par)
    s[Cv].compute_at(s[out], xo)
    _, cl, yl, xl, ll = s[Cv].op.axis
    *rs, rj = s[Cv].op.reduce_axis
    s[Cv].reorder(*rs, yl, xl, cl, ll, rj)
    s[Cv].unroll(yl)
    s[Cv].unroll(xl)
    s[Cv].unroll(cl)
    if vnni:
        s[Cv].tensorize(ll, intrin_x86.dot_u8s8_int32(target))
    else:
        s[Cv].unroll(rj)
        s[Cv].vectorize(ll)
    if P is None:
        return
    rows = s[P].fuse(*P.op.axis[:3])
    if parallel:
        s[P].parallel(rows)
    if ishape(P)[-1] == LANES:
        s[P].vectorize(P.op.axis[4])    # a pixel's 16 channels: one 16-byte copy
    else:
        s[P].unroll(P.op.axis[4])      # the 4 channels of a group: 4 rows read side by side
