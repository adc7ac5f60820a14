"""Tensor-expression definitions of the channel-blocked layout operators (ir/ops_layout.py):
the transforms, and the blocked convs in their plain forms (any target; the CPU has its
own, cpu/conv_blocked.py and cpu/conv_int8.py). Added to `topi.TE` on import."""
from __future__ import annotations

import tdsl

from .topi import TE, bidx, c, shape_of, uname


def _to_blocked(ins, attrs, out):
    (x,) = ins
    bn = attrs["bn"]
    C = shape_of(x)[1]
    f0 = c(0, x.dtype)

    def f(b, cb, *r):
        ch = cb * bn + r[-1]
        v = x[(b, tdsl.min(ch, C - 1)) + tuple(r[:-1])]
        return tdsl.if_then_else(ch < C, v, f0) if C % bn else v
    y = tdsl.compute(out.shape, f, name=uname("to_blocked"))
    return y


def _from_blocked(ins, attrs, out):
    (x,) = ins
    bn = attrs["bn"]
    return tdsl.compute(out.shape, lambda b, ch, *s: x[(b, ch // bn) + tuple(s) + (ch % bn,)],
                        name=uname("from_blocked"))


def _blocked_reader(x, attrs, fill):
    """x's element (b, ci, y, x) of the plain image, padding read as `fill`."""
    bn = attrs["bn"]
    xs = shape_of(x)
    H, W = xs[2], xs[3]

    def xin(b, ci, y, xx):
        inside = tdsl.all(y >= 0, y < H, xx >= 0, xx < W)
        yc, xc = tdsl.max(tdsl.min(y, H - 1), 0), tdsl.max(tdsl.min(xx, W - 1), 0)
        v = x[b, ci // bn, yc, xc, ci % bn] if attrs["in_blocked"] else x[b, ci, yc, xc]
        return tdsl.if_then_else(inside, v, fill)
    return xin


def _conv2d_blocked(ins, attrs, out):
    x, w = ins
    bn, g = attrs["bn"], attrs["groups"]
    CO, CIG, KH, KW = shape_of(w)
    (sh, sw), (dh, dw), p = attrs["strides"], attrs["dilation"], attrs["padding"]
    xin = _blocked_reader(x, attrs, c(0, x.dtype))
    rc = tdsl.reduce_axis((0, CIG), "rc")
    ky = tdsl.reduce_axis((0, KH), "ky")
    kx = tdsl.reduce_axis((0, KW), "kx")

    def f(b, cb, oy, ox, cc):
        # channels past CO (a partial last block) repeat channel CO - 1: of no meaning
        co = tdsl.min(cb * bn + cc, CO - 1)
        ci = rc if g == 1 else co * CIG + rc
        return tdsl.sum(xin(b, ci, oy * sh + ky * dh - p[0], ox * sw + kx * dw - p[1]) * w[co, rc, ky, kx],
                        axis=[rc, ky, kx])
    return tdsl.compute(out.shape, f, name=uname("conv_blocked"))


def _qconv2d_blocked(ins, attrs, out):
    """The integer conv (groups 1 or depthwise) in int32 on the zero-point-shifted
    operands; padding reads as the data's zero point."""
    x, w, xz, wz = ins
    bn, g = attrs["bn"], attrs["groups"]
    CO, CIG, KH, KW = shape_of(w)
    (sh, sw), (dh, dw), p = attrs["strides"], attrs["dilation"], attrs["padding"]
    zx = xz[bidx(0, xz, ())]
    xin = _blocked_reader(x, attrs, zx)
    rc = tdsl.reduce_axis((0, CIG), "rc")
    ky = tdsl.reduce_axis((0, KH), "ky")
    kx = tdsl.reduce_axis((0, KW), "kx")

    def f(b, cb, oy, ox, cc):
        co = tdsl.min(cb * bn + cc, CO - 1)
        wi = (co, rc, ky, kx)
        ci = rc if g == 1 else co * CIG + rc
        v = tdsl.cast(xin(b, ci, oy * sh + ky * dh - p[0], ox * sw + kx * dw - p[1]), "int32") - tdsl.cast(zx, "int32")
        return tdsl.sum(v * (tdsl.cast(w[wi], "int32") - tdsl.cast(wz[bidx(4, wz, wi)], "int32")), axis=[rc, ky, kx])
    return tdsl.compute(out.shape, f, name=uname("qconv_blocked"))


TE["layout.to_blocked"] = _to_blocked
TE["layout.from_blocked"] = _from_blocked
TE["nn.conv2d_blocked"] = _conv2d_blocked
TE["qnn.conv2d_blocked"] = _qconv2d_blocked
