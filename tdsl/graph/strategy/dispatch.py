"""Operator strategies: turn a fused group (a primitive `Function`) into one tdsl kernel.

For every target the group's operators are defined with the tensor-expression API
(`topi.TE`, or a fast definition below for conv2d/dense with constant weights, whose
weights are re-laid out once at build time), then a schedule is chosen per target:

* llvm: the output stage is parallel over its outer axes and vectorized along the last
  one; elementwise producers are inlined into it; conv2d (NCHW[x]c inner kernel with x the
  target's vector lanes, weights packed (CO/x, CI, KH, KW, x)) and dense (register-blocked,
  packed weights) get the schedules of `tdsl.examples`, with the group's epilogue (bias,
  activation, residual add) computed in the same loop nest. Every size (vector width,
  register tile, channel block) comes from the target description through `tdsl.tiling`.
  Other conv shapes have their own modules, dispatched from `_conv2d_strategy`: 1x1 convs
  vectorized along the flattened image (`conv1x1`), stems and convs whose blocked tile
  would be too small vectorized along the output row (`conv_spatial`), 1x1-image convs as
  mat-vec products and global average pool (`squeeze`), grouped and depthwise convs as
  register tiles of group channels x rows x row vectors over a column-phase-split padded
  input (`conv_grouped`; `depthwise_strided_fast` below only when the weights are not
  constants). 2-D max and average pools are two separable passes without gathers per tap
  (`pool`).
* cuda / opencl: the output is fused and bound to blockIdx.x/threadIdx.x; reductions and
  anchors keep a plain per-thread loop (correct first, tuned later).
* anything else `tdsl.build` knows ("c"): the llvm schedule without vectorize/parallel.

`register_schedule(target_kind, fn)` plugs a schedule for a new target.
"""
from __future__ import annotations

from typing import Callable, Dict

import numpy as np

import tdsl

from .. import tiling
from ..errors import GraphError, TdslError
from ..target import as_target
from .ir import Function, Var
from . import conv1x1, generic, conv_grouped, conv_spatial, pool, squeeze, topi


class Kernel:
    """A compiled group: `module(*args)` with args in `param_order` then the output."""

    def __init__(self, name, module, param_order, transforms, out_type, source_key):
        self.name = name
        self.module = module
        self.param_order = param_order
        self.transforms = transforms
        self.out_type = out_type
        self.key = source_key


# ---------------------------------------------------------------------------- definition

class GroupDef:
    """Builds the te graph of a group; anchors may ask for re-laid-out constant params."""

    def __init__(self, fn: Function, consts: Dict[int, np.ndarray], target):
        self.fn = fn
        self.consts = consts
        self.target = as_target(target)
        self.kind = self.target.kind
        self.pidx = {id(p): i for i, p in enumerate(fn.params)}
        self.placeholders: Dict[int, object] = {}
        self.transforms: Dict[int, Callable] = {}
        self.anchor = None        # (tensor, info)
        self.use_auto = True      # groups without a hand strategy: tdsl.auto's rules
        self.auto_params = None   # their parameters, when tuned (tune_group)
        self.explanation = None
        self.channel_scale = None  # set while a conv of a channel-scaled input is defined
        self.erasure = None        # a kernel generic in the channel count (generic.py)
        self.size_var = generic.size_var()

    def param_tensor(self, i):
        if i not in self.placeholders:
            p = self.fn.params[i]
            shape = p.type.shape if self.erasure is None else \
                self.erasure.shape(i, p.type.shape, self.size_var)
            self.placeholders[i] = tdsl.placeholder(shape, p.type.dtype, name=f"p{i}")
        return self.placeholders[i]

    def const_param(self, e):
        """Index of the group parameter `e` if it is bound to a constant."""
        if isinstance(e, Var) and id(e) in self.pidx and self.pidx[id(e)] in self.consts:
            return self.pidx[id(e)]
        return None

    def packed_param(self, i, shape, transform):
        """The placeholder of constant param i re-laid out by `transform` (input channels on
        axis 1), times the channel scale of the conv being defined if it has one."""
        self.transforms[i] = transform
        t = tdsl.placeholder(shape, self.fn.params[i].type.dtype, name=f"p{i}_packed")
        self.placeholders[i] = t
        sc = self.channel_scale
        if sc is None:
            return t
        ws = tdsl.compute(shape, lambda *k: t[k] * sc[0, k[1], 0, 0], name=topi.uname("scaled_weights"))
        ws.op._graph_root = True      # computed once per call, never inlined into the conv
        return ws

    def build(self):
        topi.reset_names()
        env = {}
        for i, p in enumerate(self.fn.params):
            env[id(p)] = i
        tensors = {}
        fast = self.kind in ("llvm", "c")
        for n in self.fn.nodes():
            ins = []
            for a in n.args:
                if id(a) in tensors:
                    ins.append(tensors[id(a)])
            out_t = None
            if fast and n.op == "nn.conv2d":
                out_t = conv2d_fast(self, n, tensors)
            elif fast and n.op == "nn.dense":
                out_t = dense_fast(self, n)
            if out_t is None and fast and n.op == "nn.conv2d":
                out_t = conv_grouped.grouped_conv2d(self, n, tensors)
            if out_t is None and fast and n.op == "nn.conv2d":
                out_t = depthwise_strided_fast(self, n, tensors)
            if out_t is None and fast and n.op in ("nn.max_pool2d", "nn.avg_pool2d"):
                x = tensors[id(n.args[0])] if id(n.args[0]) in tensors else self.param_tensor(self.pidx[id(n.args[0])])
                out_t = pool.pool2d_sep(self, n, x, n.op[3:6])
            if out_t is None and fast and n.op == "nn.global_avg_pool" and n.type.dtype == "float32" \
                    and len(n.type.shape) == 4 and id(n.args[0]) in self.pidx:
                out_t = squeeze.global_avg_pool_fast(self, n, self.param_tensor(self.pidx[id(n.args[0])]))
            if out_t is None:
                args = [tensors[id(a)] if id(a) in tensors else self.param_tensor(self.pidx[id(a)]) for a in n.args]
                out_type = generic.node_type(self.erasure, n, self.size_var)
                try:
                    out_t = topi.TE[n.op](args, n.attrs, out_type)
                except KeyError:
                    raise GraphError(f"no tensor-expression definition for operator '{n.op}'") from None
            tensors[id(n)] = out_t
        out = tensors[id(self.fn.outputs[0])]
        return out


def conv2d_fast(g: GroupDef, n, tensors):
    x_e, w_e = n.args
    a = n.attrs
    wi = g.const_param(w_e)
    xt, wt = x_e.type, w_e.type
    N, C, H, W = xt.shape
    CO, CI, KH, KW = wt.shape
    if wi is None or xt.dtype != "float32" or a["groups"] != 1:
        return None
    x = g.param_tensor(g.pidx[id(x_e)]) if id(x_e) in g.pidx else None
    if x is None:
        scaled = _channel_scaled_input(g, x_e, tensors)
        if scaled is None:
            return None
        # conv(x * s[ci], W) = conv(x, W * s[ci]): the conv reads x as it is and scales its
        # (packed) weights once per call, CO*CI*KH*KW multiplies instead of a pass over x
        x, g.channel_scale = scaled
        try:
            return _conv2d_strategy(g, n, x, wi)
        finally:
            g.channel_scale = None
    return _conv2d_strategy(g, n, x, wi)


def _channel_scaled_input(g, x_e, tensors):
    """(image, per-channel scale) placeholders when the conv's input is the squeeze-excite
    multiply that fuse_ops moved into this group (batch 1: one scale per input channel)."""
    if id(x_e) not in tensors or getattr(x_e, "op", None) != "multiply" or x_e.type.shape[0] != 1:
        return None
    big = [a for a in x_e.args if a.type.shape == x_e.type.shape]
    small = [a for a in x_e.args if a.type.shape != x_e.type.shape]
    if len(big) != 1 or len(small) != 1 or not all(id(a) in g.pidx for a in (big[0], small[0])):
        return None
    return g.param_tensor(g.pidx[id(big[0])]), g.param_tensor(g.pidx[id(small[0])])


def conv_path(g, n):
    """Which definition takes conv node `n`: "matvec" (a 1x1 image), "rows" (stems, convs
    whose blocked tile is latency-bound), "1x1" (conv1x1.py) or "blocked" (NCHW[x]c)."""
    CO = n.args[1].type.shape[0]
    bn = g.target.vector_lanes(n.args[0].type.dtype)
    # the blocked conv's register tile: rows must divide the output row, so a prime width
    # (13 in squeezenet) on 16 registers leaves it one accumulator; the strategies that
    # vectorize along the image take such convs
    xb, cbb = tiling.register_tile(g.target, n.type.shape[3], -(-CO // bn) * bn, whole_rows=True,
                                   whole_vecs=True)
    if squeeze.is_matvec_conv(n):
        return "matvec"
    if conv_spatial.applies(g, n, xb * cbb):
        return "rows"
    if conv1x1.applies(g, n, xb * cbb):
        return "1x1"
    return "blocked"


def _conv2d_strategy(g, n, x, wi):
    path = conv_path(g, n)
    if path == "matvec":
        return squeeze.conv_matvec(g, n, x, wi)
    if path == "rows":
        return conv_spatial.conv2d_rows(g, n, x, wi)
    if path == "1x1":
        return conv1x1.conv1x1(g, n, x, wi)
    a = n.attrs
    xt, wt = n.args[0].type, n.args[1].type
    N, _, H, W = xt.shape
    C = CI = x.shape[1]         # a size variable in a kernel generic in it
    CO, _, KH, KW = wt.shape
    bn = g.target.vector_lanes(xt.dtype)
    cb_n = -(-CO // bn)      # output channels padded to whole vectors with zero weights

    def pack(w):
        wp = np.zeros((cb_n * bn,) + w.shape[1:], w.dtype)
        wp[:CO] = w
        return np.ascontiguousarray(wp.reshape((cb_n, bn) + w.shape[1:]).transpose(0, 2, 3, 4, 1))
    Wp = g.packed_param(wi, (cb_n, CI, KH, KW, bn), pack)
    (sh, sw), (dh, dw) = a["strides"], a["dilation"]
    pt, pl, pb, pr = a["padding"]
    OH, OW = n.type.shape[2:]
    f0 = tdsl.const(0, "float32")
    if any((pt, pl, pb, pr)):
        pad = tdsl.compute((N, C, H + pt + pb, W + pl + pr), lambda b, ch, y, xx: tdsl.if_then_else(
            tdsl.all(y >= pt, y < H + pt, xx >= pl, xx < W + pl), x[b, ch, y - pt, xx - pl], f0), name=topi.uname("pad"))
    else:
        pad = x
    ci = tdsl.reduce_axis((0, CI), "ci")
    ky = tdsl.reduce_axis((0, KH), "ky")
    kx = tdsl.reduce_axis((0, KW), "kx")
    Cv = tdsl.compute((N, cb_n, OH, OW, bn), lambda b, cb, y, xx, cc: tdsl.sum(
        pad[b, ci, y * sh + ky * dh, xx * sw + kx * dw] * Wp[cb, ci, ky, kx, cc], axis=[ci, ky, kx]),
        name=topi.uname("conv"))
    O = tdsl.compute((N, CO, OH, OW), lambda b, co, y, xx: Cv[b, co // bn, y, xx, co % bn], name=topi.uname("unpack"))
    g.anchor = (O, {"kind": "conv2d_packed", "conv": Cv, "pad": pad if pad is not x else None, "ow": OW,
                    "bn": bn})
    return O


def dense_fast(g: GroupDef, n):
    x_e, w_e = n.args
    wi = g.const_param(w_e)
    if wi is None or x_e.type.dtype != "float32" or id(x_e) not in g.pidx:
        return None
    x = g.param_tensor(g.pidx[id(x_e)])
    M, K = x_e.type.shape
    N = w_e.type.shape[0]
    lanes = g.target.vector_lanes(x_e.type.dtype)
    nb = -(-N // lanes)

    def pack(w):
        # from w.T, (K, N): contiguous when w is a folded transpose of MatMul's (K, N)
        # weights, so packing is one copy of `lanes`-long runs, not a transpose
        wp = w.T
        if N % lanes:
            wp = np.zeros((K, nb * lanes), w.dtype)
            wp[:, :N] = w.T
        return np.ascontiguousarray(wp.reshape(K, nb, lanes).transpose(1, 0, 2))
    Wp = g.packed_param(wi, (nb, K, lanes), pack)
    k = tdsl.reduce_axis((0, K), "k")
    D = tdsl.compute((M, N), lambda i, j: tdsl.sum(x[i, k] * Wp[j // lanes, k, j % lanes], axis=k), name=topi.uname("dense"))
    g.anchor = (D, {"kind": "dense_packed", "dense": D, "lanes": lanes})
    return D


def depthwise_strided_fast(g: GroupDef, n, tensors):
    """Depthwise 2-D conv with a column stride: the padded input is stored split by column
    phase, (N, C, Hp, sw, Wq) with [.., r, p, q] = padded[.., r, q * sw + p], so every tap
    reads a contiguous run of the row (one strided read per input element instead of one
    per tap)."""
    x_e, w_e = n.args
    a = n.attrs
    N, C, H, W = x_e.type.shape
    CO, CI, KH, KW = w_e.type.shape
    (sh, sw), (dh, dw) = a["strides"], a["dilation"]
    if x_e.type.dtype != "float32" or a["groups"] != C or CO != C or CI != 1 or sw == 1:
        return None
    x = tensors[id(x_e)] if id(x_e) in tensors else g.param_tensor(g.pidx[id(x_e)])
    w = tensors[id(w_e)] if id(w_e) in tensors else g.param_tensor(g.pidx[id(w_e)])
    pt, pl = a["padding"][0], a["padding"][1]
    OH, OW = n.type.shape[2:]
    hp = (OH - 1) * sh + (KH - 1) * dh + 1
    wq = OW + ((KW - 1) * dw) // sw
    ph = topi.phase_split_pad(x, hp, wq, sw, pt, pl)
    ky = tdsl.reduce_axis((0, KH), "ky")
    kx = tdsl.reduce_axis((0, KW), "kx")
    y = tdsl.compute((N, C, OH, OW), lambda b, ch, oy, ox: tdsl.sum(
        ph[b, ch, oy * sh + ky * dh, (kx * dw) % sw, ox + (kx * dw) // sw] * w[ch, 0, ky, kx], axis=[ky, kx]),
        name=topi.uname("conv"))
    y._graph_info = {"kind": "conv_generic", "pad": ph, "depthwise": True}
    return y


# ---------------------------------------------------------------------------- schedules

def _stages(out):
    seen, order = set(), []

    def visit(t):
        if id(t.op) in seen:
            return
        seen.add(id(t.op))
        for i in t.op.input_tensors():
            visit(i)
        order.append(t)
    visit(out)
    return [t for t in order if t.op.__class__.__name__ == "ComputeOp"]


def _ishape(t):
    return [topi._dim(s) for s in t.shape]


PAR_MIN_ELEMS = 1 << 14     # below this, a fork-join costs more than it saves
PAR_MIN_MACS = 1 << 21


def _vec_split(s, t, axis, width, target):
    """Splits `axis` (of `width` elements) by the target's vector width for t's dtype and
    vectorizes the inner loop; None when the row is too short to be worth a vector."""
    lanes = target.vector_lanes(t.dtype)
    if width < max(2, lanes // 2) or t.dtype == "bool":
        return None
    lo, li = s[t].split(axis, factor=tiling.row_vector(target, width, t.dtype))
    s[t].vectorize(li)
    return lo, li


def _par_vec(s, t, target, vectorize=True, parallel=True, min_par=PAR_MIN_ELEMS):
    """Parallel over the fused outer axes, vectorized along the last spatial axis."""
    axes = list(s[t].op.axis)
    raxes = list(s[t].op.reduce_axis)
    shape = _ishape(t)
    if not axes:
        return None
    total = int(np.prod(shape))
    last = axes[-1]
    lanes = target.vector_lanes(t.dtype)
    vec = vectorize and shape[-1] >= max(2, lanes // 2) and t.dtype != "bool"
    if vec:
        lo, li = s[t].split(last, factor=tiling.row_vector(target, shape[-1], t.dtype))
        if raxes:
            s[t].reorder(*axes[:-1], lo, *raxes, li)
        s[t].vectorize(li)
    outer = axes[:-1]
    fused = None
    if outer:
        fused = s[t].fuse(*outer) if len(outer) > 1 else outer[0]
    if parallel and total >= min_par:
        if fused is not None and int(np.prod(shape[:-1])) >= 2:
            s[t].parallel(fused)
        elif fused is None and vec:
            s[t].parallel(lo)
    return fused


def schedule_llvm(s, out, g: GroupDef, vectorize=True, parallel=True):
    anchor_t, info = g.anchor if g.anchor else (None, {})
    kind = info.get("kind")
    keep = set()
    if kind == "conv2d_packed" and vectorize:
        return _schedule_conv_packed(s, out, info, parallel, g.target)
    if kind == "dense_packed" and vectorize:
        return _schedule_dense_packed(s, out, info, parallel, g.target)
    if kind == "conv1x1_spatial" and vectorize:
        return conv1x1.schedule(s, out, info, parallel, g.target, _inline_except, _stages(out), _par_vec,
                                _vec_split, PAR_MIN_MACS // 4)
    if kind == "conv_grouped" and vectorize and _ishape(out) == _ishape(anchor_t):
        return conv_grouped.schedule(s, out, info, parallel, g.target, _inline_except)
    if kind == "matvec" and vectorize:
        return squeeze.schedule_matvec_group(s, out, info, parallel, g.target, _par_vec, _stages(out))
    if kind == "conv_rows_spatial" and vectorize:
        return conv_spatial.schedule(s, out, info, parallel, g.target, _inline_except, _stages(out), _par_vec,
                                     _vec_split, PAR_MIN_ELEMS)
    if kind == "global_pool" and vectorize:
        return squeeze.schedule_global_pool(s, out, info, parallel, g.target, PAR_MIN_ELEMS, _stages(out))
    if kind == "pool_sep" and vectorize and len(out.shape) == 4:
        return _schedule_pool_sep(s, out, info, parallel, g.target)
    convs = [t for t in _stages(out) if getattr(t, "_graph_info", {}).get("kind") == "conv_generic"]
    if vectorize and len(convs) == 1 and convs[0] is not out and len(out.shape) == len(convs[0].shape) \
            and len(out.shape) >= 3:
        return _schedule_conv_rows(s, out, convs[0], parallel, g.target)
    if g.use_auto:
        # no hand strategy for this group: the auto-scheduler's rules (register tiles for
        # contractions between activations, row groups, vectorized reductions); its
        # decisions are kept on the group for inspection
        from ..auto import apply_rules
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
    if parallel and int(np.prod(shape)) * taps >= PAR_MIN_MACS // 4:
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


def _inline_except(s, out, keep, target=None):
    for t in _stages(out):
        if t is out or t in keep:
            continue
        if getattr(t.op, "_graph_root", False):
            _root_rows(s, t)
        elif not t.op.reduce_axis:
            s[t].compute_inline()


def _root_rows(s, t):
    """A small stage computed once, at root, vectorized along its last axis when that is
    a whole number of vectors (packed weights: the channel block)."""
    last = t.op.axis[-1]
    ext = _ishape(t)[-1]
    if ext % 4 == 0 and ext >= 4:
        s[t].vectorize(last)


def _schedule_conv_packed(s, out, info, parallel, target):
    Cv, pad, OW, bn = info["conv"], info["pad"], info["ow"], info["bn"]
    keep = [Cv] + ([pad] if pad is not None else [])
    _inline_except(s, out, keep)
    for t in _stages(out):
        if t.op.reduce_axis and t is not Cv and t is not out:
            _par_vec(s, t, target, True, parallel)
    b, co, y, x = out.op.axis
    N, CB, OH, _, _ = _ishape(Cv)
    xb, cbb = tiling.register_tile(target, OW, CB * bn, whole_rows=True, whole_vecs=True)
    yb = 1
    cob, coi = s[out].split(co, factor=bn * cbb)
    yo, yi = s[out].split(y, factor=yb)
    xo, xi = s[out].split(x, factor=xb)
    s[out].reorder(b, cob, yo, xo, yi, coi, xi)
    par = s[out].fuse(b, cob, yo)
    if parallel:
        s[out].parallel(par)
    s[Cv].compute_at(s[out], xo)
    _, cl, yl, xl, ll = s[Cv].op.axis
    r1, r2, r3 = s[Cv].op.reduce_axis
    s[Cv].reorder(r1, r2, r3, yl, xl, cl, ll)
    s[Cv].unroll(yl)
    s[Cv].unroll(xl)
    s[Cv].unroll(cl)
    s[Cv].vectorize(ll)
    if pad is not None:     # rows of the padded input in parallel, each one vectorized
        pa = s[pad].fuse(*pad.op.axis[:-1])
        if parallel:
            s[pad].parallel(pa)
        _vec_split(s, pad, pad.op.axis[-1], _ishape(pad)[-1], target)


def _schedule_pool_sep(s, out, info, parallel, target):
    """One output row per iteration of the parallel loop; its padded column-max row is
    computed right before it, both vectorized along the row."""
    vm, hm = info["col"], info["row"]
    _inline_except(s, out, [vm] + ([hm] if hm is not None else []))
    for t in _stages(out):
        if t.op.reduce_axis and t is not out:
            _par_vec(s, t, target, True, parallel)
    b, ch, oy, ox = out.op.axis
    shape = _ishape(out)
    rows = s[out].fuse(b, ch, oy)
    _vec_split(s, out, ox, shape[-1], target)
    if parallel and int(np.prod(shape)) >= PAR_MIN_ELEMS:
        s[out].parallel(rows)
    for t in (vm, hm):
        if t is None:
            continue
        s[t].compute_at(s[out], rows)
        _vec_split(s, t, t.op.axis[-1], _ishape(t)[-1], target)


def _schedule_dense_packed(s, out, info, parallel, target):
    D, lanes = info["dense"], info["lanes"]
    _inline_except(s, out, [D])
    if D is out:
        D = s.cache_write(out, "local")
    M, N = _ishape(out)
    mr, nr = tiling.gemm_tile(target, M, N, out.dtype)
    mo, no, mi, ni = s[out].tile(out.op.axis[0], out.op.axis[1], mr, nr)
    s[out].vectorize(ni)
    # the operand re-read by the inner tile loop should be the smaller one: with more
    # weight columns than rows (a language model's vocabulary projection: 50k x 256
    # weights, 128 rows) the columns go outside, so each packed weight panel streams from
    # memory once instead of once per row block
    cols_outer = N > M
    if cols_outer:
        s[out].reorder(no, mo, mi, ni)
    s[D].compute_at(s[out], mo if cols_outer else no)
    mc, nc = s[D].op.axis
    (k,) = s[D].op.reduce_axis
    nco, nci = s[D].split(nc, factor=lanes)
    s[D].reorder(k, mc, nco, nci)
    s[D].unroll(mc)
    s[D].unroll(nco)
    s[D].vectorize(nci)
    K = topi._dim(D.op.reduce_axis[0].dom.extent) if hasattr(D.op.reduce_axis[0], "dom") else 1
    if not (parallel and M * N * K >= PAR_MIN_MACS):
        return
    # a fused loop keeps a guard in its body when a tile is ragged: parallelize the
    # unfused loop instead, so that loop partitioning peels the ragged tiles off
    outer, inner = (no, mo) if cols_outer else (mo, no)
    outer_n = -(-N // nr) if cols_outer else -(-M // mr)
    if M % mr == 0 and N % nr == 0:
        s[out].parallel(s[out].fuse(outer, inner))
    elif outer_n >= 2 * target.num_cores:
        s[out].parallel(outer)
    else:
        s[out].reorder(inner, outer, mi, ni)
        s[out].parallel(inner)


def schedule_gpu(s, out, g, threads=128):
    for t in _stages(out):
        if t is out:
            continue
        if t.op.reduce_axis:
            _bind(s, t, threads)
        else:
            s[t].compute_inline()
    _bind(s, out, threads)


def _bind(s, t, threads):
    axes = list(s[t].op.axis)
    if not axes:
        return
    f = s[t].fuse(*axes) if len(axes) > 1 else axes[0]
    bo, ti = s[t].split(f, factor=threads)
    s[t].bind(bo, tdsl.thread_axis("blockIdx.x"))
    s[t].bind(ti, tdsl.thread_axis("threadIdx.x"))


SCHEDULES: Dict[str, Callable] = {
    "llvm": schedule_llvm,
    "c": lambda s, out, g: schedule_llvm(s, out, g, vectorize=False, parallel=False),
    "cuda": schedule_gpu,
    "opencl": schedule_gpu,
}


def register_schedule(target_kind: str, fn: Callable):
    """fn(schedule, output_tensor, group_def) schedules a fused group for `target_kind`."""
    SCHEDULES[target_kind] = fn


AUTO_FALLBACKS = []   # (kernel, error) where the auto rules failed and the plain schedule ran


def tune_group(fn: Function, target: str, consts: Dict[int, np.ndarray], name: str, seconds: float,
               log_file=None):
    """Tunes the auto-scheduler's parameters for a group that has no hand strategy (the
    search of tdsl.auto.tune, within `seconds`); returns them as a dict, or None when the
    group has a hand strategy or no candidate beat the untuned schedule's correctness check."""
    from ..auto import tune as auto_tune
    kind = as_target(target).kind
    sched = SCHEDULES.get(kind)
    if sched is None or kind not in ("llvm", "c"):
        return None
    g = GroupDef(fn, consts, target)
    out = g.build()
    if isinstance(out.op, tdsl.te.PlaceholderOp):
        return None
    try:
        sched(tdsl.create_schedule(out), out, g)
    except TdslError:
        return None
    if g.explanation is None:
        return None          # a hand strategy, or the rules did not hold
    order = sorted(g.placeholders)
    args = [g.placeholders[i] for i in order] + [out]

    def definition():
        return [out], args
    definition.__qualname__ = f"graph_group_{abs(hash(print_group_key(fn, consts)))}"
    try:
        s, _, res = auto_tune.tune(definition, (), target=target, timeout_s=seconds, log_file=log_file)
    except TdslError:
        return None
    if res.best is None:
        return None
    return dict(s.explanation.params)      # the picked parameters that differ from the rules'


def print_group_key(fn, consts):
    from .text import print_function
    return print_function(fn).split("(", 1)[1] + repr(sorted(consts))


def compile_group(fn: Function, target: str, consts: Dict[int, np.ndarray], name: str,
                  auto_params=None, erasure=None) -> Kernel:
    """The kernel of group `fn`; `erasure` (generic.find) makes it generic in the channel
    count."""
    kind = as_target(target).kind
    sched = SCHEDULES.get(kind)
    if sched is None:
        raise GraphError(f"build: no schedules for target '{kind}'; known: {', '.join(SCHEDULES)} "
                         "(tdsl.graph.strategy.register_schedule adds one)")
    g = GroupDef(fn, consts, target)
    g.auto_params = auto_params
    sizes = {}
    if erasure is not None:
        g.erasure, sizes = erasure, {generic.SIZE_NAME: erasure.size}
        # the auto-scheduler's rules read sizes as numbers: the plain schedule instead
        g.use_auto = erasure.kind != "elementwise"
    token = topi.representative.set(sizes)
    try:
        return _compile_group(g, fn, target, name, sched)
    finally:
        topi.representative.reset(token)


def _compile_group(g, fn, target, name, sched):
    out = g.build()
    if isinstance(out.op, tdsl.te.PlaceholderOp):
        out = tdsl.compute(out.shape, lambda *i: out[i], name="copy")
    order = sorted(g.placeholders)
    args = [g.placeholders[i] for i in order] + [out]
    try:
        s = tdsl.create_schedule(out)
        sched(s, out, g)
        mod = tdsl.build(s, args, target=target, name=name)
    except TdslError as e:
        if g.explanation is None:
            raise GraphError(f"build: kernel @{name} failed for target '{target}': "
                             f"{type(e).__name__}: {e}") from None
        # the auto-scheduler's rules did not hold for this group: the plain schedule
        AUTO_FALLBACKS.append((name, f"{type(e).__name__}: {e}"))
        g.use_auto, g.explanation = False, None
        s = tdsl.create_schedule(out)
        sched(s, out, g)
        try:
            mod = tdsl.build(s, args, target=target, name=name)
        except TdslError as e2:
            raise GraphError(f"build: kernel @{name} failed for target '{target}': "
                             f"{type(e2).__name__}: {e2}") from None
    return Kernel(name, mod, order, dict(g.transforms), fn.outputs[0].type, None)
