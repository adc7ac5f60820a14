"""The lowest priority of the registry: topi's tensor expression of every operator
(`define`), and for every group the auto-scheduler's rules, or, where they may not run (a
kernel generic in its channel count, or after they failed), a plain loop nest parallel
over its outer axes and vectorized along the last (`schedule_cpu`, `schedule_gpu`)."""
from __future__ import annotations

import functools

from ...autosched import apply_rules
from ...autosched.analysis import StageInfo
from ...ir import expr as E
from ...ir.visitor import free_vars
from ...errors import GraphError
from . import topi, topi_attention, topi_grad, topi_index, topi_layout, topi_nn, topi_quant, topi_scatter  # noqa: F401  (the families add their definitions to topi.TE)
from .cpu.loops import par_vec
from .gpu.schedule import gpu_facts
from .stages import stages_of
from .symbolic import REPRESENTATIVE, SHORT_CLASSES

AUTO_TILE_ROWS = 8      # rows of the auto-scheduler's register tiles, about (tiling.register_tile)


def define(g, n, tensors):
    args = [g.operand(a, tensors) for a in n.args]
    try:
        return topi.TE[n.op](args, g.attrs_of(n), g.node_type(n))
    except KeyError:
        raise GraphError(f"no tensor-expression definition for operator '{n.op}'") from None


def schedule_cpu(s, out, g, parallel=True, vectorize=True):
    if g.use_auto:
        # no hand strategy for this group: the auto-scheduler's rules (register tiles for
        # contractions between activations, row groups, vectorized reductions); its
        # decisions are kept on the group for inspection
        params = dict(g.auto_params or {})
        if g.size_class == "small":
            params["tile"] = (1, None)
        elif g.size_class in SHORT_CLASSES:
            # the rules take a symbolic extent as long; a short row is one vector a step,
            # a register tile one vector wide
            params.update(unroll=1, tile=(None, 1))
        params.update(vectorize=vectorize and params.get("vectorize", True),
                      parallel=parallel and params.get("parallel", True))
        declares = g.symbolic and g.size_class is None and g.auto_params is None and g.erasure is None
        if declares:
            _declare_small_rows(g)
            _declare_short_rows(g, out)
        least = _least(g, out)
        if least:
            params["least"] = least
        g.explanation = apply_rules(s, g.target, params)
        return
    for t in stages_of(out):
        if t is out:
            continue
        if t.op.reduce_axis:
            par_vec(s, t, g.target, vectorize, parallel)
        else:
            s[t].compute_inline()
    par_vec(s, out, g.target, vectorize, parallel)


def _least(g, out):
    """{size variable's name: least value} where this kernel runs: dispatch runs the first
    variant whose class holds, so here none of the classes ahead of this one holds (the
    rows of the main kernel's matmuls are a register tile's worth, its contiguous
    extents `REPRESENTATIVE`; a "short" kernel's rows still a tile's worth). Empty where
    no variants run in front of this kernel, or the auto-scheduler's own parameters
    (tuned, generic) decide."""
    if not (g.symbolic and g.classes_run and g.auto_params is None and g.erasure is None):
        return {}
    if g.size_class is None:
        ahead = list(g.size_classes.values())
    elif g.size_class == "short":
        ahead = _small_rows(g)
    else:
        return {}
    least = {}
    for cond in ahead:
        for c in _alternatives(cond):
            if isinstance(c, E.LT) and isinstance(c.a, E.Var) and isinstance(c.b, E.IntImm):
                least[c.a.name] = max(least.get(c.a.name, 0), c.b.value)
    return least


def _alternatives(cond):
    return _alternatives(cond.a) + _alternatives(cond.b) if isinstance(cond, E.Or) else [cond]


def _small_rows(g):
    return [g.sizes.dim(n.type.shape[-2]) < AUTO_TILE_ROWS for n in g.fn.nodes()
            if n.op == "nn.matmul" and not isinstance(n.type.shape[-2], int)]


def _declare_small_rows(g):
    """The size class "small" of a group with a matmul whose rows are a run-time size (Q
    K^T, attn @ V over a sequence): the rules' register tiles have several rows, so a
    sequence of a few tokens runs a variant tiled for one row (schedule_cpu), whose rows
    are not mostly guarded off."""
    small = _small_rows(g)
    if small:
        g.size_classes["small"] = functools.reduce(E.logical_or, small)


def _declare_short_rows(g, out):
    """The size class "short" of a group whose contiguous extents (a stage's last axis,
    a reduction) are run-time sizes: the rules split them in blocks of several vectors
    for the representative size, so a row shorter than that (the softmax of a sequence of
    16) runs wholly in the guarded tail; below it, a variant scheduled at `SHORT`
    (dispatch._variant) runs, one vector a step."""
    short, pins = [], set()
    stages = stages_of(out)
    infos = {t.op: StageInfo(t.op) for t in stages}
    read_by_contraction = {i.op for t in stages if infos[t.op].is_reuse_reduction()
                           for i in t.op.input_tensors()}
    for t in stages:
        # the rules' blocks: along the last axis of a contraction (its register tile's
        # vectors) and of an elementwise stage, along the reduced axes of another reduction
        info = infos[t.op]
        if t is not out and not info.is_reduction and not info.expensive \
                and t.op not in read_by_contraction:
            # inlined by the rules (autosched/inline.py): its reader's loops are its
            # loops. RoBERTa's position ids, inlined into the embedding gather along a
            # constant hidden size, made a "short" and a "one" variant of the gather
            # that ran no faster than the kernel itself (one thread, 0.97-1.03x at the
            # sweep's sizes) and cost its build 0.2-0.3 s
            continue
        axes = info.raxes if info.is_reduction and not info.is_reuse_reduction() else info.axes[-1:]
        for ext in (a.dom.extent for a in axes):
            if not isinstance(ext, int) and getattr(ext, "value", None) is None:
                short.append(ext < REPRESENTATIVE)
                pins |= free_vars(ext)
    if short:
        g.size_classes["short"] = functools.reduce(E.logical_or, short)
        # a single token (a decoder's step): those sizes pinned to 1, the static schedule
        one = sorted(pins, key=lambda v: v.name)
        g.size_classes = {"one": functools.reduce(E.logical_and, [E.EQ(v, E.const(1, v.dtype)) for v in one]),
                          **g.size_classes}
        g.size_pins["one"] = {v.name: 1 for v in one}


def schedule_gpu(s, out, g):
    g.explanation = apply_rules(s, gpu_facts(g.target), g.auto_params)
