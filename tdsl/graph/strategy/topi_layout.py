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


def _blocked_reader(x, attrs, fill, nd=2):
    """x's element (b, ci, *u) of the plain image of `nd` spatial dimensions, padding read
    as `fill`."""
    bn = attrs["bn"]
    sp = shape_of(x)[2:2 + nd]

    def xin(b, ci, *u):
        inside = tdsl.all(*[c for d in range(nd) for c in (u[d] >= 0, u[d] < sp[d])])
        uc = tuple(tdsl.max(tdsl.min(u[d], sp[d] - 1), 0) for d in range(nd))
        v = x[(b, ci // bn) + uc + (ci % bn,)] if attrs["in_blocked"] else x[(b, ci) + uc]
        return tdsl.if_then_else(inside, v, fill)
    return xin


def _conv_blocked(ins, attrs, out):
    """nn.conv2d_blocked and nn.conv3d_blocked."""
    x, w = ins
    bn, g = attrs["bn"], attrs["groups"]
    CO, CIG, *K = shape_of(w)
    nd = len(K)
    s, dl, p = attrs["strides"], attrs["dilation"], attrs["padding"]
    xin = _blocked_reader(x, attrs, c(0, x.dtype), nd)
    rc = tdsl.reduce_axis((0, CIG), "rc")
    rk = [tdsl.reduce_axis((0, K[d]), name) for d, name in enumerate(("kd", "ky", "kx")[3 - nd:])]

    def f(b, cb, *o):
        # channels past CO (a partial last block) repeat channel CO - 1: of no meaning
        co = tdsl.min(cb * bn + o[nd], CO - 1)
        ci = rc if g == 1 else co * CIG + rc
        u = [o[d] * s[d] + rk[d] * dl[d] - p[d] for d in range(nd)]
        return tdsl.sum(xin(b, ci, *u) * w[(co, rc) + tuple(rk)], axis=[rc] + rk)
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
TE["nn.conv2d_blocked"] = _conv_blocked
TE["nn.conv3d_blocked"] = _conv_blocked
TE["qnn.conv2d_blocked"] = _qconv2d_blocked
