"""The adjoint of a 2-D max pool (`nn.max_pool_grad`) as a gather of the few windows that
cover each input position, vectorized along the input row.

topi_grad.max_pool_grad writes the gather over every tap of the window, each with its
divisibility test, and the tap of each window's first maximum as a reduction; the
auto-scheduler then runs both as generic loops. Here, with dilation 1, the windows that
cover padded position u of a dimension of stride s and window k are o = u // s - t for t
in 0..ceil(k/s)-1 (tap u % s + t*s, valid while below k), so a 3x3 stride-2 pool's input
position reads 4 windows, not 9 taps with tests. Per (image, channel) plane, computed in
parallel: the window maxima row by row (the forward pool's rows, vectorized along the
output row), the tap of each window's first maximum as a chain of selects over its taps
(row-major, as torch and onnxruntime pick it; taps in the padding never win), then the
input plane's adjoint row by row, each vector of input columns gathering the adjoint and
the chosen tap of its covering windows (a plane's windows are in L1)."""
from __future__ import annotations

import numpy as np

import tdsl

from .. import tag, topi
from ..stages import ishape
from .loops import PAR_MIN_ELEMS, inline_except, vec_split


def applies(g, n):
    """A 2-D float32 max pool adjoint of static shapes and dilation 1."""
    x_t, dy_t = (a.type for a in n.args)
    if x_t.ndim != 4 or x_t.dtype != "float32" or dy_t.dtype != "float32":
        return False
    if any(d != 1 for d in n.attrs["dilation"]):
        return False
    return all(isinstance(d, int) for d in tuple(x_t.shape) + tuple(dy_t.shape))


def max_pool_grad(g, n, tensors):
    x = g.operand(n.args[0], tensors)
    dy = g.operand(n.args[1], tensors)
    a = n.attrs
    (kh, kw), (sh, sw) = a["pool_size"], a["strides"]
    pt, pl = a["padding"][0], a["padding"][1]
    N, C, H, W = n.args[0].type.shape
    OH, OW = n.args[1].type.shape[2:]
    low = tdsl.const(float("-inf"), "float32")
    ty_n, tx_n = -(-kh // sh), -(-kw // sw)      # the windows covering one position
    J = (W + pl - 1) // sw + 1                   # padded columns per phase
    # the chosen taps on a border of ty_n - 1 rows and tx_n - 1 columns of windows that
    # choose nothing, and past the last window as far as the phases read, so that the
    # phases read them without range tests
    OHp, OWp = (H - 1 + pt) // sh + ty_n, J - 1 + tx_n
    oy0, ox0 = ty_n - 1, tx_n - 1
    # the plane padded with -inf and split into column phases: tap (ky, kx) of window
    # (py, px) is xq[py * sh + ky, kx % sw, px + kx // sw], contiguous along px (the
    # plane's one strided, bounds-tested read is here, not once per tap)
    R0, C0 = pt + oy0 * sh, pl + ox0 * sw

    def phase_plane(b, ch, R, r, jj):
        iy, ix = R - R0, jj * sw + (r - C0)
        return tdsl.if_then_else(tdsl.all(iy >= 0, iy < H, ix >= 0, ix < W), x[b, ch, iy, ix], low)
    xq = tdsl.compute((N, C, (OHp - 1) * sh + kh, sw, OWp - 1 + tx_n), phase_plane,
                      name=topi.uname("pool_phases"))
    none = tdsl.const(kh * kw, "int32")

    def first_max(b, ch, py, px):
        # the first tap equal to the maximum; a padding tap wins only where the window's
        # image pixels are all -inf, and its adjoint then lands in the padding, dropped;
        # none for the border windows
        vals = [xq[b, ch, py * sh + ky, kx % sw, px + kx // sw] for ky in range(kh) for kx in range(kw)]
        m = vals[0]
        for t in vals[1:]:
            m = tdsl.max(m, t)
        # a min of constants picked by comparisons: no loads under a select's arms, which
        # the vectorized loop would evaluate under lane masks, one level at a time
        v = None
        for k, t in enumerate(vals):
            pick = tdsl.if_then_else(t == m, tdsl.const(k, "int32"), none)
            v = pick if v is None else tdsl.min(v, pick)
        oy, ox = py - oy0, px - ox0
        window = [c for c, need in ((oy >= 0, oy0), (oy < OH, OHp > OH + oy0),
                                    (ox >= 0, ox0), (ox < OW, OWp > OW + ox0)) if need]
        return tdsl.if_then_else(tdsl.all(*window), v, none) if window else v
    chosen = tdsl.compute((N, C, OHp, OWp), first_max, name=topi.uname("max_pool_tap"))
    f0 = tdsl.const(0, "float32")

    def phase(b, ch, h, r, j):
        """The adjoint of padded column j * sw + r of input row h: the windows j - t (tap
        r + t * sw) of the rows that cover it."""
        u = h + pt
        v = None
        for ty in range(ty_n):
            py, tapy = u // sh - ty + oy0, u % sh + ty * sh
            rows = [tapy < kh] if (ty + 1) * sh > kh else []
            for t in range(tx_n):
                px, tapx = j - t + ox0, r + t * sw
                cols = [tapx < kw] if (t + 1) * sw > kw else []
                hit = tdsl.all(*rows, *cols, chosen[b, ch, py, px] == tapy * kw + tapx)
                term = tdsl.if_then_else(hit, dy[b, ch, py - oy0, px - ox0], f0)
                v = term if v is None else v + term
        return v
    Z = tdsl.compute((N, C, H, sw, J), phase, name=topi.uname("pool_grad_phases"))
    # the phases interleaved back into the row
    dx = tdsl.compute((N, C, H, W), lambda b, ch, h, w: Z[b, ch, h, (w + pl) % sw, (w + pl) // sw],
                      name=topi.uname("max_pool_grad"))
    return tag.mark(dx, tag.MAX_POOL_GRAD, plane=xq, chosen=chosen, phases=Z, sw=sw)


def schedule(s, out, g, parallel=True):
    """Planes in parallel; per plane the window maxima row by row and the chosen taps,
    then per input row its phases, vectorized along the phase, and their interleave (a
    loop of `sw` unrolled stores, which LLVM vectorizes as an interleaved group; with
    stride 1 a vector copy)."""
    info, target = g.anchor.tensor.op.attrs, g.target
    xq, chosen, Z, sw = info["plane"], info["chosen"], info["phases"], info["sw"]
    inline_except(s, out, [xq, chosen, Z])
    b, ch, h, w = out.op.axis
    plane = s[out].fuse(b, ch)
    if sw == 1:
        vec_split(s, out, w, ishape(out)[-1], target)
    else:
        s[out].unroll(s[out].split(w, factor=sw)[1])
    if parallel and int(np.prod(ishape(out))) >= PAR_MIN_ELEMS:
        s[out].parallel(plane)
    s[chosen].compute_at(s[out], plane)
    oy, ox = chosen.op.axis[2:]
    vec_split(s, chosen, ox, ishape(chosen)[-1], target)
    s[xq].compute_at(s[out], plane)
    vec_split(s, xq, xq.op.axis[-1], ishape(xq)[-1], target)
    s[Z].compute_at(s[out], h)
    vec_split(s, Z, Z.op.axis[-1], ishape(Z)[-1], target)
