"""Constant folding, and batch norm folded into the conv or dense before it."""
from __future__ import annotations

import numpy as np

from ..ir import Call, Const, Function, Module
from ..ir.registry import evaluate
from .rewrite import rewrite, same, use_counts


# ---------------------------------------------------------------------------- constant folding

FOLD_LIMIT = 1 << 26   # bytes: do not materialize huge broadcasts


def fold_constants(mod: Module) -> Module:
    """Evaluates every operator whose inputs are all constants (numpy meaning)."""
    def visit(n, args):
        if not isinstance(n.op, Function) and args and all(isinstance(a, Const) for a in args) and n.type.static \
                and n.type.nbytes <= FOLD_LIMIT:
            return Const(evaluate(n.op, n.attrs, [a.data for a in args]))
        return same(n, args)
    return rewrite(mod, visit)


# ---------------------------------------------------------------------------- BN folding

def fold_batch_norm(mod: Module) -> Module:
    """batch_norm(conv(x, W) [+ b]) with constant parameters -> conv(x, W * s) + (b - m) * s + beta;
    any other inference batch_norm -> x * s + t (broadcast constants that fuse)."""
    uses = use_counts(mod.main)

    def visit(n, args):
        if n.op != "nn.batch_norm" or not all(isinstance(a, Const) for a in args[1:]):
            return same(n, args)
        x = args[0]
        g, b, m, v = (a.data.astype(np.float64) for a in args[1:])
        scale = g / np.sqrt(v + n.attrs["epsilon"])
        shift = b - m * scale
        dt = n.type.dtype
        bias = None
        conv = x
        if isinstance(x, Call) and x.op == "nn.bias_add" and isinstance(x.args[1], Const) \
                and uses.get(n.args[0], 0) == 1 and isinstance(x.args[0], Call) and x.args[0].op.startswith("nn.conv") \
                and not x.args[0].op.endswith("transpose") and uses.get(n.args[0].args[0], 0) == 1:
            bias = x.args[1].data.astype(np.float64)
            conv = x.args[0]
        if isinstance(conv, Call) and isinstance(conv.op, str) and conv.op.startswith("nn.conv") \
                and not conv.op.endswith("transpose") and isinstance(conv.args[1], Const) \
                and (bias is not None or uses.get(n.args[0], 0) == 1):
            w = conv.args[1].data
            w2 = (w.astype(np.float64) * scale.reshape((-1,) + (1,) * (w.ndim - 1))).astype(w.dtype)
            newconv = Call(conv.op, [conv.args[0], Const(w2)], conv.attrs, conv.span)
            b2 = shift if bias is None else bias * scale + shift
            return Call("nn.bias_add", [newconv, Const(b2.astype(dt))], {"axis": 1}, n.span)
        shape = (-1,) + (1,) * (x.type.ndim - 2)
        y = Call("multiply", [x, Const(scale.astype(dt).reshape(shape))], {}, n.span)
        return Call("add", [y, Const(shift.astype(dt).reshape(shape))], {}, n.span)
    return rewrite(mod, visit)
