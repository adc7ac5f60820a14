"""The blocked NCHW[x]c convolution in any number of spatial dimensions (conv1d reaches it
as a conv2d of one row, conv3d directly or as nn.conv3d_blocked in a blocked chain), and
the transposed convolution as a blocked conv of its input spread onto the stride grid.

The conv reads an input stage `spread[b, ci, *u]` (the zero-padded input; for a transposed
conv the input scattered every `stride` positions), packed weights (CO/x, CI, *K, x) and
accumulates x output channels in one vector, a register tile of row pixels x channel
blocks. A transposed conv with stride s spends s^d times the multiply-adds of the gather
form on zeros, but in this vectorized tile rather than a per-tap test on every element.

Two variants of the schedule for short vectors (AVX2's 16 registers and 8-channel blocks):
rows too short for a full register tile tile the flattened output plane (`_flat_plane`),
1x1 convs over many input planes accumulate rows in memory a few planes a pass."""
from __future__ import annotations

import numpy as np

import tdsl

from .... import tiling
from ....errors import GraphError
from .. import tag, topi
from . import conv_epilogue
from ..stages import ishape, stages_of
from .batch import batch, image_shape, image_weights, outer_fuse, parallel as threads
from .loops import PAR_MIN_MACS_DEPTHWISE, inline_except, par_vec, vec_split
from .width import batch_and_width, is_number, known, number, row_chunks, row_extent, row_split, row_tile, shifted_row_tile


def spread(x, sizes, offsets, strides):
    """sp[b, c, *u] = x[b, c, *(u - offset) / stride] where that is a whole in-range
    position, else 0; `x` itself when that is the identity."""
    xs = topi.shape_of(x)
    nd = len(sizes)
    if tuple(sizes) == tuple(xs[2:]) and not any(offsets) and all(s == 1 for s in strides):
        return x
    f0 = tdsl.const(0, x.dtype)

    def f(b, ch, *u):
        conds, src = [], []
        for d in range(nd):
            t = u[d] - offsets[d]
            if strides[d] > 1:
                conds.append(t % strides[d] == 0)
                t = t // strides[d]
            if offsets[d] > 0 or strides[d] > 1:
                conds.append(t >= 0)
            if not known(sizes[d] <= offsets[d] + (xs[2 + d] - 1) * strides[d] + 1) or strides[d] > 1:
                conds.append(t < xs[2 + d])
            src.append(t)
        v = x[(b, ch) + tuple(src)]
        return tdsl.if_then_else(tdsl.all(*conds), v, f0) if conds else v
    return tdsl.compute((xs[0], xs[1]) + tuple(sizes), f, name=topi.uname("pad"))


def pad_blocked(x, sizes, offsets, fill=None):
    """pad[b, cb, *u, c] = x[b, cb, *(u - offset), c] inside x, else `fill` (None: 0; a
    quantized image's zero point) (a blocked image)."""
    xs = topi.shape_of(x)
    nd = len(sizes)
    if tuple(sizes) == tuple(xs[2:-1]) and not any(offsets):
        return x
    f0 = tdsl.const(0, x.dtype) if fill is None else fill

    def f(b, cb, *u):
        conds, src = [], []
        for d in range(nd):
            t = u[d] - offsets[d]
            if offsets[d] > 0:
                conds.append(t >= 0)
            if not known(sizes[d] <= offsets[d] + xs[2 + d]):
                conds.append(t < xs[2 + d])
            src.append(t)
        v = x[(b, cb) + tuple(src) + (u[nd],)]
        return tdsl.if_then_else(tdsl.all(*conds), v, f0) if conds else v
    return tdsl.compute((xs[0], xs[1]) + tuple(sizes) + (xs[-1],), f, name=topi.uname("pad"))


def applies_depthwise(g, n):
    """nn.conv2d_blocked of groups > 1 (a depthwise conv), float, its weights constant and
    its input a group parameter (its batch may be symbolic)."""
    return (n.attrs["groups"] != 1 and g.const_param(n.args[1]) is not None
            and n.args[0].type.dtype == "float32" and n.args[0] in g.pidx and batch_and_width(g, n))


def _padding(g, n):
    """The padded input's spatial sizes and the begin padding of conv node `n` (its input
    plain or blocked; a symbolic row width as the kernel's index expression)."""
    p = n.attrs["padding"]
    nd = len(n.args[1].type.shape) - 2
    sp = g.node_type(n.args[0]).shape[2:2 + nd]
    return [sp[d] + p[d] + p[nd + d] for d in range(nd)], p[:nd]


def depthwise2d_blocked(g, n, tensors):
    """nn.conv2d_blocked of groups > 1: the blocked depthwise conv of the padded input."""
    x = g.param_tensor(g.pidx[n.args[0]])
    return depthwise_blocked(g, n, x, pad_blocked(x, *_padding(g, n)), g.const_param(n.args[1]))


def conv2d_blocked(g, n, x, wi):
    """nn.conv2d_blocked and nn.conv3d_blocked (ir/ops_layout.py) of groups 1 of image `x`:
    the blocked conv from a blocked or plain input to a blocked output."""
    a = n.attrs
    sizes, offsets, skip = _skip_lead_padding(n, *_padding(g, n))
    if a["in_blocked"]:
        return conv_blocked(g, n, x, wi, None, blocked=(pad_blocked(x, sizes, offsets), a["bn"]), skip=skip)
    return conv_blocked(g, n, x, wi, (sizes, offsets, (1,) * len(sizes)), blocked=(None, a["bn"]), skip=skip)


def _skip_lead_padding(n, sizes, offsets):
    """(padded sizes, begin padding, skip) of conv node `n` whose taps into the padding of
    its leading spatial dimensions (a 3-D conv's depth) are skipped, not multiplied by
    zeros: those dimensions are left unpadded and `skip` maps each to (its begin padding,
    its input size), from which conv_blocked bounds the taps of each output position. A
    video clip is a few frames deep (8, 4, 2 in a 3-D ResNet's stages), so a 3-tap
    kernel's padded frames are 1/12 to 1/3 of its multiply-adds; the output depths are
    the tasks (schedule), so the bounds are loop-invariant in every task. Rows and
    columns keep their padding: a row's tile spans pixels whose taps differ."""
    nd = len(sizes)
    in_sp = n.args[0].type.shape[2:2 + nd]
    sizes, offsets, skip = list(sizes), list(offsets), {}
    for d in range(nd - 2):
        if n.attrs["dilation"][d] == 1 and sizes[d] != in_sp[d] and is_number(in_sp[d]):
            skip[d] = (offsets[d], in_sp[d])
            sizes[d], offsets[d] = in_sp[d], 0
    return sizes, offsets, skip


def depthwise_blocked(g, n, x, src, wi):
    """out[b, cb, y, x, c] = sum over taps of src[b, cb, y*s + ky*d, x*s + kx*d, c] *
    w[cb, ky, kx, c]: a vector of channels per FMA, whatever the row width or stride."""
    a = n.attrs
    bn = a["bn"]
    N = batch(g, n)
    C, _, KH, KW = n.args[1].type.shape
    CB = -(-C // bn)
    OH, OW = g.node_type(n).shape[2:4]
    (sh, sw), (dh, dw) = a["strides"], a["dilation"]

    def pack(w):
        wp = np.zeros((CB * bn, KH, KW), w.dtype)
        wp[:C] = w[:, 0]
        return np.ascontiguousarray(wp.reshape(CB, bn, KH, KW).transpose(0, 2, 3, 1))
    Wp = g.packed_param(wi, (CB, KH, KW, bn), pack)
    ky = tdsl.reduce_axis((0, KH), "ky")
    kx = tdsl.reduce_axis((0, KW), "kx")
    Cv = tdsl.compute((N, CB, OH, OW, bn), lambda b, cb, oy, ox, c: tdsl.sum(
        src[b, cb, oy * sh + ky * dh, ox * sw + kx * dw, c] * Wp[cb, ky, kx, c], axis=[ky, kx]),
        name=topi.uname("conv"))
    # a symbolic row: the tile of a long row, its ragged last tile peeled (width.py)
    xb, rb = tiling.depthwise_tile(g.target, OH, number(OW))
    if not is_number(OW):
        # the row's ragged last tile runs guarded: half the tile, where that still keeps an
        # accumulator for every FMA chain (AVX-512's 16 pixels), halves the guarded work
        # on the short rows of a short signal's last stages (63 pixels at 4000 samples).
        # (not shifted inwards as the blocked conv's: this conv reads its padding through
        # a bounds test, which loop partitioning peels off the inner tiles only where
        # their start is linear, not a min and max of the row's width)
        xb = max(xb // 2, min(xb, g.target.fma_chains))
    return tag.mark(Cv, tag.DEPTHWISE_BLOCKED, conv=Cv, xb=xb, rb=rb, bn=bn)


def runtime_pack(w, shape, CO, transposed):
    """The packed weights `shape` = (CO/bn, CI, *K, bn) of weights `w` that are a kernel
    input, not a constant: a stage computed once per call (tag.ROOT), one pass over the
    weights against the conv's CO*CI*K multiply-adds per output pixel. `transposed`: w is a
    transposed conv's (CI, CO, *K), read with its channel axes swapped and its taps
    reversed (as conv_transpose's `orient`). Output channels past CO read zero."""
    nd = len(shape) - 3
    bn = shape[-1]
    K = shape[2:2 + nd]
    ragged = shape[0] * bn != CO
    f0 = tdsl.const(0, w.dtype)

    def f(cb, ci, *kc):
        k, c = kc[:nd], kc[nd]
        co = tdsl.min(cb * bn + c, CO - 1) if ragged else cb * bn + c
        if transposed:
            v = w[(ci, co) + tuple(K[d] - 1 - k[d] for d in range(nd))]
        else:
            v = w[(co, ci) + tuple(k)]
        return tdsl.if_then_else(cb * bn + c < CO, v, f0) if ragged else v
    return tag.mark(tdsl.compute(shape, f, name=topi.uname("weights_packed")), tag.ROOT)


def conv_blocked(g, n, x, wi, spread_args, orient=None, blocked=None, skip=None):
    """The blocked conv of node `n` (nn.convNd, groups 1) over `spread(x, *spread_args)`,
    its weights the constant param `wi` laid out (CO, CI, *K) by `orient` (for a transposed
    conv: swap the channel axes and flip the taps), or the placeholder of weights that are
    a kernel input (runtime_pack; a plain input only). `blocked`: (the padded blocked input or
    None for a plain one, bn) for nn.conv2d_blocked, whose output stays blocked. `skip`:
    {spatial dimension left unpadded: (its begin padding, input size)}
    (_skip_lead_padding)."""
    a = n.attrs
    src_b = blocked[0] if blocked else None
    src = src_b if src_b is not None else spread(x, *spread_args)
    xt = n.args[0].type
    N = batch(g, n.args[0])
    CI = x.shape[1]            # a size variable in a kernel generic in it
    CO = n.type.shape[1]
    out_sp = tuple(g.node_type(n).shape[2:])
    if blocked:     # the node's output is blocked: (N, CO/bn, *S, bn)
        CO, out_sp = n.args[1].type.shape[0], out_sp[:-1]
        CI = n.args[1].type.shape[1]
    nd = len(out_sp)
    w_shape = n.args[1].type.shape
    K = tuple(w_shape[2:])
    bn = blocked[1] if blocked else g.target.vector_lanes(xt.dtype)
    cb_n = -(-CO // bn)      # output channels padded to whole vectors with zero weights

    def pack(w):
        w = orient(w) if orient else w
        wp = np.zeros((cb_n * bn,) + w.shape[1:], w.dtype)
        wp[:CO] = w
        return np.ascontiguousarray(wp.reshape((cb_n, bn) + w.shape[1:]).transpose(
            (0,) + tuple(range(2, nd + 3)) + (1,)))
    strides = a["strides"] if "transpose" not in n.op else (1,) * nd
    dl = a["dilation"]
    skip = skip or {}

    def taps(sp):
        """The tap axes of output position `sp` and the input positions they read: in a
        skipped dimension only the taps inside the input, whose bounds depend on `sp`."""
        rk, at = [], []
        for d in range(nd):
            if d in skip:
                off, size = skip[d]
                first = sp[d] * strides[d] - off
                rk.append(tdsl.reduce_axis((tdsl.max(0, -first), tdsl.min(K[d], size - first)), f"k{d}"))
                at.append(first + rk[d])
            else:
                rk.append(tdsl.reduce_axis((0, K[d]), f"k{d}"))
                at.append(sp[d] * strides[d] + rk[d] * dl[d])
        return rk, tuple(at)
    if src_b is not None and not isinstance(wi, int):
        raise GraphError(f"{n.op}: a blocked input with runtime weights has no blocked conv")
    if src_b is not None:
        # input channels blocked too: (cio, cii) reduce, weights (CO/bn, CI/bn, *K, bn_i, bn_o)
        cib = -(-CI // bn)

        def pack_b(w):
            wp = np.zeros((cb_n * bn, cib * bn) + w.shape[2:], w.dtype)
            wp[:CO, :CI] = w
            wp = wp.reshape((cb_n, bn, cib, bn) + w.shape[2:])
            return np.ascontiguousarray(wp.transpose((0, 2) + tuple(range(4, nd + 4)) + (3, 1)))
        Wp = g.packed_param(wi, (cb_n, cib) + K + (bn, bn), pack_b)
        cio = tdsl.reduce_axis((0, cib), "cio")
        cii = tdsl.reduce_axis((0, bn), "cii")

        def conv(b, cb, *o):
            (rk, at), cc = taps(o[:nd]), o[nd]
            return tdsl.sum(src[(b, cio) + at + (cii,)] * image_weights(Wp, nd + 4, b)[(cb, cio) + tuple(rk) + (cii, cc)],
                            axis=[cio] + rk + [cii])
    else:
        shape = (cb_n, CI) + K + (bn,)
        Wp = g.packed_param(wi, shape, pack) if isinstance(wi, int) else \
            runtime_pack(wi, shape, CO, "transpose" in n.op)
        ci = tdsl.reduce_axis((0, CI), "ci")

        def conv(b, cb, *o):
            (rk, at), cc = taps(o[:nd]), o[nd]
            return tdsl.sum(src[(b, ci) + at] * image_weights(Wp, nd + 3, b)[(cb, ci) + tuple(rk) + (cc,)],
                            axis=[ci] + rk)
    info = {"pad": src if src is not x else None, "ow": out_sp[-1], "bn": bn,
            "in_blocked": src_b is not None, "taps": int(np.prod(K))}
    if not isinstance(wi, int):
        info["weights"] = Wp
    planes = -(-CI // bn) if src_b is not None else CI
    # a 3-D conv's planes are its (rows, columns), one per depth: the depths stay tasks
    lead_sp, plane_sp = out_sp[:-2], out_sp[-2:]
    nl, npl = len(lead_sp), len(plane_sp)
    plane = _flat_plane(g.target, plane_sp, cb_n * bn, info["taps"], planes, bn,
                        int(np.prod(lead_sp))) if blocked and all(is_number(d) for d in out_sp) else None
    if plane is not None:
        # the register tile runs along the flattened output plane (_flat_plane)
        P = int(np.prod(plane_sp))

        def unflat(p):
            return tuple((p // int(np.prod(plane_sp[d + 1:]))) % plane_sp[d] if d else
                         p // int(np.prod(plane_sp[1:])) for d in range(npl))
        Cv = tdsl.compute((N, cb_n) + lead_sp + (P, bn),
                          lambda b, cb, *o: conv(b, cb, *o[:nl], *unflat(o[nl]), o[nl + 1]),
                          name=topi.uname("conv"))

        def flat(o):
            return sum(o[d] * int(np.prod(plane_sp[d + 1:])) for d in range(npl))
        V = tdsl.compute((N, cb_n) + out_sp + (bn,),
                         lambda b, cb, *o: Cv[(b, cb) + o[:nl] + (flat(o[nl:nd]), o[nd])],
                         name=topi.uname("plane"))
        info.update(conv=Cv, ow=P, tile=plane, view=V)
        return tag.mark(V, tag.CONV_BLOCKED, **info)
    Cv = tdsl.compute((N, cb_n) + out_sp + (bn,), conv, name=topi.uname("conv"))
    if blocked:
        return tag.mark(Cv, tag.CONV_BLOCKED, **info, conv=Cv)
    O = tdsl.compute((N, CO) + out_sp, lambda b, co, *o: Cv[(b, co // bn) + o + (co % bn,)],
                     name=topi.uname("unpack"))
    return tag.mark(O, tag.CONV_BLOCKED, **info, conv=Cv)


FLAT_MAX_WIDTH = 14


def _flat_plane(target, out_sp, cols, taps, planes, bn, depths=1):
    """The register tile (pixels, vectors) along the flattened output plane (one of
    `depths`: a 3-D conv's depth slices are tasks beside its channel blocks), or None to
    keep tiles within a row. A row's tile must divide the row; on 16 registers the 7- and
    14-wide rows of a CNN's last stages then get (7, 1) or (2, 4), whose few accumulators
    or broadcasts per FMA leave the FMA units half idle. Along the flattened plane any
    tile divides all but the plane's last, peeled tile, and each pixel's input address is
    hoisted out of the reduction. 1x1 convs whose plane streams want row passes
    (_row_passes) keep them unless the whole image is one pass, where the passes gain
    nothing. The plane's tasks are its channel blocks only (images are a loop outside the
    threads', batch.outer_fuse), so there must be enough of them for the cores. A 2-D
    conv's wider rows (28, 56) stay in rows: there the flat tile's gain on a single layer
    does not carry over to whole networks. A 3-D conv's take the flat tile at any width
    (a plane per depth slice): on AVX2 a 28- or 56-wide row of 32 or 64 channels has
    (4, 2) at most, 8 accumulators for 10 FMA chains, the plane (6, 2); and the 27 taps
    of a 3x3x3 kernel spend more multiply-adds on each pixel's hoisted address.
    A row tile that is load-bound (_load_bound: a prime 13-wide row, squeezenet's last
    stage, leaves AVX-512 13 pixels by one vector) gives way to a flat tile that is not,
    even one of fewer accumulators, or of fewer vectors than the best (more channel blocks,
    so enough tasks) where the best would leave too few tasks."""
    ow = out_sp[-1]
    if ow > FLAT_MAX_WIDTH and depths == 1:
        return None
    row = tiling.register_tile(target, ow, cols, whole_rows=True, whole_vecs=True)
    P = int(np.prod(out_sp))
    blocks, chunks = cols // bn, tiling.parallel_chunks(target)
    flat = tiling.register_tile(target, P, cols, whole_vecs=True, ragged_rows=1.0)
    if blocks // flat[1] * depths < chunks and _load_bound(target, row):
        fewer = tiling.register_tile(target, P, cols, whole_vecs=True, ragged_rows=1.0,
                                     max_vecs=max(1, blocks * depths // chunks))
        flat = fewer if _fed(target, fewer) else flat
    if flat[0] * flat[1] <= row[0] * row[1] and not (_load_bound(target, row) and _fed(target, flat)):
        return None
    if blocks // flat[1] * depths < chunks:
        return None     # the rows' tasks are needed to keep the cores busy
    if _plane_streams(taps, planes, row[0], bn) and P * row[1] * bn * 4 > PASS_ACC_BYTES:
        return None
    return flat


def _load_bound(target, tile):
    """Whether register tile (pixels, vectors) has an accumulator for every FMA chain but
    issues fewer FMAs than loads (a broadcast a pixel, a load a vector of weights): a
    prime row of 13 pixels by one vector, where two loads a cycle hold back two FMAs a
    cycle. (A tile of fewer accumulators is latency-bound, weighed by their count.)"""
    acc = tile[0] * tile[1]
    return acc >= target.fma_chains and acc < tile[0] + tile[1]


def _fed(target, tile):
    """Whether register tile (pixels, vectors) has an accumulator for every FMA chain and
    at least one FMA a load."""
    acc = tile[0] * tile[1]
    return acc >= target.fma_chains and acc >= tile[0] + tile[1]


def conv_padded(g, n, x, wi):
    """nn.conv1d/2d/3d: the blocked conv of the zero-padded input."""
    a = n.attrs
    nd = len(n.type.shape) - 2
    p = a["padding"]
    in_sp = g.node_type(n.args[0]).shape[2:]
    sizes, offsets, skip = _skip_lead_padding(n, [in_sp[d] + p[d] + p[d + nd] for d in range(nd)], p[:nd])
    return conv_blocked(g, n, x, wi, (sizes, offsets, (1,) * nd), skip=skip)


def conv_transpose(g, n, x, wi):
    """nn.convNd_transpose (groups 1): out[o] = sum_k up[o + k * dl] * w_flipped[k], `up`
    the input spread every stride positions from offset (K - 1) * dl - pad."""
    a = n.attrs
    nd = len(n.type.shape) - 2
    K = n.args[1].type.shape[2:]
    dl, p = a["dilation"], a["padding"]
    out_sp = g.node_type(n).shape[2:]
    sizes = [out_sp[d] + (K[d] - 1) * dl[d] for d in range(nd)]
    offsets = [(K[d] - 1) * dl[d] - p[d] for d in range(nd)]

    def orient(w):      # (CI, CO, *K) -> (CO, CI, *K), taps reversed
        return np.flip(w, axis=tuple(range(2, w.ndim))).swapaxes(0, 1)
    return conv_blocked(g, n, x, wi, (sizes, offsets, a["strides"]), orient)


# A 1x1 conv's register tile reads a few pixels of each input plane in turn: the planes it
# visits and the bytes a visit that call for row passes (_row_passes), the planes' bytes a
# pass takes and the accumulators' bytes a pass keeps
ROW_MIN_PLANES = 32
ROW_VISIT_BYTES = 256
ROW_CHUNK_BYTES = 128
PASS_ACC_BYTES = 8192


def _plane_streams(taps, planes, xb, bn):
    """Whether a tile of `xb` pixels streams from too many input planes (_row_passes)."""
    return (taps == 1 and isinstance(planes, int) and planes >= ROW_MIN_PLANES
            and xb * bn * 4 < ROW_VISIT_BYTES)


def _row_passes(xb, cbb, bn, first, info, height, ow):
    """(input planes or channels a pass, output rows a pass) for the row schedule, or
    (0, 1) for the register tile accumulating over the whole reduction. A 1x1 conv's tile
    of `xb` pixels reads `xb * bn` elements of each input plane before the next plane.
    With ROW_MIN_PLANES planes or more, each visited for less than ROW_VISIT_BYTES (AVX2's
    8-channel blocks, 4-7 pixels a tile), the plane streams defeat the prefetcher, so
    that a second thread adds next to nothing. Then the tiles of a whole row take turns
    over a few planes at a time, reading each plane's row from start to end, their
    accumulators going to memory and back once a pass. With fewer planes that round trip
    costs more than it saves; convs with taps (their neighbouring taps read the same
    lines) and AVX-512's 16-channel blocks (they gain nothing) are left alone.
    A pass takes as many rows as keep its accumulators within PASS_ACC_BYTES of L1, so
    that a pass's weights serve several tiles from L1 (a 7x7 image is one pass). Left
    alone: a row of symbolic width `ow` (its accumulators would be a buffer sized at run
    time, per task, far from L1) and a kernel generic in its channel count."""
    planes = getattr(first.dom.extent, "value", first.dom.extent)
    if not is_number(ow) or not _plane_streams(info.get("taps", 1), planes, xb, bn):
        return 0, 1
    row_bytes = ow * cbb * bn * 4
    rows = max(d for d in range(1, height + 1) if height % d == 0
               and (d == 1 or d * row_bytes <= PASS_ACC_BYTES))
    if rows * (ow // xb) < 2:
        return 0, 1     # one tile a pass: the tile itself
    # blocked input: planes of bn channels; plain: one channel's plane each
    per = max(1, ROW_CHUNK_BYTES // (bn * 4)) if info.get("in_blocked") else ROW_CHUNK_BYTES // 4
    return next(d for d in range(per, 0, -1) if planes % d == 0), rows   # no guarded last pass


# an image stem: the input planes (channels) of a plain input up to which, and the taps up
# to which, a broadcast-bound register tile unrolls its taps (_stem_taps)
STEM_MAX_PLANES = 4
STEM_MAX_TAPS = 9


def _stem_taps(target, info, first, rest, xb, cbb):
    """The tap axes to unroll in the conv of a plain image of a few channels (an RGB stem),
    whose reduction is its taps: (CI, *K), CI <= STEM_MAX_PLANES. A tile of `xb` pixels by
    `cbb` vectors broadcasts one input element a pixel a tap; in a tap loop each broadcast's
    int32 index is computed and sign-extended apart (two integer ops a broadcast), while in
    unrolled taps each is a constant displacement from the row's address. Where the tile
    broadcasts at least twice as many pixels as it loads weight vectors (a stem of 16 or 32
    channels on AVX-512: (16, 1), (8, 2)), those integer ops hold back its FMAs. A tile of
    more vectors ((3, 4), SqueezeNet's 64 channels) has few of them and gains nothing; a
    7x7 kernel's 49 unrolled taps lengthen the loop body more than they save (measured
    slower); AVX2's tiles of 16 registers hold few pixels and measured no faster either:
    those keep their loops."""
    planes = getattr(first.dom.extent, "value", None)
    taps = [getattr(r.dom.extent, "value", None) for r in rest]
    if target.vector_registers < 32 or info.get("in_blocked") or not rest or None in taps:
        return []
    if planes is None or planes > STEM_MAX_PLANES or int(np.prod(taps)) > STEM_MAX_TAPS:
        return []
    return list(rest) if xb >= 2 * cbb else []


def schedule(s, out, g, parallel=True):
    info, target = g.anchor.tensor.op.attrs, g.target
    Cv, pad, OW, bn = info["conv"], info["pad"], info["ow"], info["bn"]
    narrow = g.size_class == "narrow"
    if narrow:
        pad, parallel = None, False
    keep = [Cv] + ([pad] if pad is not None else [])
    inline_except(s, out, keep)
    for t in stages_of(out):
        if t.op.reduce_axis and t is not Cv and t is not out:
            par_vec(s, t, target, True, parallel)
    shape, CB = ishape(Cv), ishape(Cv)[1]      # a 1-D conv (a row alone) may shift its tiles
    shifted = shifted_row_tile(target, OW, CB * bn) if "tile" not in info and shape[2:-2] == [1] else None
    xb, cbb = info.get("tile") or shifted or row_tile(target, OW, CB * bn, whole_vecs=True)
    blocked_out = len(out.shape) == len(ishape(info.get("view", Cv)))
    if blocked_out and Cv is out:
        Cv = s.cache_write(out, "local")
    tile = None if blocked_out else conv_epilogue.on_vectors(s, out, Cv, info)
    first, *rest = s[Cv].op.reduce_axis
    chunk, rows = (0, 1) if "tile" in info or shifted else \
        _row_passes(xb, cbb, bn, first, info, shape[-3] if len(shape) > 4 else 1, OW)
    if blocked_out:
        # a blocked output (nn.conv2d_blocked): the epilogue stores whole channel vectors
        b, cb, *sp, c = out.op.axis
        cob, coi = s[out].split(cb, factor=cbb)
        c_in = [c]
    else:
        b, co, *sp = out.op.axis
        cob, coi = s[out].split(co, factor=bn * cbb)
        c_in = []
    if "tile" in info:      # the flattened plane: one loop of pixels (per depth)
        lead, x = sp[:-2], s[out].fuse(*sp[-2:])
    else:
        lead, x = sp[:-1], sp[-1]
    in_pass = []
    if rows > 1:
        yo, yi = s[out].split(lead[-1], factor=rows)
        lead, in_pass = lead[:-1] + [yo], [yi]
    xb, tail = row_split(g, x, xb, shift=shifted is not None)
    shift = tail == "shift"
    xo, xi = s[out].split(x, factor=xb, tail=tail)
    # a symbolic row's guarded tiles (no variant in front of the kernel) in chunks, which
    # the threads share with the channel blocks and the rows (one block of a 64-channel
    # conv would leave one task). The chunks go outermost: the fused loop's divisions are
    # then by constants (a remainder in the row's index would hide from bound inference
    # that the guarded tiles stay in the row)
    chunks = []
    if tail == "guard" and xb > 1:
        chunks, xo = row_chunks(s, out, xo, OW, -(-CB // cbb) * int(np.prod(shape[2:-2])), target)
    if shift:
        # shifted tiles stay in the row whatever their index: the threads take the tiles
        # of all channel blocks and rows, fused, in equal contiguous shares (chunks of
        # the row left a thread a chunk more where the tiles did not split evenly)
        s[out].reorder(b, cob, *lead, *in_pass, xo, coi, xi, *c_in)
        outer = [b, cob, *lead, xo]
    elif len(lead) > 1 and -(-topi.dim(out.shape[1]) // (cbb if blocked_out else bn * cbb)) \
            * topi.dim(lead[0].dom.extent) >= tiling.parallel_chunks(target):
        # a 3-D conv: a task is a plane (all rows of one depth) of one group of channel
        # blocks, whose weights then serve every row of it from cache. Tasks of single rows
        # over all channel blocks read a deep stage's whole weights (27 MiB for a 3x3x3 conv
        # of 512 channels) once per output row. The rows are not fused in: through a division
        # less a multiple of the next (f // H - f // (D * H) * D) bound inference cannot see
        # that the register tile stays in its bounds, and every multiply-add would be guarded
        s[out].reorder(b, *chunks, cob, *lead, *in_pass, xo, coi, xi, *c_in)
        outer = [b, *chunks, cob, lead[0]]
    elif len(lead) > 1:
        # too few planes for the cores: the threads split depth and rows (fused first, for
        # the same reason), and each task runs over the channel blocks
        s[out].reorder(b, *chunks, *lead, cob, *in_pass, xo, coi, xi, *c_in)
        outer = [b, *chunks, s[out].fuse(*lead)]
    else:
        s[out].reorder(b, *chunks, cob, *lead, *in_pass, xo, coi, xi, *c_in)
        outer = [b, *chunks, cob, *lead]
    if blocked_out:
        s[out].vectorize(c)
    par = outer_fuse(s, out, outer)
    if parallel:
        s[out].parallel(par)
    conv_epilogue.place(s, tile, out, par if chunk or shift else xo, xi)
    if chunk:       # `rows` output rows accumulate in memory, `chunk` planes a pass
        s[Cv].compute_at(s[out], par)
        _, cl, *sl, xl = s[Cv].op.axis[:-1]
        ll = s[Cv].op.axis[-1]
        cxo, cxi = s[Cv].split(xl, factor=xb)
        fo, fi = s[Cv].split(first, factor=chunk)
        s[Cv].reorder(fo, *sl, cxo, fi, *rest, cl, cxi, ll)
        unrolled = [cxi]
    else:
        s[Cv].compute_at(s[out], par if shift else xo)
        _, cl, *unrolled, ll = s[Cv].op.axis
        s[Cv].reorder(first, *rest, *unrolled, cl, ll)
        unrolled = unrolled + _stem_taps(target, info, first, rest, xb, cbb)
    for ax in unrolled:
        s[Cv].unroll(ax)
    if not narrow:      # a row of a few pixels: the smallest code, not the fastest
        s[Cv].unroll(cl)
    s[Cv].vectorize(ll)
    if pad is not None:     # rows of the padded input in parallel, each one vectorized
        axes = pad.op.axis[:-1]
        if info["in_blocked"] and not is_number(pad.shape[-2]):
            # a row of run-time width (a 1-D signal's) stays a loop of its own: fused in,
            # each vector's index would be recovered by an integer division by the width,
            # which costs the copy more than its loads and stores
            axes = axes[:-1]
        pa = s[pad].fuse(*axes)
        if parallel:
            s[pad].parallel(pa)
        vec_split(s, pad, pad.op.axis[-1], row_extent(pad), target)


def schedule_depthwise(s, out, g, parallel=True):
    """The blocked depthwise conv: a register tile of `rb` rows x `xb` pixels, each a
    vector of channels, the taps unrolled (neighbouring pixels share their input loads at
    stride 1). The padding is read through its bounds test, inlined, not copied: the conv
    is bound by reading its input, and a padded copy would write and read it again, which
    costs most on the large planes of a network's first stages."""
    info = g.anchor.tensor.op.attrs
    Cv, xb, rb, bn = info["conv"], info["xb"], info["rb"], info["bn"]
    inline_except(s, out, [Cv])
    blocked_out = len(out.shape) == len(Cv.shape)
    if Cv is out:
        Cv = s.cache_write(out, "local")
    if blocked_out:
        b, cb, y, x, c = out.op.axis
        yo, yi = s[out].split(y, factor=rb)
        xo, xi = s[out].split(x, factor=xb)
        s[out].reorder(b, cb, yo, xo, yi, xi, c)
        s[out].vectorize(c)
    else:       # a plain NCHW output (a from_blocked epilogue): rows of one channel block
        b, co, y, x = out.op.axis
        cb, c = s[out].split(co, factor=bn)
        yo, yi = s[out].split(y, factor=rb)
        xo, xi = s[out].split(x, factor=xb)
        s[out].reorder(b, cb, yo, xo, c, yi, xi)
    outer = outer_fuse(s, out, [b, cb])
    taps = int(np.prod([topi.dim(r.dom.extent) for r in Cv.op.reduce_axis]))
    if parallel:
        threads(s, out, outer, int(np.prod(image_shape(out))) * taps, PAR_MIN_MACS_DEPTHWISE)
    s[Cv].compute_at(s[out], xo)
    _, _, yl, xl, cl = s[Cv].op.axis
    ky, kx = s[Cv].op.reduce_axis
    s[Cv].reorder(ky, kx, yl, xl, cl)
    for ax in (ky, kx, yl, xl):
        s[Cv].unroll(ax)
    s[Cv].vectorize(cl)
