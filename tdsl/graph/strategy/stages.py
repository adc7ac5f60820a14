"""The compute stages of a tensor expression, and static shapes, as every schedule reads them."""
from __future__ import annotations

from . import topi


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
