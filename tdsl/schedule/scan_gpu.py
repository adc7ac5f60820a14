"""A scan whose init and update are bound to the GPU grid becomes one kernel, as in TVM: the
grid-bound loops are hoisted out of init and update and become the kernel's thread
indices, and the step loop runs inside every thread.

That is only right when no thread needs another thread's work from an earlier step:
threads of different blocks cannot wait for each other inside a kernel. So every read of
a state (or of an update's current row) must be at the columns its own thread writes;
anything else is refused with a `LoweringError`. Launching one kernel per step from the
host would lift that limit, but the host side of the GPU modules runs a fixed list of
launches, with no loops.
"""
from __future__ import annotations

from typing import Dict, List

from .. import arith
from ..errors import LoweringError
from ..ir import expr as E
from ..ir import stmt as S
from ..ir.visitor import substitute, walk
from .nest import bound_tag


def grid_leaves(st) -> list:
    """The leading leaves of a scan's init or update bound to blockIdx/threadIdx, past its
    first axis (the step, or the init's row) when that one comes first."""
    leaves = list(st.leaf_iter_vars)
    if leaves and leaves[0] is st.op.axis[0] and not bound_tag(st, leaves[0]):
        leaves = leaves[1:]
    out = []
    for iv in leaves:
        tag = bound_tag(st, iv)
        if not tag or tag == "vthread":
            break
        out.append(iv)
    return out


def scan_kernel(low, op, emit):
    """`emit()` (the init nests and the step loop) inside the grid loops that init and update
    share, with `low.provide` telling their nests which loops are already open; just
    `emit()` when nothing of the scan is bound to the grid."""
    stages = [low.sched.stage_map[t.op] for t in op.update + op.init]
    leads = {st: grid_leaves(st) for st in stages}
    if not any(leads.values()):
        return emit()
    ref = stages[0]
    grid = leads[ref]
    for st in stages[1:]:
        _check_same_grid(low, op, ref, st, grid, leads[st])
    for st in stages:
        for iv, r in zip(leads[st], grid):
            low.provide(iv, r.var)
    body = emit()
    _check_own_columns(low, op, body, {iv.var: bound_tag(ref, iv) for iv in grid})
    for k in reversed(range(len(grid))):
        # stages attached at a hoisted loop keep their storage there (shared memory for a
        # block loop), outside the step loop that reuses it
        for st in stages:
            for a in reversed(low.attach_map.get((st, leads[st][k]), [])):
                body = low.allocate(a, body)
        body = low.loop(ref, grid[k], body)
    return body


def _describe(low, st, leaves):
    return ", ".join(f"{bound_tag(st, iv)} over {arith.simplify(low.bounds[st].ranges[iv].extent)}"
                     for iv in leaves) or "nothing"


def _check_same_grid(low, op, ref, st, grid, lead):
    same = len(lead) == len(grid) and all(
        bound_tag(st, a) == bound_tag(ref, b) and
        arith.equal(low.bounds[st].ranges[a].extent, low.bounds[ref].ranges[b].extent)
        for a, b in zip(lead, grid))
    if not same:
        raise LoweringError(
            f"scan '{op.name}' on the GPU: the {low.roles[st.op][2]} '{st.name}' binds its outer "
            f"loops to [{_describe(low, st, lead)}] but the update '{ref.name}' to "
            f"[{_describe(low, ref, grid)}]; "
            "the scan is one kernel whose threads run every step, so bind the init and every "
            "update the same way (the same splits, bound to the same tags in the same order)")


def _check_own_columns(low, op, body, grid_tags):
    bufs = [low.buffer(low.sched.stage_map[op], k) for k in range(len(op.update))]
    acc = _Accesses(set(bufs))
    for v, tag in grid_tags.items():
        acc.env[v] = acc.tag(tag)
    acc.visit(body)
    for buf in bufs:
        writes = acc.stores.get(buf, [])
        if not writes:
            continue
        first = writes[0]
        for idx in writes[1:] + acc.loads.get(buf, []):
            if not all(arith.equal(a, b) for a, b in zip(idx[1:], first[1:])):
                kind = "writes" if any(idx is w for w in writes) else "reads"
                raise LoweringError(
                    f"scan '{op.name}' on the GPU: a thread {kind} '{buf.name}' at "
                    f"[{', '.join(map(str, idx[1:]))}] but writes its rows at "
                    f"[{', '.join(map(str, first[1:]))}]; on the GPU each thread must read "
                    "only the columns it writes itself: another thread's row of the previous "
                    "step would need a barrier across the whole grid between steps, which a "
                    "kernel does not have (use a CPU target for a scan whose steps mix "
                    "columns, such as an RNN's matrix product)")


class _Accesses:
    """Indices of the stores and loads of `bufs` (all but the scan axis compared), with
    every loop bound to a thread tag standing for that tag and one-iteration loops and
    lets replaced by their value, so that indices the same thread computes compare equal."""

    def __init__(self, bufs):
        self.bufs = bufs
        self.env: Dict[E.Var, E.Expr] = {}
        self.tags: Dict[str, E.Var] = {}
        self.stores: Dict[S.Buffer, List[tuple]] = {}
        self.loads: Dict[S.Buffer, List[tuple]] = {}

    def tag(self, name):
        return self.tags.setdefault(name, E.Var(name))

    def _norm(self, idx):
        return tuple(arith.simplify(substitute(i, self.env)) for i in idx)

    def _expr(self, e):
        def f(n):
            if isinstance(n, E.BufferLoad) and n.buffer in self.bufs:
                self.loads.setdefault(n.buffer, []).append(self._norm(n.indices))
        walk(e, f)

    def visit(self, s):
        if isinstance(s, S.SeqStmt):
            for x in s.stmts:
                self.visit(x)
        elif isinstance(s, S.For):
            self._expr(s.extent)
            if s.kind is S.ForKind.THREAD_BINDING and s.thread_tag != "vthread":
                self.env[s.var] = self.tag(s.thread_tag)
            elif E.is_const_int(arith.simplify(s.extent), 1):
                self.env[s.var] = substitute(s.min, self.env)
            self.visit(s.body)
        elif isinstance(s, S.LetStmt):
            self._expr(s.value)
            self.env[s.var] = substitute(s.value, self.env)
            self.visit(s.body)
        elif isinstance(s, S.IfThenElse):
            self._expr(s.cond)
            self.visit(s.then_case)
            if s.else_case is not None:
                self.visit(s.else_case)
        elif isinstance(s, S.Allocate):
            self.visit(s.body)
        elif isinstance(s, S.BufferStore):
            self._expr(s.value)
            for i in s.indices:
                self._expr(i)
            if s.buffer in self.bufs:
                self.stores.setdefault(s.buffer, []).append(self._norm(s.indices))
        else:
            self._expr(s)
