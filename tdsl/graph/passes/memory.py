"""Static memory planning: every intermediate of @main gets an offset in one arena; values
whose lifetimes (first definition to last use, in execution order) do not overlap share
bytes. Greedy first fit over the values in order of definition, offsets aligned to 64
(or more: a GPU's sub-buffer alignment).
A group that only reshapes an intermediate or an input, or only slices a contiguous run of
it, is an alias: it gets no buffer and no kernel (the executor views its input, at the
slice's byte offset: `plan.alias_offsets`), and its input lives as long as the alias. When
such a reshape is an output of the graph, its input is computed straight into the output's
buffer instead (`plan.output_views`): no copy kernel for a reshaped result.

A group that only concatenates intermediates along an axis with nothing but size-1 axes
before it (channels at batch 1: squeezenet's fire modules, inception blocks) is written in
place: each input is a contiguous slice of the concatenation's buffer, so its producer's
kernel stores straight into it and the concat runs no kernel (`concat_parts`: input ->
(concat, byte offset)). Only inputs that nothing else reads qualify; the buffer is
allocated when its first part is defined and lives until the concat's last use.

With symbolic sizes (ir/dims.py) the plan's structure (which reshapes alias) is decided on
the symbolic types, so it is the same at every size and so are the kernels; the byte
offsets are computed for the sizes of a call (`sizes`). A concat is written in place, and
a slice is a view, where the axes before the one they cut are 1 at those sizes (a CNN
with a symbolic batch, called at batch 1): the plan of the representative sizes (batch
64) has no such concat or slice, so their kernels are compiled, and a call's plan that
needs none leaves them out of that call's run states (`MemoryPlan.runs_no_kernel`)."""
from __future__ import annotations

import weakref
from typing import Dict, List

import numpy as np

from . import concat_prefix
from ..ir import Call, Const, Expr, Function, Module, Var
from ..ir.dims import evaluate

ALIGN = 64


class MemoryPlan:
    def __init__(self, offsets: Dict[Call, int], sizes: Dict[Call, int], peak: int, total: int, order):
        self.offsets = offsets
        self.sizes = sizes
        self.peak_bytes = peak
        self.total_bytes = total      # without reuse
        self.order = order

    def runs_no_kernel(self, n) -> bool:
        """Whether node `n` runs no kernel in this plan: a view of its input (an alias),
        or a concat whose inputs are written into its buffer, or a view of a longer
        one's."""
        return n in self.aliases or n in self.concat_owners or n in self.prefix_views

    def __repr__(self):
        return (f"MemoryPlan({len(self.offsets)} buffers, peak {self.peak_bytes / 2**20:.2f} MiB, "
                f"{self.total_bytes / 2**20:.2f} MiB without reuse)")


def _align(n, align=ALIGN):
    return (n + align - 1) // align * align


def nbytes(t, sizes=None) -> int:
    """The bytes of type `t` at `sizes` ({size variable: int}; a static type needs none).
    The element count is evaluated, then multiplied: `t.nbytes` would build a sympy
    product on each call, and a first call at new sizes evaluates every buffer's bytes."""
    if t.static:
        return t.nbytes
    return evaluate(t.size, sizes or {}) * np.dtype(t.dtype).itemsize


def _offsets_aligned(args, align, sizes=None):
    """Whether every part of a concatenation of `args` starts at a multiple of `align`
    (a GPU view of it is a sub-buffer, which OpenCL requires aligned). The host views any
    byte offset, so the default alignment asks nothing."""
    if align <= ALIGN:
        return True
    if not all(a.type.static for a in args):     # aligned at some sizes only
        return False
    off = 0
    for a in args:
        if off % align:
            return False
        off += nbytes(a.type, sizes)
    return True


def _single(n, op, of=(Call, Var)):
    """The one node of group call `n` when it is an `op` of an intermediate or an input
    (or what else `of` names)."""
    if not isinstance(n.op, Function) or not n.args or not isinstance(n.args[0], of):
        return None
    body = _body(n.op)
    return body[0] if len(body) == 1 and body[0].op == op else None


_BODIES: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _body(fn):
    """`fn.nodes()`, kept while its outputs stay the same: each call's plan of a network
    with symbolic sizes asks for every group's body several times."""
    got = _BODIES.get(fn)
    if got is not None and len(got[0]) == len(fn.outputs) and all(a is b for a, b in zip(got[0], fn.outputs)):
        return got[1]
    body = fn.nodes()
    _BODIES[fn] = (tuple(fn.outputs), body)
    return body


def slice_offset(n, align=ALIGN, sizes=None):
    """The byte offset of group call `n` in its input when `n` only slices a contiguous
    run of it (unit steps along one axis, size-1 axes before it, whole axes after:
    shufflenet's channel split at batch 1), else None. A GPU view must start at a
    multiple of its sub-buffer alignment (`align`); the host views any offset. An input
    with symbolic sizes is sliced contiguously at some `sizes` only (a batch of 1); a
    constant is viewed where it lies (runstate.make_state)."""
    # a constant too: the rows of a table up to a run-time size (fold.py leaves a
    # transformer's position embeddings so), which a static build folds
    sl = _single(n, "strided_slice", (Call, Var, Const))
    if sl is None or not n.args[0].type.static and sizes is None:
        return None
    shape = n.args[0].type.shape
    at = shape if n.args[0].type.static else [evaluate(d, sizes) for d in shape]
    b, e, st = sl.attrs["begin"], sl.attrs["end"], sl.attrs["strides"]
    cut = [d for d in range(len(shape)) if (b[d], e[d], st[d]) != (0, shape[d], 1)]
    if not cut:
        return 0
    d = cut[0]
    if st[d] != 1 or any(at[k] != 1 for k in range(d)) or cut != [d] or not isinstance(b[d], int) \
            or not all(isinstance(x, int) for x in at[d + 1:]):
        return None
    off = b[d] * int(np.prod(at[d + 1:], dtype=np.int64)) * np.dtype(n.type.dtype).itemsize
    return off if align <= ALIGN or off % align == 0 else None


def is_alias(n, outputs=(), align=ALIGN, sizes=None) -> bool:
    """A call of a group whose whole body is one reshape of an intermediate or an input,
    or one contiguous slice of it (`slice_offset`, at `sizes`): a view, not a kernel."""
    if not isinstance(n.op, Function) or n in outputs:
        return False
    return _single(n, "reshape") is not None or slice_offset(n, align, sizes) is not None


def _concat_parts(n, uses, outputs, taken, owners, align=ALIGN, sizes=None):
    """{input: byte offset} when concat group call `n` can be written in place."""
    if not isinstance(n.op, Function):
        return None
    body = _body(n.op)
    if len(body) != 1 or body[0].op != "concatenate" or len(n.args) < 2:
        return None
    axis = body[0].attrs["axis"] % n.type.ndim
    if not concat_prefix.leading_ones(n.type.shape[:axis], sizes) or [p for p in body[0].args] != list(n.op.params):
        return None
    if not _offsets_aligned(n.args, align, sizes):
        return None
    parts, off = {}, 0
    for a in n.args:
        if not isinstance(a, Call) or not isinstance(a.op, Function) or uses.get(a, 0) != 1 \
                or a in outputs or a in taken or a in parts or a.type.dtype != n.type.dtype \
                or is_alias(a, outputs, align, sizes) or a.type.size == 0 or a in owners:
            return None
        parts[a] = off
        off += nbytes(a.type, sizes)
    return parts


def _prefix_family_owner(n, fams, outputs, root, taken, owners, prefix_views, order, align=ALIGN, sizes=None):
    """`n` when it owns a concat prefix family (`fams`, from concat_prefix.families) that
    can share its buffer, recording the shorter members in `prefix_views`; None
    otherwise. Parts may have other readers, unlike `_concat_parts`'s."""
    own = fams.get(n)
    if own is not n or n in outputs or n in root or n in owners:
        return None
    if len(set(n.args)) != len(n.args) or not _offsets_aligned(n.args, align, sizes):
        return None
    for a in n.args:
        if not isinstance(a.op, Function) or a in outputs or a in taken or a in owners \
                or a in root or is_alias(a, outputs, align, sizes) or a.type.size == 0 or a in fams:
            return None
    members = [m for m in order if fams.get(m) is n and m is not n]
    if any(m in outputs or m in root for m in members):
        return None
    for m in members:
        prefix_views[m] = n
    return n


def plan_memory(mod: Module, align: int = ALIGN, sizes=None) -> MemoryPlan:
    """`align`: every offset (and every in-place concat part's) is a multiple of it; a GPU
    executor asks for its device's sub-buffer alignment. `sizes`: the values of the size
    variables of a module with symbolic sizes (the plan of one call's sizes)."""
    align = max(int(align), ALIGN)
    fn = mod.main
    order: List[Call] = fn.nodes()
    pos = {n: i for i, n in enumerate(order)}
    outputs = set(fn.outputs)
    root: Dict[Expr, Expr] = {}
    alias_offsets: Dict[Call, int] = {}     # alias -> its byte offset in its input (a reshape: 0)
    for n in order:
        if is_alias(n, outputs, align, sizes):
            a = n.args[0]
            root[n] = root.get(a, a)
            alias_offsets[n] = slice_offset(n, align, sizes) or 0
    uses: Dict[Expr, int] = {}
    for n in order:
        for a in n.args:
            uses[a] = uses.get(a, 0) + 1
    for o in fn.outputs:
        uses[o] = uses.get(o, 0) + 1
    concat_parts: Dict[Call, tuple] = {}       # part -> (concat call, byte offset)
    owners = set()
    for n in order:
        parts = _concat_parts(n, uses, outputs, concat_parts, owners, align, sizes)
        if parts and n not in root:
            owners.add(n)
            for a in n.args:
                concat_parts[a] = (n, parts[a])
    prefix_views: Dict[Call, Call] = {}     # concat -> the family owner whose prefix it is
    fams = concat_prefix.families([m for m in order if isinstance(m.op, Function)], sizes)
    for n in order:
        own = _prefix_family_owner(n, fams, outputs, root, concat_parts, owners, prefix_views, order, align, sizes)
        if own is not None:
            off = 0
            for a in own.args:
                concat_parts[a] = (own, off)
                off += nbytes(a.type, sizes)
            owners.add(own)
    output_views: Dict[Call, Call] = {}     # intermediate -> the output reshaping it
    for n in order:
        if n in outputs and _single(n, "reshape") is not None and isinstance(n.args[0], Call):
            a = n.args[0]
            if a not in outputs and a not in root and a not in output_views and a not in owners \
                    and a not in concat_parts:
                output_views[a] = n
    last_use: Dict[Expr, int] = {}
    for i, n in enumerate(order):
        for a in n.args:
            if a in pos:
                r = root.get(a, a)
                r = prefix_views.get(r, r)
                last_use[r] = max(last_use.get(r, i), i)
    for part, (own, _) in concat_parts.items():     # a part read after its concat's last
        if part in last_use:                          # use keeps the shared buffer alive
            last_use[own] = max(last_use.get(own, 0), last_use[part])
    live = []     # (offset, end, free_at)
    offsets, buf_sizes = {}, {}
    peak = total = 0
    for i, n in enumerate(order):
        if n in outputs or n in root or n in output_views or n in prefix_views:
            continue      # outputs get their own buffers; aliases share their input's
        if n in owners and n in offsets:
            continue      # a concat written in place: allocated with its first part
        if n in concat_parts:
            n = concat_parts[n][0]
            if n in offsets or n in outputs:
                continue
        live = [b for b in live if b[2] >= i]
        size = _align(max(nbytes(n.type, sizes), 1), align)
        total += size
        off = 0
        for b in sorted(live):
            if off + size <= b[0]:
                break
            off = max(off, b[1])
        end_use = last_use.get(n, i)
        live.append((off, off + size, end_use))
        offsets[n] = off
        buf_sizes[n] = size
        peak = max(peak, off + size)
    plan = MemoryPlan(offsets, buf_sizes, peak, total, order)
    # the outputs' own buffers, at most (runstate.HostMemory may put them in one)
    plan.output_bytes = sum(_align(max(nbytes(o.type, sizes), 1)) for o in outputs
                            if isinstance(o, Call) and (o.type.static or sizes is not None))
    plan.aliases = root
    plan.alias_offsets = alias_offsets
    plan.output_views = output_views
    plan.concat_parts = concat_parts
    plan.concat_owners = owners
    plan.prefix_views = prefix_views
    return plan
