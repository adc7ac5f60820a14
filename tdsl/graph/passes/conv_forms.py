"""Convolutions in forms the 2-D conv strategies (CPU: blocked, 1x1, grouped and depthwise,
rows; GPU: the tiled GEMM) take.

* Over one spatial dimension: a conv over two, one row high. The reshapes around it are
  views (memory.py gives such groups no buffer) and the weights' reshape folds away. The
  pools of such rows (a max pool after the stem, the global pool before the classifier)
  become 2-D pools of the row (`row_pools_as_2d`), so that the convs of a 1-D CNN form
  one blocked chain like a 2-D CNN's (layout.py).
* Transposed with a stride s: s^2 stride-1 convs, one per output phase, as one conv2d with
  s^2 x CO output channels over the input (each phase's taps, ceil(K/s) per dimension, set
  in a shared window), then the phases interleaved (pixel shuffle). Spreading the input on
  the stride grid instead would multiply s^2 more zeros than taps. Weights that are a
  module input (a gradient module's data adjoints) get s^2 convs, each with only its
  phase's taps sliced from them, their outputs concatenated and interleaved.
* Dilated past its input: a tap that reads only zero padding for every output position (a
  segmentation head's 3x3 conv of dilation 24 or 36 over a 14x14 map has only its centre
  tap in the image) is dropped with its weights and the padding shrunk to match, so the
  conv neither multiplies zeros nor pads a plane mostly of zeros. Where the live taps
  change along the image (a dilation of 12 over 14 rows: the outer taps reach the image
  only from the first and last two rows), the output is split into bands of equal live
  taps, each a conv with only those taps over the input rows it reads, concatenated back:
  ASPP's 3x3 dilation-12 conv then does 324 of its 1764 tap-pixels."""
from __future__ import annotations

import numpy as np

from ..ir import Call, Const, Module
from .rewrite import rewrite, same

_AFFINE = ("add", "subtract", "multiply", "divide")


def _row(e):
    shape = list(e.type.shape)
    return Call("reshape", [e], {"newshape": shape[:2] + [1] + shape[2:]})


def conv1d_as_conv2d(mod: Module) -> Module:
    """nn.conv1d(x, w) -> reshape(nn.conv2d(x[:, :, None], w[:, :, None])), and the same
    for nn.conv1d_transpose. A bias or a constant scale or shift on the result (a folded
    batch norm) goes inside the reshape with the constant given the row axis, so that it
    joins the conv's kernel (sink_reshapes moves activations after it)."""
    rows = {}       # reshape made here -> the 2-D tensor inside it

    def wrap(y, n):
        out = Call("reshape", [y], {"newshape": list(n.type.shape)}, n.span)
        rows[out] = y
        return out

    def visit(n, args):
        if n.op == "nn.bias_add" and args[0] in rows and n.attrs.get("axis") == 1:
            return wrap(Call("nn.bias_add", [rows[args[0]], args[1]], n.attrs, n.span), n)
        if n.op in _AFFINE and args[0] in rows and isinstance(args[1], Const) \
                and n.type.shape == args[0].type.shape:
            c = args[1].data
            c = c.reshape(c.shape[:-1] + (1,) + c.shape[-1:]) if c.ndim else c
            return wrap(Call(n.op, [rows[args[0]], Const(c)], n.attrs, n.span), n)
        if n.op not in ("nn.conv1d", "nn.conv1d_transpose"):
            return same(n, args)
        y = Call(n.op.replace("1d", "2d"), [_row(args[0]), _row(args[1])], attrs_as_2d(n.attrs), n.span)
        return wrap(y, n)
    return rewrite(mod, visit)


_ROW_POOLS = {"nn.max_pool1d": "nn.max_pool2d", "nn.avg_pool1d": "nn.avg_pool2d"}


def row_pools_as_2d(mod: Module) -> Module:
    """pool1d(reshape(y)) -> reshape(pool2d(y)) with windows one row high, and
    global_avg_pool(reshape(y)) -> reshape(global_avg_pool(y)), where `y` is a row
    (N, C, 1, W) viewed as (N, C, W): a 1-D conv's output after sink_reshapes moved its
    activations above the view. Without them a 1-D CNN's chains of convs end at views and
    stay in NCHW, each conv paying a transposing store of its output."""
    def visit(n, args):
        x = args[0] if args else None
        if n.op not in _ROW_POOLS and n.op != "nn.global_avg_pool" or not isinstance(x, Call) \
                or x.op != "reshape" or x.type.ndim != 3:
            return same(n, args)
        y = x.args[0]
        if list(y.type.shape) != list(x.type.shape[:2]) + [1, x.type.shape[2]]:
            return same(n, args)
        a = dict(n.attrs)
        if n.op in _ROW_POOLS:
            pb, pe = a["padding"]
            a.update(pool_size=[1] + list(a["pool_size"]), strides=[1] + list(a["strides"]),
                     dilation=[1] + list(a["dilation"]), padding=[0, pb, 0, pe])
        pooled = Call(_ROW_POOLS.get(n.op, n.op), [y], a, n.span)
        return Call("reshape", [pooled], {"newshape": list(n.type.shape)}, n.span)
    return rewrite(mod, visit)


def attrs_as_2d(attrs):
    """A 1-D conv's attributes for the 2-D conv over one row."""
    a = dict(attrs)
    pb, pe = a["padding"]
    a.update(strides=[1] + list(a["strides"]), dilation=[1] + list(a["dilation"]), padding=[0, pb, 0, pe])
    if "output_padding" in a:
        a["output_padding"] = [0] + list(a["output_padding"])
    return a


def _live_taps(H, O, s, dl, pb, K):
    """The first and last tap of a dimension (input H, output O, stride s, dilation dl,
    begin padding pb) that reads an input position for some output; taps outside are dead
    (between them none is, the positions they read being monotone in the tap)."""
    live = [k for k in range(K) if any(0 <= o * s + k * dl - pb < H for o in range(O))]
    return (live[0], live[-1]) if live else None


def drop_padding_taps(mod: Module) -> Module:
    """nn.conv1d/2d/3d and qnn.conv2d with constant weights: taps that read only padding
    are removed (module docstring; a quantized conv's padding is its zero point, whose
    products the conv subtracts: nothing either); the result is the same conv with fewer
    taps and less padding."""
    def visit(n, args):
        if n.op not in ("nn.conv1d", "nn.conv2d", "nn.conv3d", "qnn.conv2d") or not isinstance(args[1], Const):
            return same(n, args)
        a = n.attrs
        xs, ws, os_ = args[0].type.shape[2:], args[1].type.shape[2:], n.type.shape[2:]
        nd = len(ws)
        if not all(isinstance(d, int) for d in tuple(xs) + tuple(os_)):
            return same(n, args)
        pads = list(a["padding"])
        cut = []
        for d in range(nd):
            s, dl, pb = a["strides"][d], a["dilation"][d], pads[d]
            live = _live_taps(xs[d], os_[d], s, dl, pb, ws[d])
            if live is None:
                return same(n, args)
            k0, k1 = live
            pe = (os_[d] - 1) * s + k1 * dl - pb - (xs[d] - 1)     # keeps the output size
            if (k0, k1) == (0, ws[d] - 1) or pe < 0:
                cut.append(slice(None))
                continue
            pads[d], pads[nd + d] = pb - k0 * dl, pe
            cut.append(slice(k0, k1 + 1))
        if all(c == slice(None) for c in cut):
            return same(n, args)
        w = np.ascontiguousarray(args[1].data[(slice(None), slice(None)) + tuple(cut)])
        return Call(n.op, [args[0], Const(w)] + list(args[2:]), dict(a, padding=pads), n.span)
    return rewrite(mod, visit)


# a dimension is split into bands when that removes at least this share of its taps
BAND_MIN_SAVING = 0.5
MAX_BANDS = 3


def _bands(H, O, s, dl, pb, K):
    """[(o0, o1, k0, k1)]: runs of output positions with the same live taps (k0..k1)."""
    out = []
    for o in range(O):
        live = [k for k in range(K) if 0 <= o * s + k * dl - pb < H]
        if not live:
            return None
        key = (live[0], live[-1])
        if out and out[-1][2:] == key:
            out[-1] = (out[-1][0], o + 1) + key
        else:
            out.append((o, o + 1) + key)
    return out


def _split_bands(n, x, w, d=0):
    """conv2d node `n` of input `x`, constant weights `w`, split into bands along spatial
    dimension d and then d + 1 (module docstring); n itself when that saves too little."""
    a = n.attrs
    nd = 2
    if d >= nd:
        return Call(n.op, [x, w], a, n.span)
    H, O, K = x.type.shape[2 + d], n.type.shape[2 + d], w.type.shape[2 + d]
    s, dl, pb = a["strides"][d], a["dilation"][d], a["padding"][d]
    bands = _bands(H, O, s, dl, pb, K)
    if bands is None or len(bands) == 1 or len(bands) > MAX_BANDS \
            or sum((o1 - o0) * (k1 - k0 + 1) for o0, o1, k0, k1 in bands) > (1 - BAND_MIN_SAVING) * O * K:
        return _split_bands(n, x, w, d + 1)
    parts = []
    for o0, o1, k0, k1 in bands:
        lo, hi = o0 * s + k0 * dl - pb, (o1 - 1) * s + k1 * dl - pb + 1
        begin, end = [0] * 4, list(x.type.shape)
        begin[2 + d], end[2 + d] = lo, hi
        xs = Call("strided_slice", [x], {"begin": begin, "end": end, "strides": [1] * 4}, n.span)
        cut = [slice(None)] * 4
        cut[2 + d] = slice(k0, k1 + 1)
        wb = Const(np.ascontiguousarray(w.data[tuple(cut)]))
        pads = list(a["padding"])
        pads[d], pads[nd + d] = 0, 0
        band = Call(n.op, [xs, wb], dict(a, padding=pads), n.span)
        parts.append(_split_bands(band, xs, wb, d + 1))
    return Call("concatenate", parts, {"axis": 2 + d}, n.span)


def split_padding_bands(mod: Module) -> Module:
    """nn.conv2d with constant weights whose taps reach the image only from some output
    rows or columns: one conv per band of equal live taps, concatenated (module
    docstring)."""
    def visit(n, args):
        # groups 1: a depthwise conv's few multiply-adds would not pay for nine kernels;
        # the bands are of the image, so a symbolic batch is sliced and concatenated whole
        if n.op != "nn.conv2d" or not isinstance(args[1], Const) or n.attrs["groups"] != 1 \
                or not all(isinstance(v, int) for v in tuple(args[0].type.shape[2:]) + tuple(n.type.shape[2:])):
            return same(n, args)
        y = _split_bands(Call(n.op, args, n.attrs, n.span), args[0], args[1])
        return y if y.op == "concatenate" else same(n, args)
    return rewrite(mod, visit)


def _phase_taps(s, K, p):
    """Per dimension, for the output phases r of a transposed conv (stride s, K taps, begin
    padding p): the window start `lo` relative to the phase's input position, its length
    T, and per phase r the (window index u, tap k) pairs: out[s*q + r] = sum over them of
    x[q + lo + u] * w[k]."""
    J = -(-K // s)
    c = [(r + p) // s for r in range(s)]
    lo = min(c) - (J - 1)
    T = max(c) - lo + 1
    pairs = [[(c[r] - j - lo, (r + p) % s + s * j) for j in range(J) if (r + p) % s + s * j < K]
             for r in range(s)]
    return lo, T, pairs


def _phase_convs(n, x, w):
    """nn.conv2d_transpose(x, w) of weights that are a module input (a gradient module's
    data adjoint), stride > 1: one stride-1 conv per output phase, each with only its own
    taps (strided slices of the weights, reversed), concatenated and interleaved. One
    conv over a window shared by the phases (`_phases`) would multiply zero taps: a 3x3
    stride-2 kernel's phases have 1, 2, 2 and 4 taps in windows at different offsets,
    whose union is the whole 3x3. None where a phase's window would start inside the
    input or end past its padding."""
    a = n.attrs
    N, CI, X, Y = x.type.shape
    _, CO, KH, KW = w.type.shape
    OH, OW = n.type.shape[2:]
    (sh, sw), pads = a["strides"], a["padding"]
    Q = [-(-OH // sh), -(-OW // sw)]
    outs = []
    for ry in range(sh):
        for rx in range(sw):
            begin, end, step, pb, pe, taps = [0, 0], [CI, CO], [1, 1], [], [], []
            for d, (r, st, K, size) in enumerate(((ry, sh, KH, X), (rx, sw, KW, Y))):
                k0 = (r + pads[d]) % st
                J = len(range(k0, K, st))
                lo = (r + pads[d]) // st - (J - 1)
                pb.append(-lo)
                pe.append(Q[d] + lo + J - 1 - size)
                begin.append(k0 + st * (J - 1))
                end.append(k0 - st if k0 - st >= 0 else -1)
                step.append(-st)
                taps.append(J)
            if 0 in taps:       # K < stride: no tap lands on this phase
                outs.append(Const(np.zeros((N, CO, Q[0], Q[1]), x.type.dtype)))
                continue
            if min(pb + pe) < 0:
                return None
            wr = Call("strided_slice", [w], {"begin": begin, "end": end, "strides": step}, n.span)
            wr = Call("transpose", [wr], {"axes": [1, 0, 2, 3]}, n.span)
            outs.append(Call("nn.conv2d", [x, wr], {"strides": [1, 1], "padding": [pb[0], pb[1], pe[0], pe[1]],
                                                     "dilation": [1, 1], "groups": 1}, n.span))
    return _shuffle(n, Call("concatenate", outs, {"axis": 1}, n.span), Q)


def _shuffle(n, y, Q):
    """The phases (N, sh*sw*CO, Q0, Q1), phase-major, interleaved into the output."""
    (sh, sw) = n.attrs["strides"]
    N, CO, OH, OW = n.type.shape
    y = Call("reshape", [y], {"newshape": [N, sh, sw, CO, Q[0], Q[1]]}, n.span)
    y = Call("transpose", [y], {"axes": [0, 3, 4, 1, 5, 2]}, n.span)
    y = Call("reshape", [y], {"newshape": [N, CO, Q[0] * sh, Q[1] * sw]}, n.span)
    if (Q[0] * sh, Q[1] * sw) != (OH, OW):
        y = Call("strided_slice", [y], {"begin": [0, 0, 0, 0], "end": [N, CO, OH, OW],
                                        "strides": [1, 1, 1, 1]}, n.span)
    return y


def _phases(n, x, w):
    """nn.conv2d_transpose(x, w) with constant weights, stride > 1 as conv2d + shuffle, or
    None where the window would start inside the input (padding >= stride x taps)."""
    a = n.attrs
    N, CI, X, Y = x.type.shape
    _, CO, KH, KW = w.type.shape
    OH, OW = n.type.shape[2:]
    (sh, sw), pads = a["strides"], a["padding"]
    dims = [_phase_taps(sh, KH, pads[0]), _phase_taps(sw, KW, pads[1])]
    Q = [-(-OH // sh), -(-OW // sw)]
    pb = [-d[0] for d in dims]
    pe = [Q[i] + dims[i][1] - 1 - (X, Y)[i] - pb[i] for i in range(2)]
    if min(pb + pe) < 0:
        return None
    wd = w.data
    w2 = np.zeros((sh, sw, CO, CI, dims[0][1], dims[1][1]), wd.dtype)
    for ry in range(sh):
        for uy, ky in dims[0][2][ry]:
            for rx in range(sw):
                for ux, kx in dims[1][2][rx]:
                    w2[ry, rx, :, :, uy, ux] = wd[:, :, ky, kx].T
    y = Call("nn.conv2d", [x, Const(w2.reshape(sh * sw * CO, CI, dims[0][1], dims[1][1]))],
             {"strides": [1, 1], "padding": [pb[0], pb[1], pe[0], pe[1]], "dilation": [1, 1],
              "groups": 1}, n.span)
    return _shuffle(n, y, Q)


def transposed_conv_as_phases(mod: Module) -> Module:
    """nn.conv2d_transpose with groups 1, no dilation, a stride > 1 and static shapes ->
    conv2d over the input and a pixel shuffle (module docstring); weights that are a module
    input (a gradient module's data adjoints) get one conv per phase (`_phase_convs`)."""
    def visit(n, args):
        a = n.attrs
        if n.op != "nn.conv2d_transpose" or a["groups"] != 1 \
                or list(a["dilation"]) != [1, 1] or max(a["strides"]) == 1 \
                or not all(isinstance(v, int) for v in tuple(args[0].type.shape) + tuple(n.type.shape)):
            return same(n, args)
        const = isinstance(args[1], Const)
        y = (_phases if const else _phase_convs)(n, args[0], args[1])
        return same(n, args) if y is None else y
    return rewrite(mod, visit)
