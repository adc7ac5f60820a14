"""loop_partition: peel `likely` guards out of serial and parallel loops.

For a loop over v containing a guard `likely(lhs < rhs)` with lhs - rhs = c*v + rest (c > 0),
the guard holds for every inner iteration while v < end = (-max(rest) - 1) // c + 1. The loop
becomes a main loop [min, end) where the guard is dropped, and a tail [end, min+extent) that
keeps it. When `rest` does not depend on inner loops, the guard is false throughout the tail
and the tail is dropped. A serial tail of run-time extent gets the pragma ("tail", True):
codegen keeps it as written. Inside a tail whose extent depends on the sizes of the
arguments (the run-time sizes a kernel takes), loops are not split again
(only guards whose tail would do nothing are dropped), and the loops whose extent depends
on the tail's variable get the pragma too, and its unrolled loops that are guarded and
touch no allocation but the tail's own tile (no run-time loop between) are rolled
(`_RollGuarded`). Vectorized and unrolled loops are left alone:
their extents must stay constant, and the loops around them are partitioned instead.
"""
from __future__ import annotations

from .. import arith
from ..ir import expr as E
from ..ir import stmt as S
from ..ir.expr import Range
from ..ir.visitor import Mutator, conjuncts, free_vars, walk


def _collect(body, inner, out):
    """likely-guards in `body`, each with the ranges of the loops between here and it."""
    if isinstance(body, S.SeqStmt):
        for s in body.stmts:
            _collect(s, inner, out)
    elif isinstance(body, S.For):
        _collect(body.body, {**inner, body.var: Range(body.min, body.extent)}, out)
    elif isinstance(body, (S.LetStmt, S.Allocate)):
        _collect(body.body, inner, out)
    elif isinstance(body, S.IfThenElse):
        for c in conjuncts(body.cond):
            if isinstance(c, E.Call) and c.name == "likely":
                out.append((c, inner))
        _collect(body.then_case, inner, out)
        if body.else_case is not None:
            _collect(body.else_case, inner, out)


def _all_guarded(body, guards):
    """Whether every effect in `body` (a store, a call such as a tensor intrinsic writing
    through its pointers, an extern call) is under one of `guards`, so the body does
    nothing where they are all false."""
    ids = {id(g) for g in guards}
    if isinstance(body, S.SeqStmt):
        return all(_all_guarded(x, guards) for x in body.stmts)
    if isinstance(body, (S.For, S.LetStmt, S.Allocate)):
        return _all_guarded(body.body, guards)
    if isinstance(body, S.IfThenElse):
        if any(id(c) in ids for c in conjuncts(body.cond)):
            return body.else_case is None or _all_guarded(body.else_case, guards)
        return _all_guarded(body.then_case, guards) and (
            body.else_case is None or _all_guarded(body.else_case, guards))
    return not isinstance(body, (S.BufferStore, S.Evaluate, S.ExternCall))


class _Drop(Mutator):
    """Replaces the chosen guard nodes by True."""

    def __init__(self, nodes):
        self.ids = {id(n) for n in nodes}

    def visit_IfThenElse(self, s):
        parts = [E.const(True) if id(c) in self.ids else c for c in conjuncts(s.cond)]
        parts = [c for c in parts if not E.is_const_int(c, 1)]
        then = self.visit(s.then_case)
        other = self.visit(s.else_case)
        if not parts:
            return then
        cond = parts[0]
        for c in parts[1:]:
            cond = E.And(cond, c)
        return S.IfThenElse(cond, then, other)


class _KeepRemainders(Mutator):
    """Marks the serial loops whose extent depends on `var`, a tail's variable (the rows
    of a tile that the tail has left, at most a tile), to be kept as written: LLVM
    would unroll them at run time, code for more iterations than they ever have."""

    def __init__(self, var):
        self.var = var

    def visit_For(self, f):
        body = self.visit(f.body)
        pragmas = f.pragmas
        if f.kind is S.ForKind.SERIAL and self.var in free_vars(f.extent) \
                and ("tail", True) not in pragmas:
            pragmas = pragmas + (("tail", True),)
        return S.For(f.var, f.min, f.extent, f.kind, body, f.thread_tag, pragmas)


def _reads_memory(e):
    found = []
    walk(e, lambda n: found.append(n) if isinstance(n, E.BufferLoad) else None)
    return bool(found)


class _HoistGuards(Mutator):
    """In a tail, which keeps its guards: a loop whose whole body is a guard runs only
    where the guard's terms that do not depend on the loop's variable hold, tested once
    outside it (`for v: if c: s` -> `if c: for v: s`): a register tile's row guard is
    then tested once per row, not once per vector of the row."""

    def visit_For(self, f):
        body = self.visit(f.body)
        if isinstance(body, S.IfThenElse) and body.else_case is None:
            parts = conjuncts(body.cond)
            out = [c for c in parts if f.var not in free_vars(c) and not _reads_memory(c)]
            if out:
                kept = [c for c in parts if not any(c is o for o in out)]
                inner = S.IfThenElse(_all_of(kept), body.then_case, None) if kept else body.then_case
                loop = S.For(f.var, f.min, f.extent, f.kind, inner, f.thread_tag, f.pragmas)
                return S.IfThenElse(_all_of(out), loop, None)
        return S.For(f.var, f.min, f.extent, f.kind, body, f.thread_tag, f.pragmas)


class _RollGuarded(Mutator):
    """In a run-time tail: an unrolled loop whose body is guarded and touches only the
    function's own buffers becomes a serial loop kept as written. The tail runs at most
    once per pass of the loop it was peeled from, and its guarded vectors are masked
    or gathered anyway, so its copies per unrolled step (16 of a transpose's tile)
    cost compile time and code size for little run time. A loop that touches an
    allocation stays unrolled: constant indices are what keep a tile's partial sums
    in registers, in the tail and in the main loop that shares the allocation, across
    a reduction loop. An allocation made in the tail with no serial loop between it and
    the unrolled loop (a depthwise conv's tile of partial sums over its unrolled taps)
    is the tail's own and each of its elements is touched a constant number of times:
    rolled, a few loads and stores stand for the registers, once per tail, where the
    unrolled copies (40 guarded taps of a 5-tap tile of 8 pixels) cost LLVM
    several times the main loop's compile time."""

    def __init__(self, allocated):
        self.allocated = allocated
        self.own = set()

    def visit_Allocate(self, s):
        saved = self.own
        self.own = saved | {s.buffer}
        try:
            return S.Allocate(s.buffer, self.visit(s.body))
        finally:
            self.own = saved

    def visit_For(self, f):
        saved = self.own
        if f.kind is not S.ForKind.UNROLLED:
            self.own = set()
        try:
            body = self.visit(f.body)
        finally:
            self.own = saved
        if f.kind is S.ForKind.UNROLLED and self._rollable(body):
            return S.For(f.var, f.min, f.extent, S.ForKind.SERIAL, body, f.thread_tag,
                         f.pragmas + (("tail", True),))
        return S.For(f.var, f.min, f.extent, f.kind, body, f.thread_tag, f.pragmas)

    def _rollable(self, body):
        guarded, other = [], []

        def see(n):
            if isinstance(n, E.Call) and n.name == "likely":
                guarded.append(n)
            elif isinstance(n, (S.BufferStore, E.BufferLoad)):
                if n.buffer in self.allocated and n.buffer not in self.own:
                    other.append(n)
            elif isinstance(n, (S.Allocate, S.Evaluate, S.ExternCall)) or \
                    (isinstance(n, E.Call) and n.extern):
                other.append(n)
        walk(body, see)
        return bool(guarded) and not other


def _all_of(conds):
    cond = conds[0]
    for c in conds[1:]:
        cond = E.And(cond, c)
    return cond


class _Partition(Mutator):
    """`split`: whether a loop may become a main loop and a tail; without, a guard is
    only dropped where the tail would do nothing (the loop then ends earlier)."""

    def __init__(self, facts, split=True, allocated=frozenset()):
        self.ranges = dict(facts)
        self.sizes = set(facts)
        self.split = split
        self.allocated = allocated

    def visit_For(self, f):
        outer = dict(self.ranges)
        self.ranges[f.var] = Range(f.min, f.extent)
        try:
            if f.kind in (S.ForKind.SERIAL, S.ForKind.PARALLEL):
                parts = self._split(f)
                if parts is not None:
                    return parts
            return S.For(f.var, f.min, f.extent, f.kind, self.visit(f.body), f.thread_tag, f.pragmas)
        finally:
            self.ranges = outer

    def _split(self, f):
        found = []
        _collect(f.body, {}, found)
        chosen, ends, exact = [], [], []
        for guard, inner in found:
            cond = guard.args[0]
            if not isinstance(cond, E.LT):
                continue
            lin = arith.linear_coeff(cond.a - cond.b, f.var, {**self.ranges, **inner})
            if lin is None or lin[0] <= 0:
                continue
            c, rest = lin
            if free_vars(rest) & set(inner):
                hi = arith.bound(rest, inner)[1]
                exact.append(False)
            else:
                hi = rest
                exact.append(True)
            chosen.append(guard)
            ends.append((-hi - 1) // c + 1)
        if not chosen:
            return None
        end = ends[0]
        for e in ends[1:]:
            end = E.minimum(end, e)
        ext = arith.simplify(E.minimum(E.maximum(end - f.min, 0), f.extent), self.ranges)
        if isinstance(ext, E.IntImm) and isinstance(f.extent, E.IntImm) and ext.value >= f.extent.value:
            main_body = _Drop(chosen).visit(f.body)
            return S.For(f.var, f.min, f.extent, f.kind, self.visit(main_body), f.thread_tag, f.pragmas)
        # the guards are all `v < end`: false throughout the tail, which is dropped
        no_tail = all(exact) and len({str(e) for e in ends}) == 1 and _all_guarded(f.body, chosen)
        if not (no_tail or self.split):
            return None
        self.ranges[f.var] = Range(f.min, ext)
        main = S.For(f.var, f.min, ext, f.kind, self.visit(_Drop(chosen).visit(f.body)), f.thread_tag, f.pragmas)
        if no_tail:
            return main
        tail_min = arith.simplify(f.min + ext, self.ranges)
        tail_ext = arith.simplify(f.extent - ext, self.ranges)
        self.ranges[f.var] = Range(tail_min, tail_ext)
        pragmas = f.pragmas
        if free_vars(tail_ext) & self.sizes:
            # the tail runs less than one step of the guards, so its loops keep their guards
            # rather than being partitioned in turn: a copy of the body per combination of
            # main parts and tails (four of a register tile with run-time rows and
            # columns) would cost compile time and run once per call; codegen keeps a
            # serial tail as written, and the loops in it over what is left of a tile
            kind = f.kind
            if kind is S.ForKind.PARALLEL and arith.can_prove(E.LE(tail_ext, E.const(1, tail_ext.dtype)), self.ranges):
                # at most one task (a register tile's last rows): a fork for it only
                # costs a launch at run time and its three functions at build time
                kind = S.ForKind.SERIAL
                pragmas = tuple(p for p in pragmas if p[0] != "parallel_when")
            if kind is S.ForKind.SERIAL:
                pragmas = pragmas + (("tail", True),)
            inner = _Partition(self.ranges, split=False).visit(f.body)
            rolled = _RollGuarded(self.allocated).visit(_HoistGuards().visit(inner))
            tail_body = _KeepRemainders(f.var).visit(rolled)
        else:
            if f.kind is S.ForKind.SERIAL and not isinstance(tail_ext, E.IntImm):
                pragmas = pragmas + (("tail", True),)
            kind = f.kind
            tail_body = self.visit(f.body)
        tail = S.For(f.var, tail_min, tail_ext, kind, tail_body, f.thread_tag, pragmas)
        return S.seq(main, tail)


def loop_partition(func: S.PrimFunc) -> S.PrimFunc:
    facts = func.attrs.get("size_ranges", {})
    allocated = set()
    walk(func.body, lambda n: allocated.add(n.buffer) if isinstance(n, S.Allocate) else None)
    return func.with_body(_Partition(facts, allocated=allocated).visit(func.body))
