"""A 2-D convolution on the GPU as one matrix product over a column buffer (im2col):

    col[k, q] = padded input at tap k = (c, dy, dx) of output pixel q = (n, y, x)
    G[f, q]   = sum_k W[f, k] * col[k, q]          (W: the weights as F x C*KH*KW)
    Y[n, f, y, x] = epilogue(G[f, (n * OH + y) * OW + x])

The direct conv's block tile (`contraction.py`) spans output channels x one output row, so
a late ResNet layer (7x7 or 14x14 pixels, 256-512 channels, a K of 2304-4608) gets 7-14
columns a tile and a thread 8 x 1 outputs, a fraction of the throughput the same rule
reaches on the 56-wide rows of early layers. As one GEMM the batch and the image
are one axis of N*OH*OW columns, which the contraction rule tiles square (and splits
along K when the grid is short), and the shared-memory copies read plain rows.

The price is the column buffer, KH*KW times the input, written once and read once per
block row of G: on a GPU with HBM a few microseconds where the layer's arithmetic takes
a hundred. Three kernels (col, GEMM, the epilogue reading G at the output's indices);
the device-resident executor allocates their intermediates once (`DeviceModule.prepared`)."""
from __future__ import annotations

import tdsl

from .. import tag, topi

# Output pixels per image up to which a 1x1 conv takes the column GEMM (larger convs
# always do): its column buffer is a plain copy of the input, worth its traffic only on
# small images, whose rows make narrow tiles for the direct conv (bench/gpu_probe.py
# policies compares the two).
MAX_PIXELS = 1024
# The largest column buffer taken (bytes): beyond it (a 3x3 conv of 64 channels at 224x224
# and batch 32 would want 3.7 GB) the direct conv, which needs none.
MAX_COLUMN_BYTES = 1 << 28


def applies(n) -> bool:
    x, w = n.args[0].type, n.args[1].type
    if n.op != "nn.conv2d" or len(x.shape) != 4 or n.attrs["groups"] != 1 or \
            x.dtype != "float32" or w.dtype != "float32":
        return False
    if not all(isinstance(d, int) for d in tuple(x.shape) + tuple(w.shape) + tuple(n.type.shape)):
        return False
    N, F, OH, OW = n.type.shape
    K = w.shape[1] * w.shape[2] * w.shape[3]
    if 4 * K * N * OH * OW > MAX_COLUMN_BYTES:
        return False
    return w.shape[2] * w.shape[3] > 1 or OH * OW <= MAX_PIXELS


def conv2d(g, n, tensors):
    """The col / GEMM / gather stages of conv node `n` in group `g`."""
    x = g.operand(n.args[0], tensors)
    N, C, H, W = n.args[0].type.shape
    F, _, KH, KW = n.args[1].type.shape
    OH, OW = n.type.shape[2:]
    (sh, sw), (dh, dw) = n.attrs["strides"], n.attrs["dilation"]
    pt, pl = n.attrs["padding"][0], n.attrs["padding"][1]
    K, P = C * KH * KW, OH * OW
    wi = g.const_param(n.args[1])
    if wi is not None:          # re-laid out once at build: a reshape, rows of K
        wm = g.packed_param(wi, (F, K), lambda a: a.reshape(F, K))
    else:
        w = g.operand(n.args[1], tensors)
        wm = tdsl.compute((F, K), lambda f, k: w[f, k // (KH * KW), k % (KH * KW) // KW, k % KW],
                          name=topi.uname("wmat"))

    def tap(k, q):
        c, r = k // (KH * KW), k % (KH * KW)
        b, p = q // P, q % P
        iy = p // OW * sh + r // KW * dh - pt
        ix = p % OW * sw + r % KW * dw - pl
        inside = tdsl.all(iy >= 0, iy < H, ix >= 0, ix < W)
        return tdsl.if_then_else(inside, x[b, c, iy, ix], topi.c(0, x.dtype))
    col = tdsl.compute((K, N * P), tap, name=topi.uname("col"))
    rk = tdsl.reduce_axis((0, K), name="rk")
    gm = tdsl.compute((F, N * P), lambda f, q: tdsl.sum(wm[f, rk] * col[rk, q], axis=rk),
                      name=topi.uname("conv_gemm"))
    return tdsl.compute(n.type.shape, lambda b, f, yy, xx: gm[f, b * P + yy * OW + xx],
                        name=topi.uname("conv"), tag=tag.CONV_GEMM)
