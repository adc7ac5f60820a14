"""Dead code and common subexpression elimination."""
from __future__ import annotations

from typing import Dict


from ..ir import Const, Expr, Module
from .rewrite import rewrite, same


# ---------------------------------------------------------------------------- DCE / CSE

def eliminate_dead_code(mod: Module) -> Module:
    """Keeps only what the outputs use (the DAG is rebuilt from the outputs), and drops
    unused parameters' nodes. Parameters stay: they are the model's interface."""
    return rewrite(mod, same)


def eliminate_common_subexpr(mod: Module) -> Module:
    """Merges calls with the same operator, arguments and attributes, and equal small
    constants."""
    seen: Dict[tuple, Expr] = {}
    consts: Dict[tuple, Const] = {}

    def canon(a):
        if isinstance(a, Const) and a.data.nbytes <= 4096:
            key = (a.type.dtype, a.type.shape, a.data.tobytes())
            return consts.setdefault(key, a)
        return a

    def visit(n, args):
        args = [canon(a) for a in args]
        key = (n.op, tuple(args), repr(sorted(n.attrs.items())))
        hit = seen.get(key)
        if hit is not None:
            return hit
        r = same(n, args)
        seen[key] = r
        return r
    return rewrite(mod, visit)
