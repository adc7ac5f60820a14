"""The llvm (and C) schedule of a group: the hand schedule of its anchor's definition, the
auto-scheduler's rules where it has none, or a plain parallel and vectorized loop nest."""
from __future__ import annotations

import numpy as np

from .. import topi
from ..stages import _ishape, _stages
from . import conv1x1, conv_blocked, conv_grouped, conv_int8, conv_spatial, matmul_int8, resize, squeeze
from .anchors import _schedule_dense_packed
from .loops import PAR_MIN_ELEMS, PAR_MIN_MACS, _inline_except, _par_vec, _vec_split
from .pool import _schedule_pool_sep


def schedule_llvm(s, out, g, vectorize=True, parallel=True):
    anchor_t, info = g.anchor if g.anchor else (None, {})
    kind = info.get("kind")
    keep = set()
    if kind == "conv2d_packed" and vectorize:
        return conv_blocked.schedule(s, out, info, parallel, g.target)
    if kind == "depthwise_blocked" and vectorize:
        return conv_blocked.schedule_depthwise(s, out, info, parallel, g.target)
    if kind in ("qconv2d_vnni", "qconv2d_int32") and vectorize:
        return conv_int8.schedule(s, out, info, parallel, g.target)
    if kind == "qmatmul_vnni" and vectorize:
        return matmul_int8.schedule(s, out, info, parallel, g.target)
    if kind == "dense_packed" and vectorize:
        return _schedule_dense_packed(s, out, info, parallel, g.target)
    if kind == "conv1x1_spatial" and vectorize:
        return conv1x1.schedule(s, out, info, parallel, g.target, _inline_except, _stages(out), _par_vec,
                                _vec_split, PAR_MIN_MACS)
    if kind == "conv_grouped" and vectorize and _ishape(out) == _ishape(anchor_t):
        return conv_grouped.schedule(s, out, info, parallel, g.target, _inline_except)
    if kind == "matvec" and vectorize:
        return squeeze.schedule_matvec_group(s, out, info, parallel, g.target, _par_vec, _stages(out))
    if kind == "conv_rows_spatial" and vectorize:
        return conv_spatial.schedule(s, out, info, parallel, g.target, _inline_except, _stages(out), _par_vec,
                                     _vec_split, PAR_MIN_ELEMS)
    if kind == "global_pool_blocked" and vectorize:
        return squeeze.schedule_global_pool_blocked(s, out, info, parallel, g.target, _stages(out))
    if kind == "global_pool" and vectorize:
        return squeeze.schedule_global_pool(s, out, info, parallel, g.target, PAR_MIN_ELEMS, _stages(out))
    if kind == "pool_sep" and vectorize and len(out.shape) == 4:
        return _schedule_pool_sep(s, out, info, parallel, g.target)
    if vectorize and resize.applies(out):
        return resize.schedule(s, out, parallel, g.target)
    convs = [t for t in _stages(out) if getattr(t, "_graph_info", {}).get("kind") == "conv_generic"]
    if vectorize and len(convs) == 1 and convs[0] is not out and len(out.shape) == len(convs[0].shape) \
            and len(out.shape) >= 3:
        return _schedule_conv_rows(s, out, convs[0], parallel, g.target)
    if g.use_auto:
        # no hand strategy for this group: the auto-scheduler's rules (register tiles for
        # contractions between activations, row groups, vectorized reductions); its
        # decisions are kept on the group for inspection
        from ....autosched import apply_rules
        params = dict(g.auto_params or {})
        params.update(vectorize=vectorize and params.get("vectorize", True),
                      parallel=parallel and params.get("parallel", True))
        g.explanation = apply_rules(s, g.target, params)
        return
    for t in _stages(out):
        if t is out or id(t) in keep:
            continue
        if t.op.reduce_axis:
            _par_vec(s, t, g.target, vectorize, parallel)
        else:
            s[t].compute_inline()
    _par_vec(s, out, g.target, vectorize, parallel)


def _schedule_conv_rows(s, out, conv, parallel, target):
    """Direct convolution (grouped/depthwise, other dtypes): one output row of the conv
    is computed (reductions outside, the row vectorized) right before the epilogue writes it."""
    info = conv._graph_info
    pad = info["pad"] if info.get("depthwise") else None
    _inline_except(s, out, [conv] + ([pad] if pad is not None else []))
    shape = _ishape(out)
    axes = list(out.op.axis)
    n_c = s[out].fuse(axes[0], axes[1])
    sp = axes[2:]
    last = sp[-1]
    _vec_split(s, out, last, shape[-1], target)
    taps = int(np.prod([topi._dim(r.dom.extent) for r in conv.op.reduce_axis]))
    if parallel and int(np.prod(shape)) * taps >= PAR_MIN_MACS:
        s[out].parallel(n_c)
    if pad is not None:      # depthwise: the padded plane of one channel, then its rows
        s[pad].compute_at(s[out], n_c)
        _vec_split(s, pad, pad.op.axis[-1], _ishape(pad)[-1], target)
    attach = sp[-2] if len(sp) >= 2 else n_c
    s[conv].compute_at(s[out], attach)
    caxes = list(s[conv].op.axis)
    raxes = list(s[conv].op.reduce_axis)
    split = _vec_split(s, conv, caxes[-1], shape[-1], target)
    if split is not None:
        s[conv].reorder(*caxes[:-1], split[0], *raxes, split[1])
    # small reductions (depthwise taps) unrolled: the accumulator stays in a register
    if int(np.prod([topi._dim(r.dom.extent) for r in raxes])) <= 64:
        for r in raxes:
            s[conv].unroll(r)
