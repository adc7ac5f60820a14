"""The regions a definition reads, checked against the shapes of the tensors it reads.

Every compute reads its producers at indices that are functions of its own axes. Over the
axes' domains, an affine index spans an interval that interval arithmetic gives exactly,
so a read outside a producer is known before any code runs:

- with constant sizes it is a `LoweringError` at build time;
- with symbolic sizes the interval is an expression of the sizes, which the built module
  checks against the arrays it is given, once per call (`RegionCheck`, carried in the
  module's signature);
- where the analysis cannot decide (an index that is not affine in the axes, or one read
  from another tensor as a gather does), nothing is reported: `bounds_check=True` covers
  those at run time.

A read under a condition (`if_then_else`, a reduction's `where`) counts only where the
condition can hold: each comparison `g >= 0` the condition implies narrows the index,
since an index `i` then lies in [min(i - g), max(i + g)]. This is what keeps padding
written with `if_then_else(all(y >= 1, y <= H), A[y - 1], 0)` legal.

This is the analysis Halide makes for its input buffers ("Input buffer A is accessed at
8, which is beyond the max (7)"); TVM leaves such reads unchecked.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Tuple

from .. import arith
from ..errors import LoweringError
from ..ir import expr as E
from ..ir.expr import Range
from .tensor import ComputeOp, PlaceholderOp
from .update import UpdateOp

_BIG = 2 ** 31 - 1


@dataclass(frozen=True)
class RegionCheck:
    """A read that only the sizes bound at call time can decide: `reader` reads `tensor`
    along `axis` at indices lo..hi (inclusive) where the extents in `domain` are all
    positive; the call checks 0 <= lo and hi < extent."""
    tensor: str
    reader: str
    axis: int
    lo: E.Expr
    hi: E.Expr
    extent: E.Expr
    domain: Tuple[E.Expr, ...]  # extents of the axes the index depends on


def check_reads(ops) -> List[RegionCheck]:
    """Checks every read of every ComputeOp in `ops` against the shape it reads. Raises
    `LoweringError` for a read that is outside with constant sizes; returns the checks
    that depend on symbolic sizes."""
    size_ranges = {}
    for op in ops:
        for t in _tensors_of(op):
            for d in t.shape:
                _size_vars(d, size_ranges)
    checks: List[RegionCheck] = []
    for op in ops:
        if isinstance(op, (ComputeOp, UpdateOp)):
            _Reads(op, size_ranges, checks).run()
    return checks


def _tensors_of(op):
    if isinstance(op, (ComputeOp, PlaceholderOp, UpdateOp)):
        yield from op.outputs
    if isinstance(op, (ComputeOp, UpdateOp)):
        yield from op.input_tensors()


def _size_vars(e, out):
    if isinstance(e, E.Var):
        out.setdefault(e, Range(E.const(0), E.const(_BIG)))
    elif isinstance(e, E.BinaryOp):
        _size_vars(e.a, out)
        _size_vars(e.b, out)
    elif isinstance(e, E.Cast):
        _size_vars(e.value, out)


class _Reads:
    def __init__(self, op, size_ranges, checks):
        self.op = op
        self.checks = checks
        self.sizes = size_ranges
        self.axes = {iv.var: iv.dom for iv in list(op.axis) + list(op.reduce_axis)}
        self.ranges = self.axes      # sizes stay free symbols in the bounds

    def run(self):
        for body in self.op.bodies:
            self.visit(body, ())
        if isinstance(self.op, UpdateOp):
            # an update reads where its condition holds, and writes its own tensor there
            op = self.op
            conds = () if E.is_const_int(op.where, 1) else (op.where,)
            self.visit(op.where, ())
            self.visit(op.value, conds)
            for axis, idx in enumerate(op.index):
                self.visit(idx, conds)
                self.check(op.outputs[0], axis, idx, E.convert(op.shape[axis]), conds)

    def visit(self, e, conds):
        if isinstance(e, E.Select):
            self.visit(e.cond, conds)
            self.visit(e.t, conds + (e.cond,))
            self.visit(e.f, conds + (E.Not(e.cond),))
        elif isinstance(e, E.Reduce):
            inner = conds if E.is_const_int(e.condition, 1) else conds + (e.condition,)
            for s in e.sources:
                self.visit(s, inner)
            for s in e.inits or ():
                self.visit(s, conds)
            self.visit(e.condition, conds)
        elif isinstance(e, (E.And, E.Or)):
            # codegen evaluates the right side only where the left decides nothing
            self.visit(e.a, conds)
            self.visit(e.b, conds + (e.a if isinstance(e, E.And) else E.Not(e.a),))
        elif isinstance(e, E.ProducerLoad):
            for i in e.indices:
                self.visit(i, conds)
            for axis, (idx, ext) in enumerate(zip(e.indices, e.tensor.shape)):
                self.check(e.tensor, axis, idx, E.convert(ext), conds)
        else:
            for c in _children(e):
                self.visit(c, conds)

    def check(self, tensor, axis, idx, extent, conds):
        deps = _axis_deps(idx, self.axes)
        if deps is None:          # not affine in the axes (or reads memory): undecided
            return
        try:
            lo, hi = arith.bound(idx, self.ranges)
        except arith.NotIndexExpr:
            return
        lo_ok = lo is not None and arith.can_prove(E.GE(lo, E.const(0, lo.dtype)), self.sizes)
        hi_ok = hi is not None and arith.can_prove(E.LT(hi, _match(extent, hi)), self.sizes)
        if lo_ok and hi_ok:
            return
        if conds:
            # only where the condition holds: narrowed by each comparison it implies
            for g in _nonneg_facts(conds):
                try:
                    if not lo_ok:
                        glo = arith.bound(idx - g, self.ranges)[0]
                        lo_ok = glo is not None and arith.can_prove(E.GE(glo, E.const(0, glo.dtype)), self.sizes)
                    if not hi_ok:
                        ghi = arith.bound(idx + g, self.ranges)[1]
                        hi_ok = ghi is not None and arith.can_prove(E.LT(ghi, _match(extent, ghi)), self.sizes)
                except (arith.NotIndexExpr, TypeError):
                    continue
                if lo_ok and hi_ok:
                    return
            return                # a condition the analysis cannot follow: undecided
        if lo is None or hi is None:
            return
        # a spatial axis with no iterations (a scan's init row when the state has none)
        # means the stage reads nothing at all, whatever the index depends on
        domain = [self.axes[v].extent for v in deps]
        domain += [iv.dom.extent for iv in self.op.axis if all(iv.var is not d for d in deps)
                   and not isinstance(iv.dom.extent, E.IntImm)]
        domain = tuple(domain)
        if all(isinstance(x, E.IntImm) for x in (lo, hi, extent) + domain):
            if any(d.value <= 0 for d in domain):
                return            # no iteration reads anything
            raise LoweringError(
                f"stage '{self.op.name}' reads '{tensor.name}' outside its shape: axis {axis} "
                f"at indices {lo.value}..{hi.value}, but the extent is {extent.value} "
                f"(index {idx})")
        self.checks.append(RegionCheck(tensor.name, self.op.name, axis, lo, hi, extent, domain))


def _match(extent, like):
    return extent if extent.dtype == like.dtype else E.cast(extent, like.dtype)


def _children(e):
    if isinstance(e, (E.BinaryOp,)):
        return (e.a, e.b)
    if isinstance(e, E.Not):
        return (e.a,)
    if isinstance(e, E.Cast):
        return (e.value,)
    if isinstance(e, E.Call):
        return e.args
    return ()


def _axis_deps(idx, axes):
    """The axis variables `idx` depends on when it is affine in them with each appearing
    once (interval bounds are then attained); None otherwise."""
    found = []

    def affine(e, scale_ok=True):
        if isinstance(e, E.Var):
            if e in axes:
                if e in found:
                    return False
                found.append(e)
            return True
        if isinstance(e, (E.IntImm,)):
            return True
        if isinstance(e, E.Cast):
            return affine(e.value)
        if isinstance(e, (E.Add, E.Sub)):
            return affine(e.a) and affine(e.b)
        if isinstance(e, E.Mul):
            if not _mentions(e.a, axes):
                return affine(e.b)
            if not _mentions(e.b, axes):
                return affine(e.a)
            return False
        # anything else is fine only when it does not involve the axes (a size expression)
        return not _mentions(e, axes) and not _reads(e)

    return found if affine(idx) else None


def _mentions(e, axes):
    if isinstance(e, E.Var):
        return e in axes
    return any(_mentions(c, axes) for c in _children(e) + _select_parts(e))


def _reads(e):
    if isinstance(e, (E.ProducerLoad, E.BufferLoad, E.Reduce)):
        return True
    return any(_reads(c) for c in _children(e) + _select_parts(e))


def _select_parts(e):
    return (e.cond, e.t, e.f) if isinstance(e, E.Select) else ()


def _nonneg_facts(conds):
    """Integer expressions g with g >= 0 wherever every condition in `conds` holds."""
    out = []
    for c in conds:
        for atom in _conjuncts(c, False):
            g = _as_nonneg(atom)
            if g is not None:
                out.append(g)
    return out


def _conjuncts(c, negated):
    """The comparisons a condition implies (a negated Or is an And of negations)."""
    if isinstance(c, E.Not):
        return _conjuncts(c.a, not negated)
    if isinstance(c, E.Call) and c.name == "likely":
        return _conjuncts(c.args[0], negated)
    if isinstance(c, E.And) and not negated or isinstance(c, E.Or) and negated:
        return _conjuncts(c.a, negated) + _conjuncts(c.b, negated)
    if isinstance(c, E.CmpOp):
        return [(c, negated)]
    return []


_NEGATE = {E.LT: E.GE, E.LE: E.GT, E.GT: E.LE, E.GE: E.LT, E.EQ: E.NE, E.NE: E.EQ}


def _as_nonneg(atom):
    cmp, negated = atom
    cls = type(cmp)
    if negated:
        cls = _NEGATE[cls]
    a, b = cmp.a, cmp.b
    if not (a.dtype.startswith("int") and b.dtype.startswith("int")) or _reads(a) or _reads(b):
        return None
    one = E.const(1, a.dtype)
    if cls is E.GE:
        return a - b
    if cls is E.GT:
        return a - b - one
    if cls is E.LE:
        return b - a
    if cls is E.LT:
        return b - a - one
    return None             # == and != narrow nothing the interval needs
