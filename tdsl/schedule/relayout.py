"""`Schedule.transform_layout`: a copy of a tensor in a blocked layout (NCHW -> NCHW[4c],
a K x N matrix -> [N/16][K/4][16][4]) that chosen readers read instead, their indices
mapped onto the new layout. It is `cache_read` with an index map: what a tensor
instruction's operand needs (the 16 x 4 block of `vpdpbusd` contiguous) when the
definition reads a plain matrix.

The layout is a list of (dim, size) pieces, outermost first. Each dimension of the tensor
is split, mixed radix, into its pieces in the order they appear; a size of None is what
remains of the dimension (one piece per dimension may be None). `[(1, None), (0, None),
(1, 16), (0, 4)]` on a K x N tensor is [N/16][K/4][16][4]: element (k, n) lands at
(n // 16, k // 4, n % 16, k % 4). Every dimension must appear, extents must be constant
and divisible by their pieces, so the copy and the reads address the same elements.
"""
from __future__ import annotations

from ..errors import ScheduleError
from ..ir import expr as E
from ..ir.expr import Range, Var
from ..ir.visitor import Mutator
from ..te.tensor import ComputeOp, IterVar, Tensor


def _pieces(tensor, layout):
    """Per new axis: (dim, extent, stride within its dim)."""
    shape = []
    for d, n in enumerate(tensor.shape):
        if not isinstance(n, E.IntImm):
            raise ScheduleError(f"transform_layout: tensor '{tensor.name}': dimension {d} has "
                                f"the symbolic extent {n}; a blocked layout needs constants")
        shape.append(n.value)
    try:
        layout = [(int(d), None if s is None else int(s)) for d, s in layout]
    except (TypeError, ValueError):
        raise ScheduleError(f"transform_layout: tensor '{tensor.name}': the layout must be a "
                            f"list of (dim, size or None) pairs, got {layout!r}") from None
    sizes = {}
    for d, s in layout:
        if not 0 <= d < len(shape):
            raise ScheduleError(f"transform_layout: tensor '{tensor.name}': no dimension {d} "
                                f"(it has {len(shape)})")
        if s is not None and s < 1:
            raise ScheduleError(f"transform_layout: tensor '{tensor.name}': piece size {s} of "
                                f"dimension {d} is not positive")
        sizes.setdefault(d, []).append(s)
    for d, n in enumerate(shape):
        got = sizes.get(d)
        if not got:
            raise ScheduleError(f"transform_layout: tensor '{tensor.name}': the layout leaves "
                                f"out dimension {d}")
        if got.count(None) > 1:
            raise ScheduleError(f"transform_layout: tensor '{tensor.name}': dimension {d} has "
                                "more than one piece of size None")
        known = 1
        for s in got:
            known *= s or 1
        if n % known:
            raise ScheduleError(f"transform_layout: tensor '{tensor.name}': dimension {d} of "
                                f"extent {n} is not a multiple of its pieces' {known}")
        sizes[d] = [n // known if s is None else s for s in got]
    out, seen = [], {}
    for d, _ in layout:
        j = seen.get(d, 0)
        seen[d] = j + 1
        stride = 1
        for s in sizes[d][j + 1:]:
            stride *= s
        out.append((d, sizes[d][j], stride))
    return out


def _forward(pieces, indices):
    """The new indices of element `indices` of the old layout."""
    out = []
    for d, ext, stride in pieces:
        i = indices[d]
        if stride > 1:
            i = i // stride
        if stride * ext != _whole(pieces, d):
            i = i % ext
        out.append(i)
    return tuple(out)


def _whole(pieces, d):
    n = 1
    for dd, ext, _ in pieces:
        if dd == d:
            n *= ext
    return n


class _Remap(Mutator):
    def __init__(self, src, dst, pieces):
        self.src, self.dst, self.pieces = src, dst, pieces

    def visit_ProducerLoad(self, e):
        idx = tuple(self.visit(i) for i in e.indices)
        if e.tensor.op is self.src.op and e.tensor.value_index == self.src.value_index:
            return E.ProducerLoad(self.dst, _forward(self.pieces, idx))
        return E.ProducerLoad(e.tensor, idx)


def transform_layout(sched, tensor, readers, layout, scope="global"):
    if not isinstance(tensor, Tensor):
        raise ScheduleError(f"transform_layout: expected a tensor, got {tensor!r}")
    src = sched[tensor]
    readers = list(readers) if isinstance(readers, (list, tuple)) else [readers]
    if not readers:
        raise ScheduleError(f"transform_layout: tensor '{tensor.name}': give at least one reader")
    stages = []
    for r in readers:
        st = sched[r]
        if src not in sched.producers(st):
            raise ScheduleError(f"transform_layout: stage '{st.op.name}' does not read tensor "
                                f"'{tensor.name}'")
        if st.relations or st.attach_type == "inline":
            raise ScheduleError(f"transform_layout: stage '{st.op.name}' was already scheduled; "
                                "call transform_layout before other primitives")
        stages.append(st)
    pieces = _pieces(tensor, layout)
    axis = [IterVar(Range(E.const(0), E.const(ext)), Var(f"ax{n}"), "data_par")
            for n, (_, ext, _) in enumerate(pieces)]
    old = [E.const(0)] * len(tensor.shape)
    for iv, (d, _, stride) in zip(axis, pieces):
        term = iv.var if stride == 1 else iv.var * E.const(stride)
        old[d] = term if isinstance(old[d], E.IntImm) and old[d].value == 0 else old[d] + term
    shape = tuple(E.const(ext) for _, ext, _ in pieces)
    packed = ComputeOp(f"{tensor.name}.{scope}.packed", "", None, axis,
                       E.ProducerLoad(tensor, tuple(old)), shape).output(0)
    first = min(stages, key=sched.stages.index)
    pst = sched.insert_stage(packed.op, first)
    pst.scope = scope
    remap = _Remap(tensor, packed, pieces)
    for st in stages:
        op = st.op
        sched.replace_op(st, ComputeOp(op.name, op.tag, op.attrs, op.axis,
                                        tuple(remap.visit(b) for b in op.bodies), op.shape))
    text = ", ".join(f"({d}, {s})" for d, s in layout)
    sched.trace.append(f"transform_layout({tensor.name}, [{', '.join(s.op.name for s in stages)}], "
                       f"[{text}])")
    return packed
