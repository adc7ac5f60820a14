"""The compute stages of a tensor expression, and static shapes, as every schedule reads them."""
from __future__ import annotations

from . import topi


def stages_of(out, computes_only=True):
    """The compute stages `out` is made of, producers first (every stage, placeholders
    too, where not `computes_only`)."""
    seen, order = set(), []

    def visit(t):
        if t.op in seen:
            return
        seen.add(t.op)
        for i in t.op.input_tensors():
            visit(i)
        order.append(t)
    visit(out)
    return [t for t in order if not computes_only or t.op.__class__.__name__ == "ComputeOp"]


def ishape(t):
    """The shape of `t` as ints (a size variable's representative size, topi.dim)."""
    return [topi.dim(s) for s in t.shape]
