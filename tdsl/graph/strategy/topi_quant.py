"""Tensor-expression definitions of the quantized graph operators (ir/ops_quant.py): the
scaled element-wise ones and the generic integer conv and matmul (int32 arithmetic on the
zero-point-shifted operands; cpu/conv_int8.py has the packed VNNI conv). Added to
`topi.TE` on import."""
from __future__ import annotations

import numpy as np

import tdsl

from . import tag
from .topi import TE, bidx, c, shape_of, uname
from .topi_nn import Lead, conv_generic


def saturate(v, z, dtype):
    """nearbyint (half to even under the default rounding mode, as onnxruntime's
    requantization), plus the zero point, clamped to `dtype` and converted."""
    info = np.iinfo(dtype)
    r = tdsl.nearbyint(v) + tdsl.cast(z, "float32")
    r = tdsl.min(tdsl.max(r, c(float(info.min), "float32")), c(float(info.max), "float32"))
    return tdsl.cast(r, dtype)


def _scaled(kind):
    def build(ins, attrs, out):
        x, s, z = ins
        n = len(out.shape)

        def f(*i):
            xv, sv, zv = x[bidx(n, x, i)], s[bidx(n, s, i)], z[bidx(n, z, i)]
            if kind == "dequantize":
                return tdsl.cast(tdsl.cast(xv, "int32") - tdsl.cast(zv, "int32"), "float32") * sv
            v = tdsl.cast(xv, "float32")
            return saturate(v / sv if kind == "quantize" else v * sv, zv, attrs["out_dtype"])
        return tdsl.compute(out.shape, f, name=uname(kind))
    return build


def qadd(ins, attrs, out):
    """QLinearAdd: ((a - z_a) s_a + (b - z_b) s_b) * (1 / s_y), multiplies only."""
    a, b, sa, za, sb, zb, ry, zy = ins
    n = len(out.shape)
    sa, za, sb, zb, ry, zy = (v[bidx(n, v, (0,) * n)] for v in (sa, za, sb, zb, ry, zy))

    def deq(t, z, sc, i):
        return tdsl.cast(tdsl.cast(t[bidx(n, t, i)], "int32") - tdsl.cast(z, "int32"), "float32") * sc
    return tdsl.compute(out.shape, lambda *i: saturate((deq(a, za, sa, i) + deq(b, zb, sb, i)) * ry, zy,
                                                       attrs["out_dtype"]), name=uname("qadd"))


def qgap(ins, attrs, out):
    """QLinearGlobalAveragePool: the int32 sum, one multiply, round, saturate."""
    x, m, bias, zy = ins
    xs = shape_of(x)
    rax = [tdsl.reduce_axis((0, s), name=f"k{d}") for d, s in enumerate(xs[2:])]
    r = tdsl.compute(out.shape, lambda nn, ch, *_: tdsl.sum(tdsl.cast(x[(nn, ch) + tuple(rax)], "int32"), axis=rax),
                     name=uname("qgap_sum"))
    n = len(out.shape)
    mv, bv, zv = (v[bidx(n, v, (0,) * n)] for v in (m, bias, zy))
    return tdsl.compute(out.shape, lambda *i: saturate(tdsl.cast(r[i] + bv, "float32") * mv, zv, attrs["out_dtype"]),
                        name=uname("qgap"))


def shifted(x, z, name):
    """x - z in int32, z broadcast against x."""
    n = len(x.shape)
    return tdsl.compute(x.shape, lambda *i: tdsl.cast(x[i], "int32") - tdsl.cast(z[bidx(n, z, i)], "int32"),
                        name=uname(name))


def qconv2d(ins, attrs, out):
    x, w, xz, wz = ins
    return conv_generic([shifted(x, xz, "xs"), shifted(w, wz, "ws")], attrs, out)


def qmatmul(ins, attrs, out):
    """One stage, the shifts inside the sum: a stage of shifted weights would be
    recomputed over all of them on every call."""
    a, b, az, bz = ins
    n = len(out.shape)
    k = tdsl.reduce_axis((0, shape_of(a)[-1]), name="k")

    def f(*i):
        ai = bidx(n - 2, Lead(a), i[:-2]) + (i[-2], k)
        bi = bidx(n - 2, Lead(b), i[:-2]) + (k, i[-1])
        da = tdsl.cast(a[ai], "int32") - tdsl.cast(az[bidx(len(a.shape), az, ai)], "int32")
        db = tdsl.cast(b[bi], "int32") - tdsl.cast(bz[bidx(len(b.shape), bz, bi)], "int32")
        return tdsl.sum(da * db, axis=k)
    return tdsl.compute(out.shape, f, name=uname("qmatmul"), tag=tag.MATMUL)


def lut(ins, attrs, out):
    x, t = ins
    lo = int(np.iinfo(x.dtype).min)
    return tdsl.compute(out.shape, lambda *i: t[tdsl.cast(x[i], "int32") - lo], name=uname("lut"))


TE.update({
    "qnn.quantize": _scaled("quantize"), "qnn.dequantize": _scaled("dequantize"),
    "qnn.requantize": _scaled("requantize"), "qnn.conv2d": qconv2d, "qnn.matmul": qmatmul,
    "qnn.add": qadd, "qnn.global_avg_pool": qgap, "qnn.lut": lut,
})
