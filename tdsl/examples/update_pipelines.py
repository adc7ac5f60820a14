"""Image pipelines that need update definitions (`tdsl.update`), as Halide's apps write
them, float32 on one channel, each with its numpy reference and a hand schedule (Halide's
app schedule in tdsl's terms): measured by bench/pipelines.py beside Halide's own, and
tested with.

Arrays are [y, x], x contiguous; `HALO[name]` is how much larger than the output the
input is on each axis.
- histeq: histogram equalization: a 256-bin histogram of the image (a scatter: the bin is
  read from the data), its cumulative sum (a prefix sum, an update along the bins), and a
  lookup of each pixel's bin in it;
- iir_blur: a first-order recursive filter down the columns, then along the rows
  (apps/iir_blur's causal pass): two updates of one buffer, each reading the element its
  previous iteration wrote;
- bilateral_grid: apps/bilateral_grid: each 8x8 tile of the image scattered into a grid
  of intensity bins (value and weight), the grid blurred by [1 4 6 4 1] along z, x and y,
  then sliced by trilinear interpolation at each pixel (s_sigma 8, r_sigma 0.1; the image
  read with its edges repeated, as the app's `repeat_edge`);
- max_filter: a (2R+1)^2 maximum as a vertical and a horizontal pass, each Halide's
  `f(x, y) = max(f(x, y), in(x, y + r))` update over an RDom.

`name(H, W)` returns (input placeholder, output tensor); `name_numpy(a)` the reference;
`name_hand(out, target)` the hand schedule."""
from __future__ import annotations

import numpy as np

import tdsl
from tdsl.ir import expr as E
from tdsl.target import as_target

BINS = 256
IIR_ALPHA = 0.25
S_SIGMA, R_SIGMA = 8, 0.1
MAX_R = 4
HALO = {"histeq": 0, "iir_blur": 0, "bilateral_grid": 0, "max_filter": 2 * MAX_R}
_B5 = (1.0, 4.0, 6.0, 4.0, 1.0)


def _clamp(v, lo, hi):
    return tdsl.min(tdsl.max(v, lo), hi)


def _stage(out, name):
    """The tensor that `out`'s stages read of the stage named `name`: for a stage with
    updates, its last update's (only that update's tensor is read outside the chain, so
    it is met before the others)."""
    seen, todo = set(), [out]
    while todo:
        t = todo.pop()
        if getattr(t.op, "base", t.op).name == name:
            return t
        if id(t.op) not in seen:
            seen.add(id(t.op))
            todo.extend(t.op.input_tensors())
    raise KeyError(name)


# ---------------------------------------------------------------------------- histeq

def _bin(v):
    return _clamp(E.cast(v * float(BINS), "int32"), 0, BINS - 1)


def histeq(H, W):
    inp = tdsl.placeholder((H, W), name="input")
    hist = tdsl.compute((BINS,), lambda b: E.const(0, "int32"), name="hist")
    rx, ry = tdsl.reduce_axis((0, W), "rx"), tdsl.reduce_axis((0, H), "ry")
    hist = tdsl.update(hist, lambda: _bin(inp[ry, rx]), lambda old: old + 1, axis=[rx, ry])
    cdf = tdsl.compute((BINS,), lambda b: hist[b], name="cdf")
    r = tdsl.reduce_axis((1, BINS), "r")
    cdf = tdsl.update(cdf, lambda: r, lambda old: cdf[r - 1] + old, axis=r)
    scale = 1.0 / (H * W)
    out = tdsl.compute((H, W), lambda y, x: E.cast(cdf[_bin(inp[y, x])], "float32") * scale,
                     name="equalized")
    return inp, out


def histeq_numpy(a):
    b = np.clip((a.astype(np.float32) * np.float32(BINS)).astype(np.int32), 0, BINS - 1)
    cdf = np.cumsum(np.bincount(b.ravel(), minlength=BINS))
    return cdf[b].astype(np.float32) * np.float32(1.0 / a.size)


def histeq_hand(out, target):
    """The histogram in one private histogram per core (rfactor over row blocks), the sum
    serial, the lookup parallel over rows and vectorized."""
    t = as_target(target)
    s = tdsl.create_schedule(out)
    hist = _stage(out, "hist")
    u = s[hist].update(0)
    ry = u.op.reduce_axis[0]
    ro, _ = u.split(ry, nparts=max(t.num_cores, 1) * 4)
    rf = s.rfactor(hist, ro)
    s[rf].parallel(s[rf].op.axis[0])
    s[rf].update(0).parallel(s[rf].update(0).op.axis[-1])
    y, x = out.op.axis
    xo, xi = s[out].split(x, factor=t.vector_lanes("float32"))
    s[out].vectorize(xi)
    s[out].parallel(y)
    return s


# ---------------------------------------------------------------------------- iir_blur

def iir_blur(H, W):
    a = IIR_ALPHA
    inp = tdsl.placeholder((H, W), name="input")
    blur = tdsl.compute((H, W), lambda y, x: inp[y, x], name="blur")
    ry = tdsl.reduce_axis((1, H), "ry")
    blur = tdsl.update(blur, lambda x: (ry, x), lambda old, x: blur[ry - 1, x] * (1 - a) + old * a,
                     axis=ry)
    rx = tdsl.reduce_axis((1, W), "rx")
    blur = tdsl.update(blur, lambda y: (y, rx), lambda old, y: blur[y, rx - 1] * (1 - a) + old * a,
                     axis=rx)
    return inp, blur


def iir_blur_numpy(a):
    al = IIR_ALPHA
    g = a.astype(np.float64).copy()
    for y in range(1, g.shape[0]):
        g[y] = g[y - 1] * (1 - al) + g[y] * al
    for x in range(1, g.shape[1]):
        g[:, x] = g[:, x - 1] * (1 - al) + g[:, x] * al
    return g


def iir_blur_hand(out, target):
    """apps/iir_blur's schedule on the CPU: the column pass vectorized across columns,
    strips of columns in parallel (the pure variable split around the serial reduction);
    the row pass in parallel over rows, each row's recurrence serial along it."""
    t = as_target(target)
    lanes = t.vector_lanes("float32")
    s = tdsl.create_schedule(out)
    y, x = out.op.base.axis
    s[out].parallel(y)
    s[out].vectorize(s[out].split(x, factor=lanes)[1])
    cols = s[out].update(0)
    (cx,), (cr,) = cols.op.axis, cols.op.reduce_axis
    xo, xi = cols.split(cx, factor=lanes * 4)
    cols.reorder(xo, cr, xi)
    xv, xl = cols.split(xi, factor=lanes)
    cols.unroll(xv)
    cols.vectorize(xl)
    cols.parallel(xo)
    rows = s[out].update(1)
    rows.parallel(rows.op.axis[0])
    return s


# ---------------------------------------------------------------------------- bilateral grid

def trilinear(g, xf, yf, zf):
    """The bilateral grid's slice: `g(dy, dx, dz)` at the 8 corners of a cell, blended by
    the fractions along x, then y, then z (any array or expression type)."""
    def lerp(a, b, f):
        return a + (b - a) * f
    return lerp(lerp(lerp(g(0, 0, 0), g(0, 1, 0), xf), lerp(g(1, 0, 0), g(1, 1, 0), xf), yf),
                lerp(lerp(g(0, 0, 1), g(0, 1, 1), xf), lerp(g(1, 0, 1), g(1, 1, 1), xf), yf), zf)


def grid_dims(H, W):
    # cells of the slice (yi, yi + 1 for y < H), two more each side for the blurs
    return H // S_SIGMA + 1, W // S_SIGMA + 1, int(1.0 / R_SIGMA) + 2


def bilateral_grid(H, W):
    s, inv_r = S_SIGMA, 1.0 / R_SIGMA
    GH, GW, Z = grid_dims(H, W)
    inp = tdsl.placeholder((H, W), name="input")

    def pixel(y, x):
        return _clamp(inp[_clamp(y, 0, H - 1), _clamp(x, 0, W - 1)], 0.0, 1.0)
    # histogram cell (gy, gx, z) is grid cell (gy - 2, gx - 2, z - 2)
    hist = tdsl.compute((GH + 4, GW + 4, Z + 4, 2), lambda gy, gx, z, c: E.const(0.0), name="histogram")
    rx, ry = tdsl.reduce_axis((0, s), "rx"), tdsl.reduce_axis((0, s), "ry")

    def val(gy, gx):
        return pixel((gy - 2) * s + ry - s // 2, (gx - 2) * s + rx - s // 2)

    # the intensity bin: the clamp is what the value in [0, 1] gives anyway; on the integer
    # it proves the write inside the grid (no check per write)
    def index(gy, gx, c):
        return gy, gx, _clamp(E.cast(val(gy, gx) * inv_r + 0.5, "int32"), 0, Z - 2) + 2, c
    hist = tdsl.update(hist, index, lambda old, gy, gx, c: old + tdsl.if_then_else(
        c == 0, val(gy, gx), E.const(1.0)), axis=[rx, ry])
    blurz = tdsl.compute((GH + 4, GW + 4, Z, 2), lambda gy, gx, z, c: sum(
        w * hist[gy, gx, z + k, c] for k, w in enumerate(_B5)), name="blurz")
    blurx = tdsl.compute((GH + 4, GW, Z, 2), lambda gy, gx, z, c: sum(
        w * blurz[gy, gx + k, z, c] for k, w in enumerate(_B5)), name="blurx")
    blury = tdsl.compute((GH, GW, Z, 2), lambda gy, gx, z, c: sum(
        w * blurx[gy + k, gx, z, c] for k, w in enumerate(_B5)), name="blury")

    def slice_(y, x):
        v = pixel(y, x)
        zv = v * inv_r
        zi = _clamp(E.cast(zv, "int32"), 0, Z - 2)
        zf = zv - E.cast(zi, "float32")
        yi, xi = y // s, x // s
        yf = E.cast(y % s, "float32") * (1.0 / s)
        xf = E.cast(x % s, "float32") * (1.0 / s)

        def at(c):
            return trilinear(lambda dy, dx, dz: blury[yi + dy, xi + dx, zi + dz, c], xf, yf, zf)
        return at(0) / at(1)
    out = tdsl.compute((H, W), slice_, name="bilateral_grid")
    return inp, out


def bilateral_grid_numpy(a):
    H, W = a.shape
    s, inv_r = S_SIGMA, np.float32(1.0 / R_SIGMA)
    GH, GW, Z = grid_dims(H, W)
    a32 = np.clip(a.astype(np.float32), 0, 1)
    hist = np.zeros((GH + 4, GW + 4, Z + 4, 2))
    gy, gx, ry, rx = np.meshgrid(np.arange(GH + 4), np.arange(GW + 4), np.arange(s), np.arange(s),
                                 indexing="ij")
    py = np.clip((gy - 2) * s + ry - s // 2, 0, H - 1)
    px = np.clip((gx - 2) * s + rx - s // 2, 0, W - 1)
    v = a32[py, px]
    zi = (v * inv_r + np.float32(0.5)).astype(np.int32) + 2
    np.add.at(hist, (gy, gx, zi, 0), v.astype(np.float64))
    np.add.at(hist, (gy, gx, zi, 1), 1.0)
    bz = sum(w * hist[:, :, k:k + Z] for k, w in enumerate(_B5))
    bx = sum(w * bz[:, k:k + GW] for k, w in enumerate(_B5))
    by = sum(w * bx[k:k + GH] for k, w in enumerate(_B5))
    y, x = np.meshgrid(np.arange(H), np.arange(W), indexing="ij")
    zv = a32 * inv_r
    zi = zv.astype(np.int32)
    zf = (zv - zi).astype(np.float64)
    yi, xi = y // s, x // s
    yf, xf = (y % s) / s, (x % s) / s

    def at(c):
        return trilinear(lambda dy, dx, dz: by[yi + dy, xi + dx, zi + dz, c], xf, yf, zf)
    return at(0) / at(1)


def bilateral_grid_hand(out, target):
    """apps/bilateral_grid's CPU schedule: the histogram computed per grid row of the
    first blur (its rows produced and consumed while in cache, no pass over the whole
    grid to clear it), the blurs at root in parallel over their outer axis, vectorized
    along the innermost contiguous pair (z, c), the slice parallel over rows and
    vectorized."""
    t = as_target(target)
    lanes = t.vector_lanes("float32")
    s = tdsl.create_schedule(out)
    hist = _stage(out, "histogram")
    blurz = _stage(out, "blurz")
    s[hist].compute_at(s[blurz], blurz.op.axis[0])
    u = s[hist].update(0)
    ugy, ugx, uc = u.op.axis
    urx, ury = u.op.reduce_axis[1], u.op.reduce_axis[0]
    u.reorder(ugy, ugx, ury, urx, uc)
    u.unroll(uc)
    for name in ("blurz", "blurx", "blury"):
        b = _stage(out, name)
        by_, bx_, bz_, bc_ = b.op.axis
        zc = s[b].fuse(bz_, bc_)
        s[b].vectorize(s[b].split(zc, factor=8)[1])
        s[b].parallel(by_)
    y, x = out.op.axis
    s[out].vectorize(s[out].split(x, factor=lanes)[1])
    s[out].parallel(y)
    return s


# ---------------------------------------------------------------------------- max filter

def max_filter(H, W):
    R = MAX_R
    inp = tdsl.placeholder((H + 2 * R, W + 2 * R), name="input")
    vert = tdsl.compute((H, W + 2 * R), lambda y, x: inp[y, x], name="vert")
    rv = tdsl.reduce_axis((1, 2 * R + 1), "rv")
    vert = tdsl.update(vert, lambda y, x: (y, x), lambda old, y, x: tdsl.max(old, inp[y + rv, x]), axis=rv)
    out = tdsl.compute((H, W), lambda y, x: vert[y, x], name="max_filter")
    rh = tdsl.reduce_axis((1, 2 * R + 1), "rh")
    out = tdsl.update(out, lambda y, x: (y, x), lambda old, y, x: tdsl.max(old, vert[y, x + rh]), axis=rh)
    return inp, out


def max_filter_numpy(a):
    R = MAX_R
    n = 2 * R + 1
    v = np.max([a[k:a.shape[0] - 2 * R + k] for k in range(n)], axis=0)
    return np.max([v[:, k:v.shape[1] - 2 * R + k] for k in range(n)], axis=0)


def max_filter_hand(out, target):
    """Each pass in parallel over rows, the taps innermost but one, the row vectorized
    inside them: the maximum of a vector of columns advances one tap at a time."""
    t = as_target(target)
    lanes = t.vector_lanes("float32")
    s = tdsl.create_schedule(out)
    for f in (_stage(out, "vert"), out):
        st = s[f]
        y, x = st.op.base.axis if hasattr(st.op, "base") else st.op.axis
        s[f].parallel(y)
        s[f].vectorize(s[f].split(x, factor=lanes)[1])
        u = s[f].update(0)
        (uy, ux), (r,) = u.op.axis, u.op.reduce_axis
        xo, xi = u.split(ux, factor=lanes * 4)
        u.reorder(uy, xo, r, xi)
        xv, xl = u.split(xi, factor=lanes)
        u.unroll(xv)
        u.vectorize(xl)
        u.parallel(uy)
    return s


PIPELINES = {
    "histeq": (histeq, histeq_numpy, histeq_hand),
    "iir_blur": (iir_blur, iir_blur_numpy, iir_blur_hand),
    "bilateral_grid": (bilateral_grid, bilateral_grid_numpy, bilateral_grid_hand),
    "max_filter": (max_filter, max_filter_numpy, max_filter_hand),
}
