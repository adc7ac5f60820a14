"""The lowest priority of the registry: topi's tensor expression of every operator
(`define`), and for every group the auto-scheduler's rules, or, where they may not run (a
kernel generic in its channel count, or after they failed), a plain loop nest parallel
over its outer axes and vectorized along the last (`schedule_cpu`, `schedule_gpu`)."""
from __future__ import annotations

from ...autosched import apply_rules
from ...errors import GraphError
from . import topi, topi_grad, topi_index, topi_layout, topi_nn, topi_quant, topi_scatter  # noqa: F401  (the families add their definitions to topi.TE)
from .cpu.loops import par_vec
from .gpu.schedule import gpu_facts
from .stages import stages_of


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
        params.update(vectorize=vectorize and params.get("vectorize", True),
                      parallel=parallel and params.get("parallel", True))
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


def schedule_gpu(s, out, g):
    g.explanation = apply_rules(s, gpu_facts(g.target), g.auto_params)
