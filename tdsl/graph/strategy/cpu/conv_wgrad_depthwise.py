"""The weight adjoint of a float 2-D depthwise conv (`nn.conv_weight_grad` with one input
and one output channel per group) over NCHW planes: dW[c, 0, ky, kx] = sum over n, y, x of
dy[n, c, y, x] * X[n, c, y*s + ky*dl - p, x*s + kx*dl - p].

topi's definition is a reduction per weight over every pixel, which the auto-scheduler
runs one scalar at a time. Here each channel (one parallel task) keeps one vector of
partial sums per tap in registers while it walks its planes a vector of output columns at
a time (the adjoint's vector loaded once for every tap, the data's taps as strided loads),
then sums each tap's lanes. Columns past the row's end and taps in the padding read
nothing (masked loads)."""
from __future__ import annotations

import tdsl

from .. import tag, topi


def applies(g, n):
    """A 2-D float32 depthwise weight adjoint (groups = input = output channels) of static
    shapes."""
    x_t, dy_t = (a.type for a in n.args)
    if x_t.ndim != 4 or x_t.dtype != "float32" or dy_t.dtype != "float32":
        return False
    if not all(isinstance(d, int) for d in tuple(x_t.shape) + tuple(dy_t.shape)):
        return False
    return n.attrs["groups"] == x_t.shape[1] == dy_t.shape[1]


def compute(g, n, tensors):
    x = g.operand(n.args[0], tensors)
    dy = g.operand(n.args[1], tensors)
    a = n.attrs
    N, C, H, W = n.args[0].type.shape
    OH, OW = n.args[1].type.shape[2:]
    KH, KW = a["kernel_size"]
    (sh, sw), (dh, dw), p = a["strides"], a["dilation"], a["padding"]
    lanes = g.target.vector_lanes("float32")
    XV = -(-OW // lanes)
    rn = tdsl.reduce_axis((0, N), "n")
    ry = tdsl.reduce_axis((0, OH), "y")
    rv = tdsl.reduce_axis((0, XV), "xv")
    f0 = tdsl.const(0, "float32")

    def part(c, ky, kx, lane):
        ox = rv * lanes + lane
        iy, ix = ry * sh + (ky * dh - p[0]), ox * sw + (kx * dw - p[1])
        conds = [ox < OW] if OW % lanes else []
        conds += [iy >= 0, iy < H, ix >= 0, ix < W]
        v = tdsl.if_then_else(tdsl.all(*conds), dy[rn, c, ry, ox] * x[rn, c, iy, ix], f0)
        return tdsl.sum(v, axis=[rn, ry, rv])
    P = tdsl.compute((C, KH, KW, lanes), part, name=topi.uname("dw_wgrad_lanes"))
    rl = tdsl.reduce_axis((0, lanes), "l")
    out = tdsl.compute((C, 1, KH, KW), lambda c, _, ky, kx: tdsl.sum(P[c, ky, kx, rl], axis=rl),
                       name=topi.uname("dw_wgrad"))
    return tag.mark(out, tag.CONV_WGRAD_DEPTHWISE, lanes_sum=P)


def schedule(s, out, g, parallel=True):
    """Channels in parallel; per channel the taps' vectors of partial sums in registers
    over its pixels, then their lanes summed."""
    P = g.anchor.tensor.op.attrs["lanes_sum"]
    Pl = s.cache_write(P, "local")
    c = out.op.axis[0]
    if parallel:
        s[out].parallel(c)
    s[P].compute_at(s[out], c)
    s[P].vectorize(P.op.axis[-1])
    s[Pl].compute_at(s[out], c)
    _, ky, kx, lane = s[Pl].op.axis
    s[Pl].reorder(*s[Pl].op.reduce_axis, ky, kx, lane)
    s[Pl].unroll(ky)
    s[Pl].unroll(kx)
    s[Pl].vectorize(lane)
