"""Direct convolutions that no other CPU definition takes (grouped and depthwise convs of
other dtypes or weights that are not constants: topi_nn.conv_generic), scheduled a row of
the conv at a time; and the depthwise conv with a column stride, defined over a
column-phase-split padded input."""
from __future__ import annotations

import numpy as np

import tdsl

from .. import tag, topi
from ..stages import ishape, stages_of
from .batch import batch, batch_only, image_shape, outer_fuse, parallel as threads, te_batch_only
from .loops import PAR_MIN_MACS, inline_except, vec_split


def applies_depthwise_strided(g, n):
    """A float32 depthwise conv2d with a column stride (its weights constant or not; its
    batch may be symbolic)."""
    a = n.attrs
    C = n.args[0].type.shape[1]
    CO, CI = n.args[1].type.shape[:2]
    return n.args[0].type.dtype == "float32" and a["groups"] == C and CO == C and CI == 1 and a["strides"][1] != 1 \
        and batch_only(g, n)


def depthwise_strided(g, n, tensors):
    """Depthwise 2-D conv with a column stride: the padded input is stored split by column
    phase, (N, C, Hp, sw, Wq) with [.., r, p, q] = padded[.., r, q * sw + p], so every tap
    reads a contiguous run of the row (one strided read per input element instead of one
    per tap)."""
    x_e, w_e = n.args
    a = n.attrs
    N, C = batch(g, x_e), x_e.type.shape[1]
    CO, CI, KH, KW = w_e.type.shape
    (sh, sw), (dh, dw) = a["strides"], a["dilation"]
    x = g.operand(x_e, tensors)
    w = g.operand(w_e, tensors)
    pt, pl = a["padding"][0], a["padding"][1]
    OH, OW = n.type.shape[2:]
    hp = (OH - 1) * sh + (KH - 1) * dh + 1
    wq = OW + ((KW - 1) * dw) // sw
    ph = topi.phase_split_pad(x, hp, wq, sw, pt, pl)
    ky = tdsl.reduce_axis((0, KH), "ky")
    kx = tdsl.reduce_axis((0, KW), "kx")
    return tdsl.compute((N, C, OH, OW), lambda b, ch, oy, ox: tdsl.sum(
        ph[b, ch, oy * sh + ky * dh, (kx * dw) % sw, ox + (kx * dw) // sw] * w[ch, 0, ky, kx], axis=[ky, kx]),
        name=topi.uname("conv"), tag=tag.CONV_GENERIC, attrs={"pad": ph, "depthwise": True})


def _convs(out):
    return [t for t in stages_of(out) if t.op.tag == tag.CONV_GENERIC]


def fits(out, g):
    """Groups of one direct conv followed by an epilogue of its rank (3 or more); with
    symbolic sizes, only the batch."""
    convs = _convs(out)
    return len(convs) == 1 and convs[0] is not out and len(out.shape) == len(convs[0].shape) and len(out.shape) >= 3 \
        and (not g.symbolic or te_batch_only(out) and te_batch_only(convs[0]))


def schedule(s, out, g, parallel=True):
    """Direct convolution (grouped/depthwise, other dtypes): one output row of the conv
    is computed (reductions outside, the row vectorized) right before the epilogue writes it."""
    (conv,), target = _convs(out), g.target
    info = conv.op.attrs
    pad = info["pad"] if info.get("depthwise") else None
    inline_except(s, out, [conv] + ([pad] if pad is not None else []))
    shape = image_shape(out)
    axes = list(out.op.axis)
    n_c = outer_fuse(s, out, axes[:2])
    sp = axes[2:]
    last = sp[-1]
    vec_split(s, out, last, shape[-1], target)
    taps = int(np.prod([topi.dim(r.dom.extent) for r in conv.op.reduce_axis]))
    if parallel:
        threads(s, out, n_c, int(np.prod(shape)) * taps, PAR_MIN_MACS)
    if pad is not None:      # depthwise: the padded plane of one channel, then its rows
        s[pad].compute_at(s[out], n_c)
        vec_split(s, pad, pad.op.axis[-1], ishape(pad)[-1], target)
    attach = sp[-2] if len(sp) >= 2 else n_c
    s[conv].compute_at(s[out], attach)
    caxes = list(s[conv].op.axis)
    raxes = list(s[conv].op.reduce_axis)
    split = vec_split(s, conv, caxes[-1], shape[-1], target)
    if split is not None:
        s[conv].reorder(*caxes[:-1], split[0], *raxes, split[1])
    # small reductions (depthwise taps) unrolled: the accumulator stays in a register
    if int(np.prod([topi.dim(r.dom.extent) for r in raxes])) <= 64:
        for r in raxes:
            s[conv].unroll(r)
