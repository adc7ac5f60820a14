"""`gradient(mod, wrt)`: the reverse pass over a graph Module (Relay's gradient pass,
AOTAutograd's joint graph). The chosen initializers become inputs; the nodes that depend on
them are visited from the loss towards the inputs, each turning its output adjoint into
adjoints of its arguments by its operator's rule (registry.py); a value with several users
gets the sum of their adjoints."""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence

import numpy as np

from ...errors import GraphError
from ..ir import Call, Const, Function, Module, Var, topo_order
from ..ir.registry import FLOATS
from ..passes.pipeline import OPTIMIZED
from .registry import op, rule_for


def _initializers(mod: Module, loss) -> Dict[str, Const]:
    """The module's named constants, in the model's order: the ONNX initializers the
    importer recorded, else every constant the loss reads, named by position."""
    named = mod.info.get("initializers")
    if named:
        return dict(named)
    out, seen = {}, set()
    for n in topo_order([loss]):
        for a in n.args:
            if isinstance(a, Const) and id(a) not in seen:
                seen.add(id(a))
                out[f"param_{len(out)}"] = a
    return out


def _reads(loss) -> set:
    """The ids of the constants the loss depends on."""
    return {id(a) for n in topo_order([loss]) for a in n.args if isinstance(a, Const)}


def _choose(mod, loss, wrt) -> Dict[str, Const]:
    inits = _initializers(mod, loss)
    read = {id(a) for n in topo_order(list(mod.main.outputs)) for a in n.args if isinstance(a, Const)}
    if wrt is None:
        used = _reads(loss)
        return {k: c for k, c in inits.items() if c.type.dtype in FLOATS and id(c) in used}
    if isinstance(wrt, str):
        wrt = [wrt]
    chosen = {}
    for name in wrt:
        c = inits.get(name)
        if c is None:
            known = ", ".join(list(inits)[:12]) + (", ..." if len(inits) > 12 else "")
            raise GraphError(f"gradient: wrt names '{name}', which is not an initializer of the "
                             f"module (initializers: {known or 'none'})")
        if c.type.dtype not in FLOATS:
            raise GraphError(f"gradient: initializer '{name}' has type {c.type.dtype}; only "
                             "floating-point initializers have a gradient")
        if id(c) not in read:
            raise GraphError(f"gradient: no output of the module reads initializer '{name}' (a pass "
                             "such as fold_constants or fold_batch_norm folds the weights it "
                             "transforms into new constants: take the gradient before those passes)")
        chosen[name] = c
    return chosen


def _legal(name, taken):
    import re
    s = re.sub(r"[^\w.]", "_", name) or "param"
    if s in taken:
        raise GraphError(f"gradient: initializer '{name}' has the name of an input of the module")
    return s


def _substitute(outputs, table):
    """The outputs rebuilt with the constants in `table` (id -> Var) replaced."""
    memo = {}
    for n in topo_order(outputs):
        if isinstance(n.op, Function):
            raise GraphError("gradient: the module holds fused groups (@"
                             f"{n.op.name}); take the gradient before optimize/fuse_ops: "
                             "graph.optimize(graph.gradient(mod))")
        args = [memo.get(a, table.get(id(a), a)) for a in n.args]
        memo[n] = n if all(x is y for x, y in zip(args, n.args)) else Call(n.op, args, n.attrs, n.span)
    return [memo.get(o, table.get(id(o), o)) for o in outputs]


def _needs(order: Sequence[Call], params) -> set:
    """The nodes through which a differentiated input reaches the loss."""
    needs = set(params)
    for n in order:
        if n.type.dtype in FLOATS and any(a in needs for a in n.args):
            needs.add(n)
    return needs


def gradient(mod: Module, wrt: Optional[Sequence[str]] = None) -> Module:
    """A module computing the loss (first output of `mod`, a scalar) and its gradient with
    respect to the initializers named in `wrt` (default: every floating-point initializer
    the loss depends on, in the model's order). Its inputs are `mod`'s followed by those
    initializers under their names; its outputs the loss and one gradient per initializer,
    of the initializer's shape. See docs/reference/graph.md, "Gradients"."""
    if not isinstance(mod, Module):
        raise GraphError(f"gradient: expected a tdsl.graph.Module, got {type(mod).__name__}")
    if mod.info.get(OPTIMIZED):
        raise GraphError("gradient: the module went through graph.optimize, which folds weights into "
                         "new constants (batch norms into convs, transposes, packed layouts) and fuses "
                         "operators; take the gradient of the unoptimized module and optimize that: "
                         "graph.optimize(graph.gradient(mod))")
    fn = mod.main
    loss = fn.outputs[0]
    if loss.type.size != 1 or loss.type.dtype not in FLOATS:
        raise GraphError(f"gradient: the first output must be a floating-point scalar loss, "
                         f"got {loss.type}")
    chosen = _choose(mod, loss, wrt)
    taken = {p.name for p in fn.params}
    params: List[Var] = []
    table = {}
    for name, c in chosen.items():
        v = Var(_legal(name, taken), c.type)
        taken.add(v.name)
        params.append(v)
        table[id(c)] = v
    (loss,) = _substitute([loss], table)

    order = topo_order([loss])
    needs = _needs(order, params)
    adjoint: Dict[object, object] = {}
    if loss in needs:
        adjoint[loss] = Const(np.ones(loss.type.shape, loss.type.dtype))
    for n in reversed(order):
        g = adjoint.get(n)
        if g is None or n not in needs:
            continue
        grads = rule_for(n)(n, g)
        for a, ga in zip(n.args, grads):
            if ga is None or a not in needs:
                continue
            if ga.type != a.type:
                raise GraphError(f"gradient: the rule of '{n.op}' gave an adjoint of type "
                                 f"{ga.type} for an argument of type {a.type}")
            prev = adjoint.get(a)
            adjoint[a] = ga if prev is None else op("add", prev, ga)
    grads = [adjoint[v] if v in adjoint else Const(np.zeros(v.type.shape, v.type.dtype)) for v in params]

    left = {k: c for k, c in (mod.info.get("initializers") or {}).items() if k not in chosen}
    names = list(mod.info.get("output_names") or ["loss"])[:1] or ["loss"]
    info = {"output_names": names + [f"grad_{v.name}" for v in params],
            "input_names": {**dict(mod.info.get("input_names") or {}), **{v.name: k for v, k in zip(params, chosen)}},
            "dims": dict(mod.info.get("dims") or {}), "initializers": left}
    return Module(Function("main", list(fn.params) + params, [loss] + grads), info)
