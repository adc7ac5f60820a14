"""What the passes share: rebuilding a module node by node, and counting uses."""
from __future__ import annotations

from typing import Callable, Dict, List


from ..ir import Call, Expr, Function, Module


def rewrite(mod: Module, visit: Callable[[Call, List[Expr]], Expr]) -> Module:
    """Rebuilds @main bottom-up: `visit(old_call, new_args)` returns the replacement."""
    fn = mod.main
    memo: Dict[Call, Expr] = {}
    for n in fn.nodes():
        args = [memo.get(a, a) for a in n.args]
        memo[n] = visit(n, args)
    outs = [memo.get(o, o) for o in fn.outputs]
    return Module(Function(fn.name, fn.params, outs, fn.attrs), mod.info)


def same(n: Call, args):
    if all(a is b for a, b in zip(args, n.args)):
        return n
    return Call(n.op, args, n.attrs, n.span)


def use_counts(fn: Function):
    uses: Dict[Expr, int] = {}
    for n in fn.nodes():
        for a in n.args:
            uses[a] = uses.get(a, 0) + 1
    for o in fn.outputs:
        uses[o] = uses.get(o, 0) + 1
    return uses
