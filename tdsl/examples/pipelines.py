"""Multi-stage image pipelines as Halide's apps define them, float32 on one channel, each
with its numpy reference: the definitions `tdsl.auto_schedule`'s stencil rule is measured
on (bench/pipelines.py, beside Halide's autoschedulers) and tested with.

Arrays are [y, x], x contiguous. The output is smaller than the input by the halo
(`HALO[name]` on each axis), so no stage clamps at the borders:
- harris: Sobel x and y, the products Ixx Iyy Ixy, 3x3 box sums, det - 0.04 trace^2
  (apps/harris without the gray conversion);
- unsharp: a 5-tap Gaussian in x then in y, sharpen = 2 in - blur, ratio = sharpen / in,
  out = ratio * in (apps/unsharp on one channel);
- blur: a 3x3 box blur as two separable passes (apps/blur).

Each `name(H, W)` returns (input placeholder, output tensor); H and W may be size
variables. `name_numpy(a)` computes the same from the input array."""
from __future__ import annotations

from .. import te

K_HARRIS = 0.04
GAUSS5 = (0.0625, 0.25, 0.375, 0.25, 0.0625)
HALO = {"harris": 4, "unsharp": 4, "blur": 2}


def harris(H, W):
    inp = te.placeholder((H + 4, W + 4), name="input")
    Ix = te.compute((H + 2, W + 2), lambda y, x: (
        inp[y, x + 2] - inp[y, x] + 2.0 * (inp[y + 1, x + 2] - inp[y + 1, x])
        + inp[y + 2, x + 2] - inp[y + 2, x]) * (1.0 / 12), name="Ix")
    Iy = te.compute((H + 2, W + 2), lambda y, x: (
        inp[y + 2, x] - inp[y, x] + 2.0 * (inp[y + 2, x + 1] - inp[y, x + 1])
        + inp[y + 2, x + 2] - inp[y, x + 2]) * (1.0 / 12), name="Iy")
    Ixx = te.compute((H + 2, W + 2), lambda y, x: Ix[y, x] * Ix[y, x], name="Ixx")
    Iyy = te.compute((H + 2, W + 2), lambda y, x: Iy[y, x] * Iy[y, x], name="Iyy")
    Ixy = te.compute((H + 2, W + 2), lambda y, x: Ix[y, x] * Iy[y, x], name="Ixy")

    def box(T, name):
        return te.compute((H, W), lambda y, x: (
            T[y, x] + T[y, x + 1] + T[y, x + 2] + T[y + 1, x] + T[y + 1, x + 1] + T[y + 1, x + 2]
            + T[y + 2, x] + T[y + 2, x + 1] + T[y + 2, x + 2]), name=name)

    Sxx, Syy, Sxy = box(Ixx, "Sxx"), box(Iyy, "Syy"), box(Ixy, "Sxy")
    out = te.compute((H, W), lambda y, x: (
        Sxx[y, x] * Syy[y, x] - Sxy[y, x] * Sxy[y, x]
        - K_HARRIS * (Sxx[y, x] + Syy[y, x]) * (Sxx[y, x] + Syy[y, x])), name="harris")
    return inp, out


def harris_numpy(a):
    ix = (a[:-2, 2:] - a[:-2, :-2] + 2 * (a[1:-1, 2:] - a[1:-1, :-2]) + a[2:, 2:] - a[2:, :-2]) / 12
    iy = (a[2:, :-2] - a[:-2, :-2] + 2 * (a[2:, 1:-1] - a[:-2, 1:-1]) + a[2:, 2:] - a[:-2, 2:]) / 12

    def box(t):
        return sum(t[dy:t.shape[0] - 2 + dy, dx:t.shape[1] - 2 + dx]
                   for dy in range(3) for dx in range(3))
    sxx, syy, sxy = box(ix * ix), box(iy * iy), box(ix * iy)
    return sxx * syy - sxy * sxy - K_HARRIS * (sxx + syy) ** 2


def unsharp(H, W):
    g = GAUSS5
    inp = te.placeholder((H + 4, W + 4), name="input")
    blur_x = te.compute((H + 4, W), lambda y, x: (
        g[0] * (inp[y, x] + inp[y, x + 4]) + g[1] * (inp[y, x + 1] + inp[y, x + 3])
        + g[2] * inp[y, x + 2]), name="blur_x")
    blur_y = te.compute((H, W), lambda y, x: (
        g[0] * (blur_x[y, x] + blur_x[y + 4, x]) + g[1] * (blur_x[y + 1, x] + blur_x[y + 3, x])
        + g[2] * blur_x[y + 2, x]), name="blur_y")
    sharpen = te.compute((H, W), lambda y, x: 2.0 * inp[y + 2, x + 2] - blur_y[y, x],
                         name="sharpen")
    ratio = te.compute((H, W), lambda y, x: sharpen[y, x] / inp[y + 2, x + 2], name="ratio")
    out = te.compute((H, W), lambda y, x: ratio[y, x] * inp[y + 2, x + 2], name="unsharp")
    return inp, out


def unsharp_numpy(a):
    g = GAUSS5
    bx = g[0] * (a[:, :-4] + a[:, 4:]) + g[1] * (a[:, 1:-3] + a[:, 3:-1]) + g[2] * a[:, 2:-2]
    by = g[0] * (bx[:-4] + bx[4:]) + g[1] * (bx[1:-3] + bx[3:-1]) + g[2] * bx[2:-2]
    c = a[2:-2, 2:-2]
    return (2 * c - by) / c * c


def blur(H, W):
    inp = te.placeholder((H + 2, W + 2), name="input")
    bx = te.compute((H + 2, W), lambda y, x: (inp[y, x] + inp[y, x + 1] + inp[y, x + 2])
                    * (1.0 / 3), name="blur_x")
    by = te.compute((H, W), lambda y, x: (bx[y, x] + bx[y + 1, x] + bx[y + 2, x]) * (1.0 / 3),
                    name="blur_y")
    return inp, by


def blur_numpy(a):
    bx = (a[:, :-2] + a[:, 1:-1] + a[:, 2:]) / 3
    return (bx[:-2] + bx[1:-1] + bx[2:]) / 3


PIPELINES = {"harris": (harris, harris_numpy), "unsharp": (unsharp, unsharp_numpy),
             "blur": (blur, blur_numpy)}
