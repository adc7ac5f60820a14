"""`scan(init, update, state_placeholder)`: TVM's `te.scan`, a recurrence over the first axis.

The state is a placeholder that stands for the scan's own output: `update` reads it at
earlier steps (`s_state[t - 1, i]`), `init` gives the first rows. The scan owns its update:
the update's first axis (and that of every compute between the state and the update) is
restricted to the steps after `init`, since step `t` can only be computed once step `t - 1`
exists; the other axes stay free to schedule. Lowering (`tdsl.schedule.schedule_ops`) writes
init, update and state into one buffer, the scan's output: the init nests, then one serial
loop over the steps with every update's nest inside it (several states advance together);
on the GPU all of it inside the grid loops that init and update share (`scan_gpu.py`).
"""
from __future__ import annotations

from typing import Dict, List, Tuple

from .. import arith
from ..errors import TdslError
from ..ir import expr as E
from ..ir.expr import Range, Var
from .tensor import ComputeOp, IterVar, Operation, PlaceholderOp, Tensor


class ScanOp(Operation):
    """The scan's output tensors (one per state); `scan_axis` is its step loop, over
    [init rows, total rows)."""

    def __init__(self, name, tag, attrs, init, update, states, inputs):
        self.name = name
        self.tag = tag
        self.attrs = dict(attrs or {})
        self.init: List[Tensor] = init
        self.update: List[Tensor] = update
        self.state_placeholder: List[Tensor] = states
        self.inputs: List[Tensor] = inputs
        self.axis: List[IterVar] = []
        self.reduce_axis: List[IterVar] = []
        self.bodies = ()         # no expression: its rows are written by init and update
        self.shape = states[0].shape
        self.dtype = states[0].dtype
        lo, hi = init[0].shape[0], states[0].shape[0]
        self.scan_axis = IterVar(Range(E.convert(lo), arith.simplify(E.convert(hi) - lo)),
                                 Var(f"{name}.idx"), "ordered")
        n = len(states)
        self.outputs = [Tensor(self, s.shape, s.dtype, name if n == 1 else f"{name}.v{k}", k)
                        for k, s in enumerate(states)]

    def input_tensors(self):
        return list(self.init) + list(self.update)

    def __repr__(self):
        return f"ScanOp({self.name})"


def _as_list(x, what):
    xs = list(x) if isinstance(x, (list, tuple)) else [x]
    for t in xs:
        if not isinstance(t, Tensor):
            raise TdslError(f"scan: {what} must be tensors, got {t!r}")
    return xs


def _same(a, b):
    return len(a) == len(b) and all(arith.equal(E.convert(x), E.convert(y)) for x, y in zip(a, b))


def scan(init, update, state_placeholder, inputs=None, name="scan", tag="", attrs=None):
    """A recurrence over the first axis: rows `[0, init.shape[0])` of the result are `init`,
    each later row `t` is `update[t, ...]`, which may read `state_placeholder` at rows before
    `t`. Each argument is a tensor or a list (one per state); returns a tensor or a list."""
    single = not isinstance(state_placeholder, (list, tuple))
    init = _as_list(init, "init")
    update = _as_list(update, "update")
    states = _as_list(state_placeholder, "state_placeholder")
    if not (len(init) == len(update) == len(states)) or not states:
        raise TdslError(f"scan '{name}': needs one init and one update per state, got "
                        f"{len(init)} init, {len(update)} update, {len(states)} states")
    for k, (i, u, s) in enumerate(zip(init, update, states)):
        where = f"scan '{name}' (state {k} '{s.name}')"
        if not isinstance(s.op, PlaceholderOp):
            raise TdslError(f"{where}: the state must be a tdsl.placeholder")
        if not isinstance(i.op, ComputeOp) or not isinstance(u.op, ComputeOp):
            raise TdslError(f"{where}: init and update must be tdsl.compute tensors")
        if not s.shape:
            raise TdslError(f"{where}: the state needs a first (scan) axis")
        if not _same(u.shape, s.shape):
            raise TdslError(f"{where}: update has shape {u.shape}, the state {s.shape}; they "
                            "must be equal")
        if len(i.shape) != len(s.shape) or not _same(i.shape[1:], s.shape[1:]):
            raise TdslError(f"{where}: init has shape {i.shape}; it must match the state "
                            f"{s.shape} in every axis but the first")
        if not _same(i.shape[:1], init[0].shape[:1]) or not _same(s.shape[:1], states[0].shape[:1]):
            raise TdslError(f"{where}: every state and every init must have the same number "
                            "of rows as the first")
        if not (i.dtype == u.dtype == s.dtype):
            raise TdslError(f"{where}: init ({i.dtype}), update ({u.dtype}) and state "
                            f"({s.dtype}) must have one dtype")
    op = ScanOp(name, tag, attrs, init, update, states, _as_list(inputs or [], "inputs"))
    total = E.convert(states[0].shape[0])
    for i in init:
        # a state with fewer rows than the init (m == 0) keeps only those: the init's reads
        # and writes past them would be out of bounds
        rows = E.convert(i.shape[0])
        if not arith.can_prove(E.LE(rows, total), {}):
            i.op.axis[0].dom = Range(E.const(0), arith.simplify(E.minimum(rows, total)))
    for c in _body_ops(update, states):
        ax = c.axis[0]
        if not _same(c.shape[:1], states[0].shape[:1]):
            raise TdslError(f"scan '{name}': '{c.name}' reads the state, so its first axis is "
                            f"the scan's steps; it has {c.shape[0]} rows, the state "
                            f"{states[0].shape[0]}")
        ax.dom = Range(op.scan_axis.dom.min, op.scan_axis.dom.extent)
    return op.outputs[0] if single else op.outputs


def _body_ops(update, states) -> List[ComputeOp]:
    """The computes between the states and the updates (the updates included): each runs
    once per step."""
    state_ops = {s.op for s in states}
    memo: Dict[Operation, bool] = {}

    def reads_state(op):
        if op not in memo:
            memo[op] = False
            memo[op] = any(t.op in state_ops or (isinstance(t.op, ComputeOp) and reads_state(t.op))
                           for t in op.input_tensors())
        return memo[op]
    out = []
    for u in update:
        reads_state(u.op)
    for u in update:
        if u.op not in out:
            out.append(u.op)
    out += [op for op, r in memo.items() if r and op not in out]
    return out


def scan_roles(ops) -> Dict[Operation, Tuple[ScanOp, int, str]]:
    """{op: (scan, k, role)} for the inits, updates and states of the scans among `ops`;
    role is "init", "update" or "state"."""
    out = {}
    for op in ops:
        if isinstance(op, ScanOp):
            for role, ts in (("init", op.init), ("update", op.update), ("state", op.state_placeholder)):
                for k, t in enumerate(ts):
                    out[t.op] = (op, k, role)
    return out
