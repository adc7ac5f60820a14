"""`update(tensor, index, value, ...)`: Halide's update definitions.

A stage (a `tdsl.compute`, its pure definition) gets any number of updates, applied in
order to the same buffer. An update writes `tensor[index] = value` for every point of its
domain: its pure variables (the parameters of `index`, each the whole index of one
dimension, independent of each other) times its reduction variables (`axis`, Halide's RDom:
the first one innermost, run in order). The index may be computed from reduction variables
and data (`hist[I[r]]`); the value may read the stage's current state anywhere along the
dimensions that are not pure (`f[x, r - 1]`), which is what makes recursive filters and
prefix sums exact.

Each update is an operation (`UpdateOp`) whose input is the state before it, so the
dataflow orders the updates; lowering writes them all into the buffer of the pure
definition, one loop nest after the other (`tdsl.schedule.update_nest`), and the schedule
gives each its own stage (`s[T].update(k)`).

What the schedule may do with an update's loops depends on its dependences, which this
module works out once: `race_free(iv)` (different iterations of reduction variable `iv`
touch different elements: the loop may run in parallel) and `combine_op` (the update is
`old + e`, `old * e`, `min(old, e)` or `max(old, e)` with `e` free of the state: atomics
make any loop of it parallel).
"""
from __future__ import annotations

import inspect
import weakref
from typing import List, Optional, Tuple

from ..errors import TdslError
from ..ir import expr as E
from ..ir.expr import Range
from ..ir.visitor import Mutator, expr_key, free_vars, walk
from .tensor import ComputeOp, IterVar, Operation, Tensor, tensors_read

# pure op -> the last op of its chain of updates (a second chain from one tensor would
# make the order of the writes ambiguous)
_LAST: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()

_COMBINE = {E.Add: "add", E.Mul: "mul", E.Min: "min", E.Max: "max"}


class UpdateOp(Operation):
    """Update `k` of the pure compute `base`, applied to the state `prev` (the base or the
    update before it). `axis` holds its pure variables (in dimension order), `reduce_axis`
    its reduction variables in loop order (outermost first: Halide's RDom reversed),
    `rdom` the same in the order they were given. `index`, `value` and `where` read the
    state as `prev`'s tensor."""

    def __init__(self, base, prev, k, axis, rdom, index, value, where, dims):
        self.name = f"{base.name}.update({k})"
        self.tag = base.tag
        self.attrs = {}
        self.base: ComputeOp = base
        self.prev: Operation = prev
        self.k = k
        self.axis: List[IterVar] = list(axis)
        self.rdom: List[IterVar] = list(rdom)
        self.reduce_axis: List[IterVar] = list(reversed(rdom))
        self.pure_dims: Tuple[int, ...] = tuple(dims)     # the dimension of each pure variable
        self.index: Tuple[E.Expr, ...] = tuple(index)
        self.value: E.Expr = value
        self.where: E.Expr = where
        self.bodies = ()          # no gather body: lowering reads `exprs`
        self.shape = base.shape
        self.dtype = base.dtype
        self.outputs = [Tensor(self, base.shape, base.dtype, base.outputs[0].name)]
        self._inputs = None

    @property
    def exprs(self) -> Tuple[E.Expr, ...]:
        """Every expression of the update: the value, the condition, the index."""
        return (self.value, self.where) + self.index

    @property
    def state(self) -> Tensor:
        """The tensor that stands for the stage's current state in `exprs`."""
        return self.prev.outputs[0]

    def chain(self) -> List[Operation]:
        """The pure op, then every update up to this one."""
        out = [self]
        while isinstance(out[-1], UpdateOp):
            out.append(out[-1].prev)
        return out[::-1]

    def input_tensors(self):
        if self._inputs is None:
            self._inputs = tensors_read(self.exprs, [self.state])
        return self._inputs

    def state_reads(self) -> List[E.ProducerLoad]:
        """The reads of the state in the value and the condition."""
        out = []
        for e in (self.value, self.where):
            walk(e, lambda n: out.append(n) if isinstance(n, E.ProducerLoad)
                 and n.tensor is self.state else None)
        return out

    @property
    def combine_op(self) -> Optional[str]:
        """"add", "mul", "min" or "max" when the update is `old <op> e` (either side) with
        `old` the element it writes and `e` and the condition free of the state; else
        None (no atomic can make it parallel)."""
        v = self.value
        op = _COMBINE.get(type(v))
        if op is None:
            return None
        for old, e in ((v.a, v.b), (v.b, v.a)):
            if self._is_own(old) and not _reads(e, self.state) \
                    and not _reads(self.where, self.state):
                return op
        return None

    def delta(self) -> E.Expr:
        """The `e` of `old <op> e` (see `combine_op`)."""
        v = self.value
        return v.b if self._is_own(v.a) else v.a

    def _is_own(self, e):
        return isinstance(e, E.ProducerLoad) and e.tensor is self.state and \
            same_indices(e.indices, self.index)

    def race_free(self, iv: IterVar) -> bool:
        """Whether distinct values of reduction variable `iv` write distinct elements and
        every iteration reads the state only at the element it writes: then its loop (or
        any loop split from it) may run in parallel or as vector lanes."""
        loop_vars = {x.var for x in self.axis + self.reduce_axis}
        injective = False
        for e in self.index:
            off = _offset_of(e, iv.var)
            if off is not None and not (free_vars(off) & loop_vars) and not _reads(off, None):
                injective = True
        return injective and all(same_indices(r.indices, self.index) for r in self.state_reads())

    def __repr__(self):
        return f"UpdateOp({self.name})"


def _offset_of(e, v):
    """c when `e` is `v`, `v + c`, `c + v` or `v - c`; None otherwise."""
    if isinstance(e, E.Var):
        return E.const(0, e.dtype) if e is v else None
    if isinstance(e, E.Add):
        if e.a is v:
            return e.b
        if e.b is v:
            return e.a
    if isinstance(e, E.Sub) and e.a is v:
        return e.b
    return None


def _reads(e, tensor):
    """Whether `e` reads `tensor` (None: any tensor)."""
    found = []
    walk(e, lambda n: found.append(n) if isinstance(n, (E.ProducerLoad, E.BufferLoad)) and
         (tensor is None or getattr(n, "tensor", None) is tensor) else None)
    return bool(found)


def same_indices(a, b) -> bool:
    """Whether two index tuples are structurally equal."""
    return len(a) == len(b) and all(expr_key(x) == expr_key(y) for x, y in zip(a, b))


class _ToState(Mutator):
    """Reads of any tensor of the chain -> reads of the current state."""

    def __init__(self, chain, state):
        self.chain = chain
        self.state = state

    def visit_ProducerLoad(self, e):
        idx = tuple(self.visit(i) for i in e.indices)
        t = self.state if e.tensor.op in self.chain else e.tensor
        return E.ProducerLoad(t, idx)


class _NoLoads(Mutator):
    """Every read of a tensor -> 0."""

    def visit_ProducerLoad(self, e):
        return E.const(0, e.dtype)


def _params(f, what):
    try:
        params = list(inspect.signature(f).parameters.values())
    except (TypeError, ValueError):
        raise TdslError(f"{what}: cannot read the parameters of {f!r}") from None
    if any(p.kind not in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in params):
        raise TdslError(f"{what}: the function must take plain positional parameters")
    return [p.name for p in params]


def _conv(x, what):
    if isinstance(x, IterVar):
        return x.var
    try:
        return E.convert(x)
    except TdslError as e:
        raise TdslError(f"{what}: {e}") from None


def update(tensor, index, value, where=None, axis=None):
    """Halide's update definition: `tensor[index] = value` over the pure variables of
    `index` and the reduction variables `axis`; returns the stage's tensor after it.

    - `index`: a function of the update's pure variables (its parameters, each the whole
      index of one dimension) returning one index per dimension, or such a tuple itself;
      entries may be computed from reduction variables and other tensors (`I[r]`).
    - `value`: a function `(old, *pure_variables)` of the element's current value, or an
      expression; reads of `tensor` (or of the tensors of earlier definitions of the stage)
      are reads of its current state.
    - `where`: a condition on the domain (a function of the pure variables, or an
      expression): points where it is false write nothing.
    - `axis`: the reduction variables (`tdsl.reduce_axis`), one or a list; as in Halide's
      RDom, the first runs innermost.
    """
    if not isinstance(tensor, Tensor) or not isinstance(tensor.op, (ComputeOp, UpdateOp)):
        raise TdslError(f"update: the tensor must come from tdsl.compute (or an earlier "
                        f"tdsl.update), got {tensor!r}")
    prev = tensor.op
    base = prev.base if isinstance(prev, UpdateOp) else prev
    what = f"update of '{base.name}'"
    if base.num_outputs != 1:
        raise TdslError(f"{what}: a compute with several outputs cannot be updated")
    last = _LAST.get(base, base)
    if last is not prev:
        raise TdslError(f"{what}: '{base.name}' already has update {last.k}; apply the next "
                        "update to the tensor that tdsl.update returned")
    k = prev.k + 1 if isinstance(prev, UpdateOp) else 0
    what = f"update {k} of '{base.name}'"
    rdom = [] if axis is None else list(axis) if isinstance(axis, (list, tuple)) else [axis]
    for r in rdom:
        if not isinstance(r, IterVar) or r.kind != "reduce":
            raise TdslError(f"{what}: axis must be tdsl.reduce_axis variables, got {r!r}")
    if len(set(map(id, rdom))) != len(rdom):
        raise TdslError(f"{what}: a reduction variable appears twice in axis")
    ndim = len(base.shape)
    names = _params(index, what + ": index") if callable(index) else []
    pure = [E.Var(n) for n in names]
    idx = index(*pure) if callable(index) else index
    idx = tuple(idx) if isinstance(idx, (list, tuple)) else (idx,)
    if len(idx) != ndim:
        raise TdslError(f"{what}: the index has {len(idx)} entries but '{base.name}' has "
                        f"{ndim} dimensions")
    idx = tuple(_conv(x, what + ": index") for x in idx)
    for x in idx:
        if not x.dtype.startswith(("int", "uint")):
            raise TdslError(f"{what}: index {x} has type {x.dtype}; indices must be integers")
    dims = []
    for v in pure:
        at = [d for d, x in enumerate(idx) if x is v]
        if len(at) != 1:
            raise TdslError(f"{what}: pure variable '{v.name}' must be the whole index of "
                            f"exactly one dimension (as in Halide's f(x, r) = ...); it is "
                            f"the index of {len(at)}")
        # inside a read of data (ScatterElements' idx[x, r]) it only chooses the value
        # written; distinct points of it still write distinct elements
        mixed = [d for d, x in enumerate(idx) if x is not v and v in free_vars(_NoLoads().visit(x))]
        if mixed:
            raise TdslError(f"{what}: pure variable '{v.name}' also appears in the index of "
                            f"dimension {mixed[0]} ({idx[mixed[0]]}); a pure variable may "
                            "only be a whole index, or index the data an index reads")
        dims.append(at[0])
    chain = set(prev.chain()) if isinstance(prev, UpdateOp) else {prev}
    to_state = _ToState(chain, tensor)
    idx = tuple(to_state.visit(x) for x in idx)
    if any(_reads(x, tensor) for x in idx):
        raise TdslError(f"{what}: the index reads '{base.name}' itself; an update's index "
                        "may read other tensors only")
    old = E.ProducerLoad(tensor, idx)
    val = value(old, *pure) if callable(value) else value
    val = to_state.visit(E.cast(_conv(val, what + ": value"), base.dtype))
    cond = where(*pure) if callable(where) else (True if where is None else where)
    cond = to_state.visit(_conv(cond, what + ": where"))
    if cond.dtype != "bool":
        raise TdslError(f"{what}: where= must be a condition, got {cond} of type {cond.dtype}")
    for e in (val, cond):
        found = []
        walk(e, lambda n: found.append(n) if isinstance(n, E.Reduce) else None)
        if found:
            raise TdslError(f"{what}: the value contains a reduction ({found[0].combiner.name}); "
                            "an update is its own reduction: write old + x over axis=, or "
                            "reduce in a compute of its own and read it")
    _check_state_reads(what, (val, cond), tensor, idx, pure, dims)
    pure_axis = [IterVar(Range(E.const(0), E.convert(base.shape[d])), v, "data_par")
                 for v, d in zip(pure, dims)]
    op = UpdateOp(base, prev, k, pure_axis, rdom, idx, val, cond, dims)
    _LAST[base] = op
    return op.outputs[0]


def _check_state_reads(what, exprs, state, idx, pure, dims):
    """Reads of the state see pure variables only at their own dimension: what makes
    the pure variables independent (Halide's rule)."""
    reads = []
    for e in exprs:
        walk(e, lambda n: reads.append(n) if isinstance(n, E.ProducerLoad)
             and n.tensor is state else None)
    for r in reads:
        for v, d in zip(pure, dims):
            if r.indices[d] is not v:
                raise TdslError(f"{what}: it reads its state at {list(r.indices)}; dimension "
                                f"{d} is pure variable '{v.name}' and must be read at "
                                f"'{v.name}' itself (each point of a pure variable is "
                                "independent of the others)")

