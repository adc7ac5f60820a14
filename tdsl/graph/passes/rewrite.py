"""What the passes share: rebuilding a module node by node, and counting uses."""
from __future__ import annotations

from typing import Callable, Dict, List


from ..ir import Call, Expr, Function, Module


def rewrite(mod: Module, visit: Callable[[Call, List[Expr]], Expr]) -> Module:
    """Rebuilds @main bottom-up: `visit(old_call, new_args)` returns the replacement."""
    fn = mod.main
    memo: Dict[int, Expr] = {}
    for n in fn.nodes():
        args = [memo.get(id(a), a) for a in n.args]
        memo[id(n)] = visit(n, args)
    outs = [memo.get(id(o), o) for o in fn.outputs]
    return Module(Function(fn.name, fn.params, outs, fn.attrs), mod.info)


def same(n: Call, args):
    if all(a is b for a, b in zip(args, n.args)):
        return n
    return Call(n.op, args, n.attrs, n.span)


def use_counts(fn: Function):
    uses: Dict[int, int] = {}
    for n in fn.nodes():
        for a in n.args:
            uses[id(a)] = uses.get(id(a), 0) + 1
    for o in fn.outputs:
        uses[id(o)] = uses.get(id(o), 0) + 1
    return uses
