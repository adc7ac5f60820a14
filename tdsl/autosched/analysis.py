"""What the auto-scheduler knows about a compute definition before it takes any decision:
per stage, its extents (None where symbolic), the loads in its body and, for every axis,
which loads it indexes and whether it is their contiguous (last) index.

Everything is read from the tensor-expression graph itself (`ComputeOp.body`), never from a
schedule, so the rules see the definition as the user wrote it."""
from __future__ import annotations

from typing import Dict, List, Optional

from ..ir import expr as E
from ..ir.visitor import walk
from ..te.tensor import ComputeOp

# Calls whose recomputation costs more than a load: a producer with one of these and more
# than one reader is computed once instead of inlined into every reader.
EXPENSIVE_CALLS = {"exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "erf", "power", "sin", "cos",
                   "exp2", "log2"}


def const_extent(e) -> Optional[int]:
    """The value of a constant extent, None for a symbolic one."""
    return e.value if isinstance(e, E.IntImm) else None


def iv_extent(iv) -> Optional[int]:
    return const_extent(iv.dom.extent)


def vars_of(expr) -> set:
    """ids of the Vars an index expression uses."""
    found = set()

    def f(n):
        if isinstance(n, E.Var):
            found.add(id(n))
    walk(expr, f)
    return found


class Load:
    """One `T[idx...]` read in a body: the tensor, and the vars each index position uses."""

    def __init__(self, node: E.ProducerLoad):
        self.tensor = node.tensor
        self.indices = node.indices
        self.pos_vars = [vars_of(i) for i in node.indices]
        self.all_vars = set().union(*self.pos_vars) if self.pos_vars else set()

    def uses(self, iv) -> bool:
        return id(iv.var) in self.all_vars

    def contiguous_in(self, iv) -> bool:
        """The last index moves with `iv` (unit stride or a small affine offset)."""
        return bool(self.pos_vars) and id(iv.var) in self.pos_vars[-1]

    def index_is_axis(self, pos, iv) -> bool:
        """Index `pos` is exactly the variable of `iv`."""
        return pos < len(self.indices) and isinstance(self.indices[pos], E.Var) \
            and self.indices[pos] is iv.var


class StageInfo:
    """The facts about one compute stage that the rules use."""

    def __init__(self, op: ComputeOp):
        self.op = op
        self.axes = list(op.axis)
        self.raxes = list(op.reduce_axis)
        self.extents = [iv_extent(iv) for iv in self.axes]
        self.rextents = [iv_extent(iv) for iv in self.raxes]
        self.is_reduction = bool(self.raxes)
        loads: List[Load] = []
        calls = set()
        cond = [False]

        def f(n):
            if isinstance(n, E.ProducerLoad):
                loads.append(Load(n))
            elif isinstance(n, E.Call):
                calls.add(n.name)
            elif isinstance(n, E.Select):
                cond[0] = True
        walk(op.body, f)
        self.loads = loads
        self.expensive = bool(calls & EXPENSIVE_CALLS)
        self.has_select = cond[0]

    # -- sizes ------------------------------------------------------------------------------
    @staticmethod
    def _prod(xs, unknown):
        p = 1
        for x in xs:
            p *= unknown if x is None else x
        return p

    def outputs(self, unknown=1024) -> int:
        """Output elements (a symbolic extent counts as `unknown`: assume it is large)."""
        return self._prod(self.extents, unknown)

    def reduce_size(self, unknown=1024) -> int:
        return self._prod(self.rextents, unknown)

    def work_expr(self, reduce=True) -> E.Expr:
        """Output elements (times reduction steps) as an int64 expression of the sizes: what
        `outputs() * reduce_size()` guessed where an extent is symbolic, known per call."""
        out = E.const(1, "int64")
        for iv in self.axes + (self.raxes if reduce else []):
            out = out * E.cast(iv.dom.extent, "int64")
        return out

    # -- access structure -------------------------------------------------------------------
    def loads_of(self, tensor) -> List[Load]:
        return [ld for ld in self.loads if ld.tensor is tensor]

    def reuse_axes(self) -> List[int]:
        """Spatial axes along which some operand is reused (an input load that does not use
        the axis): the axes a register tile gets data reuse from."""
        if not self.is_reduction or len(self.loads) < 2:
            return []
        out = []
        for n, iv in enumerate(self.axes):
            users = [ld for ld in self.loads if ld.uses(iv)]
            if users and len(users) < len(self.loads):
                out.append(n)
        return out

    def is_reuse_reduction(self) -> bool:
        """A contraction (matmul, convolution, batch matmul): the last spatial axis is the
        vector axis and one other spatial axis gives operand reuse for a register tile."""
        if not self.is_reduction or len(self.axes) < 2:
            return False
        reuse = self.reuse_axes()
        last = len(self.axes) - 1
        return last in reuse and any(n != last for n in reuse) and self.row_axis() is not None

    def row_axis(self) -> Optional[int]:
        """The register tile's row axis: the innermost spatial axis (other than the last) that
        some operand read along the vector axis does not use: that operand's vector is loaded
        once and reused by every row."""
        vec = self.axes[-1]
        vec_loads = [ld for ld in self.loads if ld.uses(vec)]
        for n in range(len(self.axes) - 2, -1, -1):
            iv = self.axes[n]
            if any(not ld.uses(iv) for ld in vec_loads) and any(ld.uses(iv) for ld in self.loads):
                return n
        return None

    def reduce_contiguous(self) -> bool:
        """Most of the bytes read move with the innermost reduction axis (a row sum): the
        reduction itself must be vectorized (rfactor over the lanes)."""
        if not self.raxes:
            return False
        k, last = self.raxes[-1], self.axes[-1] if self.axes else None
        on_k = sum(1 for ld in self.loads if ld.contiguous_in(k))
        on_s = sum(1 for ld in self.loads if last is not None and ld.contiguous_in(last))
        return on_k > on_s


def stage_infos(sched) -> Dict[object, StageInfo]:
    return {st: StageInfo(st.op) for st in sched.stages if isinstance(st.op, ComputeOp)}
