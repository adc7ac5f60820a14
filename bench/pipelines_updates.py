"""Halide's side of the update pipelines (tdsl.examples.update_pipelines): each app's
algorithm, the same arithmetic in the same order, and its app schedule (the manual CPU
schedule its generator uses, adapted to one channel and float32). Halide funcs are
f(x, y): the same memory as tdsl's [y, x]. Used by bench/pipelines.py."""
from __future__ import annotations

from tdsl.examples.update_pipelines import BINS, IIR_ALPHA, MAX_R, R_SIGMA, S_SIGMA, trilinear

_B5 = (1.0, 4.0, 6.0, 4.0, 1.0)


def histeq_halide(hl, inp, H, W, app):
    x, y, b = hl.Var("x"), hl.Var("y"), hl.Var("b")

    def bin_of(v):
        return hl.clamp(hl.cast(hl.Int(32), v * float(BINS)), 0, BINS - 1)
    hist, cdf, out = hl.Func("hist"), hl.Func("cdf"), hl.Func("equalized")
    r = hl.RDom([(0, W), (0, H)])
    hist[b] = 0
    hist[bin_of(inp[r.x, r.y])] += 1
    rc = hl.RDom([(1, BINS - 1)])
    cdf[b] = hist[b]
    cdf[rc.x] = cdf[rc.x - 1] + cdf[rc.x]
    out[x, y] = hl.cast(hl.Float(32), cdf[bin_of(inp[x, y])]) * (1.0 / (H * W))
    if app:
        # lesson 18's parallel histogram: rfactor over row blocks, one histogram each
        ryo, ryi, u = hl.RVar("ryo"), hl.RVar("ryi"), hl.Var("u")
        hist.compute_root()
        hist.update().split(r.y, ryo, ryi, max(H // 8, 1))
        intm = hist.update().rfactor(ryo, u)
        intm.compute_root().update().parallel(u)
        cdf.compute_root().update().unscheduled()
        out.parallel(y).vectorize(x, 16)
    return out


def iir_blur_halide(hl, inp, H, W, app):
    a = IIR_ALPHA
    x, y = hl.Var("x"), hl.Var("y")
    blur = hl.Func("blur")
    blur[x, y] = inp[x, y]
    ry = hl.RDom([(1, H - 1)])
    blur[x, ry.x] = blur[x, ry.x - 1] * (1 - a) + blur[x, ry.x] * a
    rx = hl.RDom([(1, W - 1)])
    blur[rx.x, y] = blur[rx.x - 1, y] * (1 - a) + blur[rx.x, y] * a
    if app:
        # apps/iir_blur: vectors across the columns, strips of them in parallel; the row
        # pass with rows as vector lanes (the app transposes to the same effect)
        xo, xi, yo, yi = hl.Var("xo"), hl.Var("xi"), hl.Var("yo"), hl.Var("yi")
        blur.parallel(y).vectorize(x, 16)
        blur.update(0).split(x, xo, xi, 64).reorder(xi, ry.x, xo).vectorize(xi, 16).parallel(xo)
        blur.update(1).split(y, yo, yi, 16).reorder(yi, rx.x, yo).vectorize(yi).parallel(yo)
    return blur


def bilateral_grid_halide(hl, inp, H, W, app):
    s, inv_r = S_SIGMA, 1.0 / R_SIGMA
    x, y, z, c = hl.Var("x"), hl.Var("y"), hl.Var("z"), hl.Var("c")

    def pixel(px, py):
        return hl.clamp(inp[hl.clamp(px, 0, W - 1), hl.clamp(py, 0, H - 1)], 0.0, 1.0)
    r = hl.RDom([(0, s), (0, s)])
    # grid cell (x, y, z) as tdsl's histogram cell (y + 2, x + 2, z + 2)
    val = pixel(x * s + r.x - s // 2, y * s + r.y - s // 2)
    Z = int(1.0 / R_SIGMA) + 2
    zi = hl.clamp(hl.cast(hl.Int(32), val * inv_r + 0.5), 0, Z - 2)
    hist = hl.Func("histogram")
    hist[x, y, z, c] = 0.0
    hist[x, y, zi, c] += hl.select(c == 0, val, 1.0)
    blurz, blurx, blury = hl.Func("blurz"), hl.Func("blurx"), hl.Func("blury")
    blurz[x, y, z, c] = sum(w * hist[x, y, z + k - 2, c] for k, w in enumerate(_B5))
    blurx[x, y, z, c] = sum(w * blurz[x + k - 2, y, z, c] for k, w in enumerate(_B5))
    blury[x, y, z, c] = sum(w * blurx[x, y + k - 2, z, c] for k, w in enumerate(_B5))
    v = pixel(x, y)
    zv = v * inv_r
    zi2 = hl.clamp(hl.cast(hl.Int(32), zv), 0, Z - 2)
    zf = zv - hl.cast(hl.Float(32), zi2)
    xi, yi = x / s, y / s
    xf = hl.cast(hl.Float(32), x % s) * (1.0 / s)
    yf = hl.cast(hl.Float(32), y % s) * (1.0 / s)

    def at(ch):
        return trilinear(lambda dy, dx, dz: blury[xi + dx, yi + dy, zi2 + dz, ch], xf, yf, zf)
    out = hl.Func("bilateral_grid")
    out[x, y] = at(0) / at(1)
    if app:
        # apps/bilateral_grid's CPU schedule
        hist.compute_at(blurz, y)
        hist.update().reorder(c, r.x, r.y, x, y).unroll(c)
        blurz.compute_root().reorder(c, z, x, y).parallel(y).vectorize(x, 8).unroll(c)
        blurx.compute_root().reorder(c, x, y, z).parallel(z).vectorize(x, 8).unroll(c)
        blury.compute_root().reorder(c, x, y, z).parallel(z).vectorize(x, 8).unroll(c)
        out.compute_root().parallel(y).vectorize(x, 8)
    return out


def max_filter_halide(hl, inp, H, W, app):
    R = MAX_R
    x, y = hl.Var("x"), hl.Var("y")
    vert, out = hl.Func("vert"), hl.Func("max_filter")
    vert[x, y] = inp[x, y]
    rv = hl.RDom([(1, 2 * R)])
    vert[x, y] = hl.max(vert[x, y], inp[x, y + rv.x])
    out[x, y] = vert[x, y]
    rh = hl.RDom([(1, 2 * R)])
    out[x, y] = hl.max(out[x, y], vert[x + rh.x, y])
    if app:
        xo, xi = hl.Var("xo"), hl.Var("xi")
        for f, r in ((vert, rv), (out, rh)):
            f.compute_root().parallel(y).vectorize(x, 16)
            f.update().split(x, xo, xi, 16, hl.TailStrategy.GuardWithIf).reorder(xi, r.x, xo, y) \
                .vectorize(xi).parallel(y)
    return out


HALIDE = {"histeq": histeq_halide, "iir_blur": iir_blur_halide,
          "bilateral_grid": bilateral_grid_halide, "max_filter": max_filter_halide}
