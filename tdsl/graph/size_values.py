"""The values of the sizes alone (runstate.size_only: a T5's relative position buckets, a
causal mask, position ids), computed with the operators' numpy meaning instead of
compiled kernels.

A static build folds these values to constants with the same numpy meaning
(passes/fold.py); with symbolic sizes they are known once a call's sizes are, and a run
state computes them once per sizes (runstate.make_state). A kernel of its own for each
made the build lower and compile code (T5: five groups) that runs once per new size,
where its speed barely matters. `SizeValue` stands in for such a
kernel in the executor's steps (a `Kernel`'s name, module, at, param_order, transforms,
size_args) and writes the group's value into the buffer a kernel would have written.

Broadcasts stay views (`np.broadcast_to`) and an elementwise operator is computed only
over the axes its operands vary along, then viewed broadcast again: the value a
mask-like group writes over the batch (T5's position bias, batch x heads x sequence x
sequence, 32 MB at 8x512) is computed once per head and query and written once, into the
arena: a first call at a new size pays for it, and numpy's loops are single-threaded.
"""
from __future__ import annotations

from typing import Dict, List

import numpy as np
import sympy

from ..errors import GraphError
from .ir import Const, Function
from .ir.dims import evaluate as evaluate_dim
from .ir.registry import evaluate, get_op


class SizeValue:
    """The value of fused group `fn` (of constants and the sizes alone) as a step of the
    executor: `module(*args, out, *sizes)` writes it into `out`, the arguments in the
    group's parameter order and the values of `size_args` after the output, as a
    compiled kernel takes them."""

    def __init__(self, fn: Function, size_args):
        self.name = fn.name
        self.fn = fn
        self.param_order = list(range(len(fn.params)))
        self.transforms: Dict[int, object] = {}
        self.size_args = tuple(size_args)
        self.key = None
        self.scheduled_by = "numpy"
        self.variants: list = []

    def at(self, sizes) -> "SizeValue":
        return self

    def module(self, *args):
        n = len(self.fn.params)
        sizes = dict(zip(self.size_args, args[n + 1:]))
        try:
            value = group_value(self.fn, list(args[:n]), sizes)
        except GraphError:
            raise
        except Exception as e:      # numpy's: an index the sizes put out of range
            raise GraphError(f"@{self.name}: the values of the sizes alone at "
                             f"{', '.join(f'{a}={v}' for a, v in sizes.items())} could not be "
                             f"computed: {type(e).__name__}: {e}") from None
        np.copyto(args[n], value, casting="unsafe")


def group_value(fn: Function, args: List[np.ndarray], sizes) -> np.ndarray:
    """The value of fused group `fn` on arrays `args` at `sizes` ({size variable: int});
    possibly a broadcast view (read-only)."""
    values = dict(zip(fn.params, args))
    for n in fn.nodes():
        arrays = [a.data if isinstance(a, Const) else values[a] for a in n.args]
        attrs = {k: _at(v, sizes) for k, v in n.attrs.items()}
        values[n] = _apply(n.op, attrs, arrays)
    out = fn.outputs[0]
    return out.data if isinstance(out, Const) else values[out]


def _at(v, sizes):
    """Attribute `v` with its symbolic dimensions evaluated at `sizes`."""
    if isinstance(v, sympy.Expr):
        return evaluate_dim(v, sizes)
    if isinstance(v, (list, tuple)):
        return type(v)(_at(x, sizes) for x in v)
    return v


def _apply(op, attrs, arrays):
    if op == "broadcast_to":
        return np.broadcast_to(arrays[0], attrs["shape"])
    if get_op(op).kind in ("elemwise", "broadcast") and arrays:
        shape = np.broadcast_shapes(*(a.shape for a in arrays))
        compact = [_compact(a) for a in arrays]
        if any(c is not a for c, a in zip(compact, arrays)):
            return np.broadcast_to(evaluate(op, attrs, compact), shape)
    return evaluate(op, attrs, arrays)


def _compact(a):
    """`a` with each axis it is broadcast along (stride 0) cut to one element: what an
    elementwise operator's value varies along is the rest."""
    if not any(s == 0 and d > 1 for s, d in zip(a.strides, a.shape)):
        return a
    index = tuple(slice(0, 1) if s == 0 and d > 1 else slice(None) for s, d in zip(a.strides, a.shape))
    return a[index]
