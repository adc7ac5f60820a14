"""Lowering a tensorized loop nest: check that the loops of a stage from the tensorized axis
inward compute what the tensor intrinsic's definition computes, then call it.

The loops match when (1) each root axis of the stage is, inside the block, either fixed or
its block start plus exactly one inner loop, and the varying spatial and reduction axes
line up in order with the intrinsic's axes, extent for extent; (2) the stage's body, with
every root axis replaced by its block start plus the intrinsic's axis, has the intrinsic's
body's shape (same operations, dtypes, constants, reducer), reading tensor for placeholder;
(3) every tensor it reads, and the output, is laid out in its buffer as the placeholder is
(row-major, so one pointer to the block's start describes it): the buffer's flat offset
from the block start equals the placeholder's flat offset, for every intrinsic index. A
`strided` intrinsic relaxes (3) to: that offset is a sum of one step per intrinsic axis, free
of the intrinsic's variables (a tile of a larger buffer, rows padded by `storage_align`
included); the steps become `Region.strides`.

An intrinsic with `reduce_init` initialises its own output block: `tensorize_update` returns
that statement too, for `schedule_ops` to put where tdsl's init loops would go.

A `warp` intrinsic's call stands for a block that the 32 lanes of a warp compute together;
`schedule_ops` checks where it sits (threadIdx.x is the warp's lanes and binds no loop
around it), the loops are matched here as for any other.
"""
from __future__ import annotations

from typing import Dict, List

from .. import arith
from ..arith.layout import strides as buffer_strides
from ..errors import ScheduleError, TdslError
from ..ir import expr as E
from ..ir.visitor import substitute, free_vars
from ..te.tensor_intrin import Region
from .bound import loop_range


def _flat(indices, shape):
    out = E.const(0)
    for i, d in zip(indices, shape):
        out = out * d + i
    return out


def _offset(indices, buf):
    """The flat element offset of `indices` in `buf`, with its storage_align padding."""
    if not buf.align:
        return _flat(indices, buf.shape)
    steps, _ = buffer_strides(buf)
    return sum((i * st for i, st in zip(indices, steps)), E.const(0))


class _Match:
    def __init__(self, st, iv, intrin, ranges):
        self.st, self.iv, self.intrin = st, iv, intrin
        self.ranges = ranges        # of the stage's leaves and the intrinsic's axes
        self.loads: List[tuple] = []      # (the stage's BufferLoad, the intrinsic's read)

    def fail(self, msg):
        return ScheduleError(f"tensorize: stage '{self.st.name}': axis '{self.iv.var.name}': "
                             f"the loops from here inward do not match intrinsic "
                             f"'{self.intrin.name}': {msg}")

    def expr(self, a, b):
        """`a` (the stage's lowered body) against `b` (the intrinsic's definition)."""
        if isinstance(b, E.ProducerLoad):
            if not isinstance(a, E.BufferLoad):
                raise self.fail(f"{a} stands where the intrinsic reads {b.tensor.name}")
            if a.dtype != b.dtype:
                raise self.fail(f"{a} is {a.dtype}, the intrinsic reads {b.dtype}")
            for x, y in self.loads:
                if y.tensor is b.tensor and x.buffer is not a.buffer:
                    raise self.fail(f"'{b.tensor.name}' stands for both {x.buffer} and {a.buffer}")
            self.loads.append((a, b))
            return
        if type(a) is not type(b):
            raise self.fail(f"{a} does not have the form of {b}")
        if isinstance(b, (E.IntImm, E.FloatImm)):
            if a.value != b.value or a.dtype != b.dtype:
                raise self.fail(f"the constant {a} is not {b}")
            return
        if isinstance(b, E.Var):
            raise self.fail(f"the intrinsic's body uses the variable {b} outside an index")
        if isinstance(b, E.Cast) and a.dtype != b.dtype:
            raise self.fail(f"{a} casts to {a.dtype}, the intrinsic to {b.dtype}")
        if isinstance(b, E.Call) and a.name != b.name:
            raise self.fail(f"{a.name}() is not {b.name}()")
        for name in ("a", "b", "value", "cond", "t", "f"):
            if hasattr(b, name):
                self.expr(getattr(a, name), getattr(b, name))
        if isinstance(b, E.Call):
            if len(a.args) != len(b.args):
                raise self.fail(f"{a} and {b} differ in arguments")
            for x, y in zip(a.args, b.args):
                self.expr(x, y)

    def layout(self, load, indices, shape, ivars, what):
        """(block start, strides or None) of `load` (a BufferLoad in intrinsic variables),
        after checking that the buffer holds the block as the placeholder (`indices` into
        `shape`) does: contiguous, or for a strided intrinsic one step per axis."""
        zero = {v: E.const(0) for v in ivars}
        start = tuple(arith.simplify(substitute(i, zero), self.ranges) for i in load.indices)
        buf = load.buffer
        offset = _offset(load.indices, buf) - _offset(start, buf)
        if not self.intrin.strided:
            delta = arith.simplify(offset - _flat(indices, shape), self.ranges)
            if not E.is_const_int(delta, 0) or buf.align or buf.swizzle:
                raise self.fail(f"{what} is not laid out in '{buf.name}' as the intrinsic's "
                                f"{'x'.join(str(d) for d in shape)} block (row-major, "
                                "contiguous)")
            return start, None
        # steps per placeholder axis: the offset at a unit index on that axis alone
        axes = [free_vars(i) & set(ivars) for i in indices]
        if any(len(a) != 1 for a in axes):
            raise self.fail(f"{what}: the intrinsic reads it with indices {indices}, not one "
                            "axis per dimension")
        unit = [{v: E.const(1 if v in a else 0) for v in ivars} for a in axes]
        strides = [arith.simplify(substitute(offset, u), self.ranges) for u in unit]
        rest = arith.simplify(offset - sum((st * i for st, i in zip(strides, indices)),
                                           E.const(0)), self.ranges)
        if not E.is_const_int(rest, 0) or any(free_vars(st) & set(ivars) for st in strides):
            raise self.fail(f"{what} is not a strided {'x'.join(str(d) for d in shape)} "
                            f"block of '{buf.name}' (one fixed step per axis)")
        return start, strides


def tensorize_update(ctx, st, leaves, t, vals, offset, bufs, make_lower, body):
    """(the statement that replaces `leaves[t:]` of stage `st`: a call of its tensor
    intrinsic on the blocks the loops would have read and written, the intrinsic's
    `reduce_init` statement for the output block or None).

    `vals` are the root axes' values in the leaf variables,
    `offset` the start of the region the output buffer holds, `make_lower(vmap)` lowers a tensor expression with root axes mapped by `vmap`,
    `body` is the stage's body (an expression or a Reduce)."""
    iv = leaves[t]
    intrin = st.iter_var_attrs[iv].tensor_intrin
    op = st.op
    ranges = ctx.bounds[st].ranges
    iop = intrin.op
    known = {**ctx.size_ranges, **{l.var: loop_range(ranges, l) for l in leaves},
             **{ax.var: ax.dom for ax in list(iop.axis) + list(iop.reduce_axis)}}
    m = _Match(st, iv, intrin, known)
    inner = {l.var: l for l in leaves[t:]}
    zero = {v: E.const(0) for v in inner}
    varying: Dict[str, List] = {"spatial": [], "reduce": []}
    start = {}
    for root in list(op.axis) + list(op.reduce_axis):
        x = vals[root]
        start[root] = arith.simplify(substitute(x, zero), known)
        d = arith.simplify(x - start[root], known)
        if E.is_const_int(d, 0):
            continue
        if not (isinstance(d, E.Var) and d in inner):
            raise m.fail(f"axis '{root.var.name}' varies as {d} inside the block; split it "
                         "so that one inner loop runs over it")
        varying["reduce" if root.kind == "reduce" else "spatial"].append((root, inner.pop(d)))
    if inner:
        raise m.fail(f"the loops {', '.join(v.name for v in inner)} move no axis")
    vmap = {}
    for kind, axes in (("spatial", iop.axis), ("reduce", iop.reduce_axis)):
        mine = varying[kind]
        if len(mine) != len(axes):
            raise m.fail(f"{len(mine)} {kind} axes vary inside the block, the intrinsic has "
                         f"{len(axes)}")
        for (root, leaf), ax in zip(mine, axes):
            ext = arith.simplify(ranges[leaf].extent)
            if not arith.equal(ext, ax.dom.extent):
                raise m.fail(f"loop '{leaf.var.name}' runs {ext} times, the intrinsic's axis "
                             f"'{ax.var.name}' {ax.dom.extent}")
            vmap[root.var] = start[root] + ax.var
    for root in list(op.axis) + list(op.reduce_axis):
        vmap.setdefault(root.var, start[root])
    ivars = [ax.var for ax in list(iop.axis) + list(iop.reduce_axis)]
    lower = make_lower(vmap)
    ibody = iop.bodies[0]
    if isinstance(body, E.Reduce) != isinstance(ibody, E.Reduce):
        raise m.fail("one of the two is a reduction and the other is not")
    if isinstance(body, E.Reduce):
        if body.combiner.name != ibody.combiner.name or len(body.sources) != 1:
            raise m.fail(f"the reducer {body.combiner.name} is not {ibody.combiner.name}")
        if not E.is_const_int(lower.visit(body.condition), 1):
            raise m.fail("the reduction has a condition")
        m.expr(lower.visit(body.sources[0]), ibody.sources[0])
    else:
        m.expr(lower.visit(body), ibody)
    ins = []
    for p in intrin.inputs:
        loads = [(a, b) for a, b in m.loads if b.tensor is p]
        if not loads:
            raise m.fail(f"nothing in the stage stands for the intrinsic's input '{p.name}'")
        first = None
        for a, b in loads:
            s, strides = m.layout(a, b.indices, p.shape, ivars,
                                  f"the block of '{a.buffer.name}'")
            if first is not None and any(not arith.equal(x, y) for x, y in zip(s, first)):
                raise m.fail(f"'{p.name}' is read from two places")
            first = s
        ins.append(Region(p, loads[0][0].buffer, first, strides))
    out_idx = tuple(arith.simplify(vmap[ax.var] - o, known) for ax, o in zip(op.axis, offset))
    out_load = E.BufferLoad(bufs[0], out_idx)
    out_start, out_strides = m.layout(out_load, [ax.var for ax in iop.axis], iop.shape,
                                      ivars, "the output block")
    outs = [Region(iop.output(0), bufs[0], out_start, out_strides)]
    try:    # the intrinsic refuses blocks it cannot take; say which stage gave them
        stmt = intrin.fimpl(ins, outs)
        init = intrin.reduce_init(outs) if intrin.reduce_init is not None else None
    except TdslError as e:
        raise m.fail(str(e)) from None
    for x in (stmt, init):
        bad = [v for v in free_vars(x) if v in set(ivars)] if x is not None else []
        if bad:
            raise m.fail(f"fimpl's statement uses the intrinsic's axes {bad}")
    return stmt, init

