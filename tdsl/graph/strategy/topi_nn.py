"""Tensor-expression definitions of the neural-network graph operators: reductions, pools,
softmax, layer norm, the generic conv (and transposed), matmul and dense. Added to `topi.TE`
on import."""
from __future__ import annotations

import numpy as np

import tdsl

from . import tag
from .topi import TE, bidx, c, count, is_float, shape_of, uname


# ---------------------------------------------------------------------------- reductions

REDUCERS = {"sum": tdsl.sum, "mean": tdsl.sum, "max": tdsl.max, "min": tdsl.min, "prod": tdsl.prod}


def reduce(op):
    def build(ins, attrs, out):
        (x,) = ins
        xs = shape_of(x)
        axes = attrs["axis"] if attrs["axis"] is not None else list(range(len(xs)))
        keep = attrs["keepdims"]
        red = REDUCERS[op]
        rax = {a: tdsl.reduce_axis((0, xs[a]), name=f"k{a}") for a in axes}
        dt = x.dtype

        def f(*i):
            idx, j = [], 0
            for d in range(len(xs)):
                if d in rax:
                    idx.append(rax[d])
                    if keep:
                        j += 1
                else:
                    idx.append(i[j])
                    j += 1
            val = x[tuple(idx)]
            if dt == "bool":   # uint8: the max identity (0) reads back as False
                val = tdsl.cast(val, "uint8")
            return red(val, axis=[rax[a] for a in axes])
        if not rax:
            return tdsl.compute(out.shape, lambda *i: x[i], name=uname(op))
        r = tdsl.compute(out.shape, f, name=uname(op))
        if op == "mean":
            cnt = count([xs[a] for a in axes], dt)
            return tdsl.compute(out.shape, lambda *i: r[i] / cnt, name=uname("mean_div"))
        if dt == "bool":
            return tdsl.compute(out.shape, lambda *i: r[i] != c(0, "uint8"), name=uname("tobool"))
        return r
    return build


def global_avg_pool(ins, attrs, out):
    (x,) = ins
    xs = shape_of(x)
    rax = [tdsl.reduce_axis((0, s), name=f"k{d}") for d, s in enumerate(xs[2:])]
    r = tdsl.compute(out.shape, lambda n, ch, *_: tdsl.sum(x[(n, ch) + tuple(rax)], axis=rax), name=uname("gap_sum"))
    cnt = count(xs[2:], x.dtype)
    return tdsl.compute(out.shape, lambda *i: r[i] / cnt, name=uname("gap"))


def pool_count(xs, out_dims, attrs, dt):
    """Per output position of an average pool of input shape `xs`, the number of taps its
    window divides by (those inside the input, or inside the padding too with
    `count_include_pad`)."""
    nd = len(xs) - 2
    k, s, p, dl = attrs["pool_size"], attrs["strides"], attrs["padding"], attrs["dilation"]
    rax = [tdsl.reduce_axis((0, k[d]), name=f"q{d}") for d in range(nd)]
    incl = attrs.get("count_include_pad")

    def fc(*sp):
        conds = []
        for d in range(nd):
            pos = sp[d] * s[d] - p[d] + rax[d] * dl[d]
            lo, hi = (-p[d], xs[2 + d] + p[d + nd]) if incl else (0, xs[2 + d])
            conds += [pos >= lo, pos < hi]
        return tdsl.sum(tdsl.if_then_else(tdsl.all(*conds), c(1, dt), c(0, dt)), axis=rax)
    return tdsl.compute(tuple(out_dims), fc, name=uname("pool_cnt"))


def pool(kind):
    def build(ins, attrs, out):
        (x,) = ins
        xs = shape_of(x)
        nd = len(xs) - 2
        k, s, p, dl = attrs["pool_size"], attrs["strides"], attrs["padding"], attrs["dilation"]
        rax = [tdsl.reduce_axis((0, k[d]), name=f"r{d}") for d in range(nd)]
        dt = x.dtype

        def window(sp):
            pos = [sp[d] * s[d] - p[d] + rax[d] * dl[d] for d in range(nd)]
            conds = []
            for d in range(nd):
                conds.append(pos[d] >= 0)
                conds.append(pos[d] < xs[2 + d])
            return pos, tdsl.all(*conds)

        if kind == "max":
            low = c(float("-inf"), dt) if is_float(dt) else c(int(np.iinfo(dt).min), dt)

            def f(n, ch, *sp):
                pos, inside = window(sp)
                return tdsl.max(tdsl.if_then_else(inside, x[(n, ch) + tuple(pos)], low), axis=rax)
            return tdsl.compute(out.shape, f, name=uname("max_pool"))

        def fs(n, ch, *sp):
            pos, inside = window(sp)
            return tdsl.sum(tdsl.if_then_else(inside, x[(n, ch) + tuple(pos)], c(0, dt)), axis=rax)
        total = tdsl.compute(out.shape, fs, name=uname("pool_sum"))
        cnt = pool_count(xs, tuple(out.shape[2:]), attrs, dt)
        return tdsl.compute(out.shape, lambda n, ch, *sp: total[(n, ch) + sp] / tdsl.max(cnt[sp], c(1, dt)),
                            name=uname("avg_pool"))
    return build


def softmax(log=False):
    def build(ins, attrs, out):
        (x,) = ins
        xs = shape_of(x)
        ax = attrs["axis"]
        n = xs[ax]
        k1 = tdsl.reduce_axis((0, n), name="k1")
        k2 = tdsl.reduce_axis((0, n), name="k2")
        rshape = xs[:ax] + xs[ax + 1:]

        def at(i, k):
            return tuple(i[:ax]) + (k,) + tuple(i[ax:])
        mx = tdsl.compute(rshape, lambda *i: tdsl.max(x[at(i, k1)], axis=k1), name=uname("smax"))

        def drop(i):
            return tuple(i[:ax]) + tuple(i[ax + 1:])
        ex = tdsl.compute(xs, lambda *i: tdsl.exp(x[i] - mx[drop(i)]), name=uname("sexp"))
        sm = tdsl.compute(rshape, lambda *i: tdsl.sum(ex[at(i, k2)], axis=k2), name=uname("ssum"))
        if log:
            y = tdsl.compute(xs, lambda *i: x[i] - mx[drop(i)] - tdsl.log(sm[drop(i)]), name=uname("log_softmax"),
                             tag=tag.SOFTMAX, attrs={"axis": ax})
        else:
            # a reciprocal per row and a multiply per element, as onnxruntime computes it:
            # a division per element costs a noticeable share of the whole softmax
            rcp = tdsl.compute(rshape, lambda *i: c(1, x.dtype) / sm[i], name=uname("srcp"))
            y = tdsl.compute(xs, lambda *i: ex[i] * rcp[drop(i)], name=uname("softmax"), tag=tag.SOFTMAX,
                             attrs={"axis": ax})
        return y
    return build


def layer_norm(ins, attrs, out):
    x, g, b = ins
    xs = shape_of(x)
    ax = attrs["axis"]
    dt = x.dtype
    norm = xs[ax:]
    cnt = int(np.prod(norm))
    k1 = [tdsl.reduce_axis((0, s), name=f"a{d}") for d, s in enumerate(norm)]
    k2 = [tdsl.reduce_axis((0, s), name=f"b{d}") for d, s in enumerate(norm)]
    lead = xs[:ax]
    mu = tdsl.compute(lead or (1,), lambda *i: tdsl.sum(x[(tuple(i) if lead else ()) + tuple(k1)], axis=k1), name=uname("ln_sum"))

    def m(i):
        return mu[tuple(i) if lead else (0,)] / c(cnt, dt)

    def var_f(*i):
        d = x[(tuple(i) if lead else ()) + tuple(k2)] - mu[tuple(i) if lead else (0,)] / c(cnt, dt)
        return tdsl.sum(d * d, axis=k2)
    var = tdsl.compute(lead or (1,), var_f, name=uname("ln_var"))

    def f(*i):
        li = tuple(i[:ax])
        r = tdsl.rsqrt(var[li if lead else (0,)] / c(cnt, dt) + c(attrs["epsilon"], dt))
        return (x[i] - m(li)) * r * g[bidx(len(xs), g, i)] + b[bidx(len(xs), b, i)]
    return tdsl.compute(xs, f, name=uname("layer_norm"), tag=tag.LAYER_NORM, attrs={"axis": ax})


# ---------------------------------------------------------------------------- generic conv / matmul

def conv_generic(ins, attrs, out):
    x, w = ins
    xs, ws = shape_of(x), shape_of(w)
    nd = len(xs) - 2
    s, p, dl, g = attrs["strides"], attrs["padding"], attrs["dilation"], attrs["groups"]
    dt = x.dtype
    cig = ws[1]
    cog = ws[0] // g
    if any(p):
        def fp(n, ch, *sp):
            conds = []
            for d in range(nd):
                if p[d]:
                    conds.append(sp[d] >= p[d])
                if p[d + nd]:
                    conds.append(sp[d] < xs[2 + d] + p[d])
            return tdsl.if_then_else(tdsl.all(*conds), x[(n, ch) + tuple(sp[d] - p[d] for d in range(nd))], c(0, dt))
        xp = tdsl.compute((xs[0], xs[1]) + tuple(xs[2 + d] + p[d] + p[d + nd] for d in range(nd)), fp, name=uname("pad"))
    else:
        xp = x
    rc = tdsl.reduce_axis((0, cig), name="rc")
    rk = [tdsl.reduce_axis((0, ws[2 + d]), name=f"rk{d}") for d in range(nd)]

    def f(n, co, *sp):
        ci = (co // cog) * cig + rc if g > 1 else rc
        return tdsl.sum(xp[(n, ci) + tuple(sp[d] * s[d] + rk[d] * dl[d] for d in range(nd))] * w[(co, rc) + tuple(rk)],
                        axis=[rc] + rk)
    return tdsl.compute(out.shape, f, name=uname("conv"), tag=tag.CONV_GENERIC,
                        attrs={"pad": xp if xp is not x else None, "depthwise": cig == 1 and g > 1})


def conv_transpose(ins, attrs, out):
    """Transposed conv as a direct gather: out[o] = sum over input taps that land on o."""
    x, w = ins
    xs, ws = shape_of(x), shape_of(w)
    nd = len(xs) - 2
    s, p, dl, g = attrs["strides"], attrs["padding"], attrs["dilation"], attrs["groups"]
    dt = x.dtype
    cig = xs[1] // g
    cog = ws[1]
    rc = tdsl.reduce_axis((0, cig), name="rc")
    rk = [tdsl.reduce_axis((0, ws[2 + d]), name=f"rk{d}") for d in range(nd)]

    def f(n, co, *sp):
        conds, pos = [], []
        for d in range(nd):
            t = sp[d] + p[d] - rk[d] * dl[d]
            if s[d] > 1:
                conds.append(t % s[d] == 0)
                q = t // s[d]
            else:
                q = t
            conds += [t >= 0, q < xs[2 + d]]
            pos.append(q)
        ci = (co // cog) * cig + rc if g > 1 else rc
        safe = tuple(tdsl.min(tdsl.max(q, 0), xs[2 + d] - 1) for d, q in enumerate(pos))
        v = x[(n, ci) + safe] * w[(ci, co % cog if g > 1 else co) + tuple(rk)]
        return tdsl.sum(tdsl.if_then_else(tdsl.all(*conds), v, c(0, dt)), axis=[rc] + rk)
    return tdsl.compute(out.shape, f, name=uname("conv_transpose"))


def matmul(ins, attrs, out):
    a, b = ins
    n = len(out.shape)
    K = shape_of(a)[-1]
    k = tdsl.reduce_axis((0, K), name="k")

    def f(*i):
        bi = i[:-2]
        ai_ = bidx(n - 2, Lead(a), bi) + (i[-2], k)
        bi_ = bidx(n - 2, Lead(b), bi) + (k, i[-1])
        return tdsl.sum(a[ai_] * b[bi_], axis=k)
    return tdsl.compute(out.shape, f, name=uname("matmul"), tag=tag.MATMUL)


class Lead:
    """The leading (batch) axes of a matmul operand, as `bidx` reads a tensor's shape."""
    def __init__(self, t):
        self.shape = shape_of(t)[:-2]
        self.ndim = len(self.shape)


def dense_generic(ins, attrs, out):
    x, w = ins
    k = tdsl.reduce_axis((0, shape_of(x)[1]), name="k")
    return tdsl.compute(out.shape, lambda i, j: tdsl.sum(x[i, k] * w[j, k], axis=k), name=uname("dense"),
                        tag=tag.DENSE_GENERIC)


TE.update({
    "nn.global_avg_pool": global_avg_pool,
    "nn.softmax": softmax(), "nn.log_softmax": softmax(True), "nn.layer_norm": layer_norm,
    "nn.matmul": matmul, "nn.dense": dense_generic,
})
for _op in ("sum", "mean", "max", "min", "prod"):
    TE[_op] = reduce(_op)
for _nd in (1, 2, 3):
    TE[f"nn.max_pool{_nd}d"] = pool("max")
    TE[f"nn.avg_pool{_nd}d"] = pool("avg")
    TE[f"nn.conv{_nd}d"] = conv_generic
    TE[f"nn.conv{_nd}d_transpose"] = conv_transpose
