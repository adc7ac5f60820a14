"""A batch run in groups of images: a network whose every operator treats the images of its
batch apart (a CNN: convolutions, pooling, activations, concats along the channels, a
classifier on each image's features) computes the same outputs on a batch as on its
images one group at a time, so a call with a symbolic batch may run the whole network on
one group of images, then the next.

Why: the network runs operator by operator, each over every image of the call, so each
operator streams the activations of the whole batch. Past a few images a layer's input
and output (a MobileNet-V2's expanded 112x112x96 plane is 4.8 MB an image) outgrow the
last-level cache, and each layer reads and writes main memory, which the two threads
then share: in a quiet sweep (bench/zoo.py --dynamic, Zen 5, 2 cores) SqueezeNet took
8.2 ms at batch 4 and 21.3 at batch 8, MobileNet-V2 6.7 and 20.8, EfficientNet-B0 11.9
and 32.7. A network of dense layers alone gains nothing (its activations are small, and
a smaller group only re-reads the weights), so only one with a spatial operator is cut;
and a batch whose plan fits is never cut. A group whose memory plan fits half of the last-level
cache keeps a layer's activations there for the next one; at batch 1 concats are also
written in place (passes/memory.py), which a larger batch's strided parts cannot be.

`batch_variable` decides whether a network is separable (a conservative list of the
operators that keep images apart, with the attributes that must not touch the batch
axis), `group_limit` how many images a group may hold, `groups` how a batch is cut.
"""
from __future__ import annotations

from typing import Callable, List, Optional

import numpy as np
import sympy

from .ir import Function

# operators that compute each image from that image alone whatever their attributes,
# given that each of their operands either has the batch as its leading axis or
# broadcasts along it (checked apart)
_PER_IMAGE = {
    "add", "subtract", "multiply", "divide", "maximum", "minimum", "power", "clip", "nn.relu",
    "nn.leaky_relu", "nn.prelu", "sigmoid", "tanh", "exp", "log", "sqrt", "rsqrt", "abs",
    "negative", "erf", "nn.gelu", "nn.hardsigmoid", "nn.hardswish", "nn.silu", "cast",
    "nn.batch_norm", "layout.to_blocked", "layout.from_blocked", "copy",
}
# ... and those whose attribute `axis` (or `axes`) must leave the batch alone
_AXIS_NOT_BATCH = {"concatenate", "nn.bias_add", "nn.softmax", "nn.log_softmax", "mean", "sum",
                   "max", "min", "nn.layer_norm"}
# windowed operators over the spatial axes of NC... images, and a product whose rows are
# the images (its other operand a constant)
_SPATIAL = ("nn.conv", "nn.max_pool", "nn.avg_pool", "nn.global_avg_pool", "nn.global_max_pool")


def _ops(fn: Function):
    for n in fn.nodes():
        yield from (n.op.nodes() if isinstance(n.op, Function) else [n])


def _leads(shape, var) -> bool:
    return len(shape) > 0 and shape[0] == var


def _operands_ok(m, var) -> bool:
    """Every operand of `m` has the batch `var` as its leading axis, or broadcasts along
    the images (fewer axes than the result, or a leading axis of 1) and has no batch."""
    rank = len(m.type.shape)
    for a in m.args:
        shape = a.type.shape
        if _leads(shape, var):
            continue
        if any(isinstance(d, sympy.Expr) and var in d.free_symbols for d in shape):
            return False
        if len(shape) == rank and shape[0] != 1:
            return False
    return True


def _axes_ok(m, rank) -> bool:
    a = m.attrs or {}
    axes = a.get("axis", a.get("axes"))
    if axes is None:
        return False        # a reduction over everything
    axes = axes if isinstance(axes, (list, tuple)) else [axes]
    return all(int(x) % rank != 0 for x in axes)


def _no_batch(args, var) -> bool:
    return not any(isinstance(d, sympy.Expr) and var in d.free_symbols for a in args for d in a.type.shape)


def _op_ok(m, var) -> bool:
    op = m.op_name
    shape = m.type.shape
    if not _leads(shape, var) or not m.args:
        return False
    if op in _PER_IMAGE or op in _AXIS_NOT_BATCH:
        if not _operands_ok(m, var):
            return False
        return op in _PER_IMAGE or _axes_ok(m, len(shape))
    # the rest read images from their first operand, the others (weights) have no batch
    if not _leads(m.args[0].type.shape, var) or not _no_batch(m.args[1:], var):
        return False
    if op.startswith(_SPATIAL):
        return not op.endswith("_grad")
    if op == "transpose":
        perm = (m.attrs or {}).get("axes") or (m.attrs or {}).get("perm")
        return perm is not None and int(perm[0]) == 0
    if op in ("nn.dense", "nn.matmul"):
        return len(m.args[0].type.shape) == 2
    # row-major with the leading axis kept: image i's elements stay image i's
    return op in ("reshape", "flatten")


def batch_variable(fn: Function) -> Optional[sympy.Symbol]:
    """The size variable that is the batch of fused network `fn` when running it on
    groups of images gives the outputs of running it on the whole batch: the network's
    only size variable, the leading axis of every input, output and intermediate, and
    every operator one that keeps images apart. None otherwise."""
    params = list(fn.params)
    lead = {p.type.shape[0] for p in params if len(p.type.shape)}
    if len(lead) != 1:
        return None
    (var,) = lead
    if not isinstance(var, sympy.Symbol):
        return None
    others = set()
    for p in params:
        for d in p.type.shape:
            if isinstance(d, sympy.Expr):
                others |= d.free_symbols
    if others != {var} or not all(_leads(p.type.shape, var) for p in params):
        return None
    if not all(_leads(o.type.shape, var) for o in fn.outputs):
        return None
    ops = list(_ops(fn))
    if not any(m.op_name.startswith(_SPATIAL) for m in ops):
        return None
    return var if all(_op_ok(m, var) for m in ops) else None


def group_limit(peak_bytes: Callable[[int], int], budget: int, batch_max: int = 1 << 16) -> int:
    """The most images a group holds: the largest power of two whose memory plan
    (`peak_bytes(images)`) fits `budget`, at least 1 (a network bigger than the budget at
    batch 1 runs image by image), at most `batch_max`."""
    g = 1
    while 2 * g <= batch_max and peak_bytes(2 * g) <= budget:
        g *= 2
    return g


def groups(n: int, limit: int) -> List[tuple]:
    """[(start, stop)] cutting a batch of `n` images into the fewest groups of at most
    `limit`, as even as possible (8 by 4: 4 + 4; 7: 4 + 3; 6: 3 + 3, so that both
    groups share one memory plan and run state)."""
    k = -(-n // limit)
    base, extra = divmod(n, k)
    out, start = [], 0
    for i in range(k):
        stop = start + base + (i < extra)
        out.append((start, stop))
        start = stop
    return out


class ImageGroups:
    """How an executor with a symbolic batch runs a call of more images than a group
    holds: the group's size variable `name`, the `limit` of images a group, the `top`
    of the batch's bounds (a larger batch is an error the executor's usual path raises)."""

    def __init__(self, name: str, limit: int, top: Optional[int] = None, check: Callable = None):
        self.name, self.limit, self.top, self.check = name, limit, top, check

    @classmethod
    def of(cls, fn: Function, binder, bounds, budget: int, peak_bytes: Callable):
        """The groups of fused network `fn` (its size variables bound by `binder`, within
        `bounds`), whose memory plan at given sizes takes `peak_bytes(sizes)`; None where
        the network is not separable (batch_variable)."""
        var = batch_variable(fn)
        if var is None or [str(var)] != list(binder.names):
            return None
        name = str(var)
        if (bounds or {}).get(name, (1, None))[0] > 1:
            return None     # a group may not be fewer images than the batch's bound allows
        top = (bounds or {}).get(name, (1, None))[1]
        names = [p.name for p in fn.params]

        def check(args, inputs):    # the whole call's sizes, as its usual path checks them
            shapes = {p: a.shape for p, a in zip(names, args)}
            shapes.update({k: v.shape for k, v in inputs.items()})
            binder.bind(shapes)
        limit = group_limit(lambda images: peak_bytes({name: images}), budget, top or 1 << 16)
        return cls(name, limit, top, check)

    def run(self, run: Callable, args, inputs):
        """The outputs of a call (`args`, `inputs` as Executor.run takes them) run by
        `run` one group of images at a time, gathered into arrays of the whole batch;
        None where the call is within one group or is no such call (the executor's usual
        path then runs it, or says what is wrong with its inputs)."""
        arrays = list(args) + list(inputs.values())
        if not arrays or not all(isinstance(a, np.ndarray) and a.ndim for a in arrays):
            return None
        n = arrays[0].shape[0]
        if n <= self.limit or self.top is not None and n > self.top or any(a.shape[0] != n for a in arrays):
            return None
        if self.check is not None:
            self.check(args, inputs)
        outs = None
        for lo, hi in groups(n, self.limit):
            part = run(*[a[lo:hi] for a in args], **{k: v[lo:hi] for k, v in inputs.items()})
            if outs is None:
                outs = [np.empty((n,) + p.shape[1:], p.dtype) for p in part]
            for o, p in zip(outs, part):
                o[lo:hi] = p
            del part    # lent by the group's run state (runstate.py), given back for the next
        return outs
