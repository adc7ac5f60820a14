"""The weight adjoint of a float 2-D conv (`nn.conv_weight_grad`, groups 1) as one GEMM per
tap, without im2col: dW[:, :, ky, kx] = sum over n, y, x of dy[n, :, y, x] (x) X[n, :, y*s
+ ky*dl, x*s + kx*dl], a (CO x pixels) by (pixels x CI) product. The data and the output
adjoint are first laid out channels-last (`xh`, zero-padded, and `dyh`, once per call), so
that a tap's pixels read whole channel rows: the register tile broadcasts a few channels of
one operand and multiplies them by vectors of the other's channels, its accumulators in
registers over every pixel of the tap, then stored to the task's block. Tasks are taps x
channel blocks, the tap's block of data shared from L2/L3 by the block's tiles. The
columns are the data's channels where they fill vectors, else the adjoint's (a network's
first conv, 3 input channels). The direct alternative, a conv of the data by the output
adjoint, has a 3x3 output image: its register tile along output rows is 3 pixels wide.

A tap's product of few rows (a network's first conv: 3 input channels by 64 output
channels per tap) does a few multiply-adds per element of the adjoint it streams, and its
49 taps would stream the whole adjoint (25 MB at batch 8, 112x112) from memory 49 times.
There (`_chunk_rows`) the pixels are cut into chunks of a few output rows of one image,
whose adjoint and data stay in L2 while every tap reads them: each chunk, one parallel
task, writes its partial product of every tap, summed over the chunks afterwards."""
from __future__ import annotations

import tdsl

from .... import tiling
from .. import tag, topi
from .loops import par_vec, vec_split

# taps x channel blocks per core: enough tasks that 9 taps spread evenly
TASKS_PER_CORE = 4
# chunked products (_chunk_rows): below this many multiply-adds per element of the
# adjoint a tap reads, and from this many bytes of adjoint, the taps share chunks of it;
# a chunk's adjoint rows take at most CHUNK_BYTES (half of a 1 MB L2, the data rows beside)
CHUNK_MAX_ROWS = 8
CHUNK_MIN_BYTES = 4 << 20
CHUNK_BYTES = 256 << 10


def applies(g, n):
    """A 2-D float32 weight adjoint of groups 1 and static shapes whose data and output
    adjoint are group parameters, one of their channel counts a whole number of vectors."""
    x_e, dy_e = n.args
    if x_e not in g.pidx or dy_e not in g.pidx or x_e.type.ndim != 4 or n.attrs["groups"] != 1:
        return False
    if x_e.type.dtype != "float32" or dy_e.type.dtype != "float32":
        return False
    shapes = tuple(x_e.type.shape) + tuple(dy_e.type.shape)
    if not all(isinstance(d, int) for d in shapes):
        return False
    lanes = g.target.vector_lanes("float32")
    return x_e.type.shape[1] % lanes == 0 or dy_e.type.shape[1] % lanes == 0


def compute(g, n, tensors):
    x = g.param_tensor(g.pidx[n.args[0]])
    dy = g.param_tensor(g.pidx[n.args[1]])
    a = n.attrs
    N, CI, H, W = n.args[0].type.shape
    _, CO, OH, OW = n.args[1].type.shape
    KH, KW = a["kernel_size"]
    (sh, sw), (dh, dw), p = a["strides"], a["dilation"], a["padding"]
    HP, WP = (OH - 1) * sh + (KH - 1) * dh + 1, (OW - 1) * sw + (KW - 1) * dw + 1
    f0 = tdsl.const(0, "float32")

    def fx(b, h, w, c):
        conds = [h >= p[0], h < H + p[0], w >= p[1], w < W + p[1]]
        return tdsl.if_then_else(tdsl.all(*conds), x[b, c, h - p[0], w - p[1]], f0)
    xh = tdsl.compute((N, HP, WP, CI), fx, name=topi.uname("data_nhwc"))
    dyh = tdsl.compute((N, OH, OW, CO), lambda b, y, w, c: dy[b, c, y, w], name=topi.uname("adjoint_nhwc"))
    rn = tdsl.reduce_axis((0, N), "n")
    ry = tdsl.reduce_axis((0, OH), "y")
    rx = tdsl.reduce_axis((0, OW), "x")
    lanes = g.target.vector_lanes("float32")
    swap = CI % lanes != 0          # vectors along the adjoint's channels instead

    def dyv(ci_or_co):
        return dyh[rn, ry, rx, ci_or_co]

    def xv(ky, kx, ci):
        return xh[rn, ry * sh + ky * dh, rx * sw + kx * dw, ci]
    rows = _chunk_rows(CI if swap else CO, N * OH * OW * CO * 4, OW * CO * 4, OH)
    if rows:
        # partial products of chunks of `rows` output rows of one image (_chunk_rows)
        qy = tdsl.reduce_axis((0, rows), "y")

        def part(b, q, ky, kx, r, c):
            y = q * rows + qy
            d, v = dyh[b, y, rx, c if swap else r], xh[b, y * sh + ky * dh, rx * sw + kx * dw, r if swap else c]
            return tdsl.sum(d * v, axis=[qy, rx])
        R, Cc = (CI, CO) if swap else (CO, CI)
        P = tdsl.compute((N, OH // rows, KH, KW, R, Cc), part, name=topi.uname("wgrad_chunks"))
        rb, rq = tdsl.reduce_axis((0, N), "b"), tdsl.reduce_axis((0, OH // rows), "q")
        C = tdsl.compute((KH, KW, R, Cc), lambda ky, kx, r, c: tdsl.sum(P[rb, rq, ky, kx, r, c], axis=[rb, rq]),
                         name=topi.uname("wgrad"))
    elif swap:
        C = tdsl.compute((KH, KW, CI, CO), lambda ky, kx, r, c: tdsl.sum(
            xv(ky, kx, r) * dyv(c), axis=[rn, ry, rx]), name=topi.uname("wgrad"))
    else:
        C = tdsl.compute((KH, KW, CO, CI), lambda ky, kx, r, c: tdsl.sum(
            dyv(r) * xv(ky, kx, c), axis=[rn, ry, rx]), name=topi.uname("wgrad"))
    if swap:
        out = tdsl.compute((CO, CI, KH, KW), lambda co, ci, ky, kx: C[ky, kx, ci, co], name=topi.uname("wgrad_out"))
    else:
        out = tdsl.compute((CO, CI, KH, KW), lambda co, ci, ky, kx: C[ky, kx, co, ci], name=topi.uname("wgrad_out"))
    return tag.mark(out, tag.CONV_WGRAD, conv=C, packs=[xh, dyh], swap=swap, chunks=P if rows else None)


def _chunk_rows(rows, adjoint_bytes, row_bytes, height):
    """Output rows per chunk of a chunked product, or 0 for one product per tap over all
    pixels: chunks where the product has fewer than CHUNK_MAX_ROWS rows (multiply-adds per
    adjoint element read) and the adjoint is at least CHUNK_MIN_BYTES; the most rows that
    divide the image's height within CHUNK_BYTES."""
    if rows >= CHUNK_MAX_ROWS or adjoint_bytes < CHUNK_MIN_BYTES:
        return 0
    return max(d for d in range(1, height + 1) if height % d == 0 and (d == 1 or d * row_bytes <= CHUNK_BYTES))


def _block(rows, tile_rows, taps, cores):
    """The rows of a task's channel block: a multiple of the register tile's dividing
    `rows`, as large as leaves TASKS_PER_CORE tasks a core."""
    best = tile_rows
    for b in range(tile_rows, rows + 1, tile_rows):
        if rows % b == 0 and taps * (rows // b) >= TASKS_PER_CORE * cores:
            best = b
    return best


def schedule(s, out, g, parallel=True):
    info, target = g.anchor.tensor.op.attrs, g.target
    C, swap = info["conv"], info["swap"]
    for t in info["packs"]:
        # channels-last copies: rows of images in parallel
        s[t].parallel(s[t].fuse(*t.op.axis[:2]))
    if info.get("chunks") is not None:
        return _schedule_chunked(s, out, info, target, parallel)
    KH, KW, R, Cc = (topi.dim(v) for v in C.shape)
    lanes = target.vector_lanes("float32")
    rt, vecs = tiling.register_tile(target, R, Cc, whole_rows=True, whole_vecs=True)
    cores = tiling.parallel_chunks(target)
    rb = _block(R, rt, KH * KW, cores)
    co, ci, ky, kx = out.op.axis
    r_ax, c_ax = (ci, co) if swap else (co, ci)
    ro, ri = s[out].split(r_ax, factor=rb)
    s[out].reorder(ky, kx, ro, ri, c_ax)
    task = s[out].fuse(ky, kx, ro)
    if parallel:
        s[out].parallel(task)
    Cl = s.cache_write(C, "local")
    s[C].compute_at(s[out], task)
    _, _, r, c = s[C].op.axis
    r_o, r_i = s[C].split(r, factor=rt)
    c_o, c_i = s[C].split(c, factor=vecs * lanes)
    s[C].reorder(r_o, c_o, r_i, c_i)
    s[C].vectorize(s[C].split(c_i, factor=lanes)[1])
    # the register tile accumulates over every pixel of the tap
    s[Cl].compute_at(s[C], c_o)
    _, _, lr, lc = s[Cl].op.axis
    rn, ry, rx = s[Cl].op.reduce_axis
    lv, ll = s[Cl].split(lc, factor=lanes)
    s[Cl].reorder(rn, ry, rx, lr, lv, ll)
    s[Cl].unroll(lr)
    s[Cl].unroll(lv)
    s[Cl].vectorize(ll)


def _tile(s, T, Tl, lead, target):
    """The register tile of product stage `T` (spatial axes `lead` then rows, cols): its
    local cache `Tl` accumulating over T's reduction, stored to T's rows x vectors block."""
    lanes = target.vector_lanes("float32")
    R, Cc = (topi.dim(v) for v in T.shape[-2:])
    rt, vecs = tiling.register_tile(target, R, Cc, whole_rows=True, whole_vecs=True)
    r, c = T.op.axis[-2:]
    r_o, r_i = s[T].split(r, factor=rt)
    c_o, c_i = s[T].split(c, factor=vecs * lanes)
    s[T].reorder(*lead, r_o, c_o, r_i, c_i)
    s[T].vectorize(s[T].split(c_i, factor=lanes)[1])
    s[Tl].compute_at(s[T], c_o)
    lr, lc = s[Tl].op.axis[-2:]
    lv, ll = s[Tl].split(lc, factor=lanes)
    s[Tl].reorder(*s[Tl].op.reduce_axis, lr, lv, ll)
    s[Tl].unroll(lr)
    s[Tl].unroll(lv)
    s[Tl].vectorize(ll)


def _schedule_chunked(s, out, info, target, parallel):
    """Chunks in parallel, each every tap's register tiles over its pixels; then the sum
    over the chunks and the (CO, CI, KH, KW) order, vectorized along their last axes."""
    P, C = info["chunks"], info["conv"]
    Pl = s.cache_write(P, "local")
    b, q, ky, kx = P.op.axis[:4]
    chunk = s[P].fuse(b, q)
    _tile(s, P, Pl, [chunk, ky, kx], target)
    if parallel:
        s[P].parallel(chunk)
    par_vec(s, C, target, True, parallel)
    vec_split(s, out, out.op.axis[-1], topi.dim(out.shape[-1]), target)
