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

The operators with a plain numpy meaning (arithmetic, comparisons, casts, where, take,
reshape) write into the slots of a workspace the `SizeValue` keeps (size_scratch.py), not
into numpy's temporaries: those come fresh from the kernel after malloc gave them back,
which made T5's first call at 512 tokens fault ~2000 pages in. Every operand of an
operator has its dtype (the graph's types agree), so an operator's `into` (the registry)
computes what its numpy meaning (registry.evaluate) computes; the other operators fall
back to it. The
memory stays held with the step (T5 reserved at 8 x 512: 16 MiB over its five groups,
GPT-2: 2 MiB), which a first call at a new size then finds paged in.
"""
from __future__ import annotations

from typing import Dict, List

import numpy as np
import sympy

from ..errors import GraphError
from .ir import Const, Function
from .ir.dims import evaluate as evaluate_dim
from .ir.registry import evaluate, get_op
from .size_scratch import WorkspacePool, Workspace, slot_plan


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
        self.slots = slot_plan(fn, {n for n in fn.nodes() if _writes_into(n.op)})
        self.workspaces = WorkspacePool()

    def at(self, sizes) -> "SizeValue":
        return self

    def module(self, *args):
        n = len(self.fn.params)
        sizes = dict(zip(self.size_args, args[n + 1:]))
        ws = self.workspaces.take()
        try:
            value = group_value(self.fn, list(args[:n]), sizes, ws, self.slots, into=args[n])
            if not np.may_share_memory(value, args[n]):
                np.copyto(args[n], value, casting="unsafe")
        except GraphError:
            raise
        except Exception as e:      # numpy's: an index the sizes put out of range
            raise GraphError(f"@{self.name}: the values of the sizes alone at "
                             f"{', '.join(f'{a}={v}' for a, v in sizes.items())} could not be "
                             f"computed: {type(e).__name__}: {e}") from None
        finally:
            self.workspaces.give(ws)


def group_value(fn: Function, args: List[np.ndarray], sizes, ws: Workspace = None, slots=None,
                into: np.ndarray = None) -> np.ndarray:
    """The value of fused group `fn` on arrays `args` at `sizes` ({size variable: int});
    possibly a broadcast view (read-only). With workspace `ws` and `slots` (size_scratch's
    slot_plan of `fn`), the value may be a view of `ws`, valid until its next use; with
    `into` (the buffer the value goes to, C-contiguous), the last operator writes there
    where its value has that many elements of that dtype (saving a copy)."""
    if ws is None:
        ws, slots = Workspace(), slot_plan(fn, {n for n in fn.nodes() if _writes_into(n.op)})
    values = dict(zip(fn.params, args))
    last = fn.outputs[0]

    def array(n):
        def get(shape, dtype):
            if n is last and into is not None and into.dtype == dtype and into.size == _count(shape):
                return into.reshape(shape)
            return ws.array(slots[n], shape, dtype)
        return get
    for n in fn.nodes():
        arrays = [a.data if isinstance(a, Const) else values[a] for a in n.args]
        attrs = {k: _at(v, sizes) for k, v in n.attrs.items()}
        if n in slots:
            with np.errstate(all="ignore"):     # as registry.evaluate: log(0) is -inf
                values[n] = _into(n, attrs, arrays, array(n))
        else:
            values[n] = _apply(n.op, attrs, arrays)
    out = fn.outputs[0]
    return out.data if isinstance(out, Const) else values[out]


def _count(shape) -> int:
    c = 1
    for d in shape:
        c *= int(d)
    return c


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


def _writes_into(op) -> bool:
    """Whether `op`'s value can be written into a slot: an `into` in the registry, or
    take / reshape (below)."""
    return op in ("take", "reshape") or get_op(op).into is not None


def _into(n, attrs, arrays, array):
    """The value of node `n` (see _writes_into) written into `array(shape, dtype)`:
    an elementwise one over the axes its operands vary along (see _apply)."""
    if n.op == "reshape":
        x = arrays[0]
        if not x.flags.c_contiguous:
            x = _copied(x, array)
        return x.reshape(attrs["newshape"])
    if n.op == "take":
        return _take(arrays[0], arrays[1], attrs["axis"], array)
    shape = np.broadcast_shapes(*(a.shape for a in arrays))
    compact = [_compact(a) for a in arrays]
    out = array(np.broadcast_shapes(*(c.shape for c in compact)), n.type.dtype)
    get_op(n.op).into(compact, attrs, out)
    return out if out.shape == shape else np.broadcast_to(out, shape)


def _copied(x, array):
    out = array(x.shape, x.dtype)
    np.copyto(out, x)
    return out


def _take(x, idx, axis, array):
    """ops_tensor's take (a negative index counts from the end) without its temporaries:
    checked against the axis, then numpy's wrap-around is the same."""
    axis = axis % x.ndim
    n = x.shape[axis]
    if idx.size and (int(idx.min()) < -n or int(idx.max()) >= n):
        raise IndexError(f"an index in [{int(idx.min())}, {int(idx.max())}] is out of range for an axis of {n}")
    out = array(x.shape[:axis] + idx.shape + x.shape[axis + 1:], x.dtype)
    np.take(x, idx, axis=axis, out=out, mode="wrap")
    return out
