"""Tensor-expression definitions of the backward-only graph operators (ir/ops_grad.py).
Added to `topi.TE` on import.

`nn.max_pool_grad` is the tensor-level gradient (`tdsl.gradient`) of the forward pool's own
definition: the adjoint of a max reduction goes to the first maximum of its window, and the
index maps of the windows are inverted into a gather (no scatter), so the kernel reads each
input position's few windows."""
from __future__ import annotations

import tdsl

from .topi import TE
from .topi_nn import pool

_max_pool = pool("max")


def max_pool_grad(ins, attrs, out):
    x, dy = ins
    y = _max_pool([x], attrs, dy)
    return tdsl.gradient(y, x, head=dy)


TE["nn.max_pool_grad"] = max_pool_grad
