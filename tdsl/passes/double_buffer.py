"""inject_double_buffer: the stages marked `double_buffer()` or `multi_buffer(n)` take
their n buffers in turn across the iterations of the loop they are attached to, so the data
of iterations v + 1 ... v + n - 1 is being fetched while iteration v uses its buffer (a
software pipeline).

For a serial loop `for v in [lo, lo + E): Allocate(D, seq(F, R))`, where F are the
statements that fill the pipelined buffers D and R the rest, with buffers D_0 ... D_{n-1}:

    F(lo + s) into D_s; commit                      for s in 0 .. n - 2
    for j in [0, ceil(E / n)):
        for u in 0 .. n - 1 (unrolled; u > 0 under `if likely(n j + u < E)`):
            barrier(async_wait = n - 2)
            if likely(n j + u + n - 1 < E): F(lo + n j + u + n - 1) into D_{(u - 1) mod n}
            commit
            R(lo + n j + u) reading D_u

The barrier publishes D_u (filled n - 1 iterations ago: every copy group but the n - 2
newest has completed) and tells every thread that the previous iteration's reads of
D_{u - 1} are done, so it can be refilled: one barrier per iteration (`thread_sync` adds
none to a statement that starts with one). A function that binds no GPU threads (the CPU)
gets neither barriers nor commits. A commit closes each iteration's group of
asynchronous copies (cp.async on CUDA sm_80+; elsewhere copies are synchronous and commit
is nothing), empty or not, so the count is the same every iteration. Buffers are separate
objects and the body is unrolled by n so each copy names its buffers statically:
`thread_sync` reasons about whole buffers. The fills move ahead of earlier iterations'
work, so F must not read what the loop writes; that is checked. Runs first, on the buffers
`schedule_ops` recorded in `func.attrs["double_buffer"]` ({buffer: n}, by identity).
"""
from __future__ import annotations

import dataclasses

from ..errors import ScheduleError
from ..ir import expr as E
from ..ir import stmt as S
from ..ir.visitor import Mutator, buffers_accessed, substitute, walk


class _Rename(Mutator):
    def __init__(self, bufs):
        self.bufs = bufs

    def visit_BufferLoad(self, e):
        idx = tuple(self.visit(i) for i in e.indices)
        return E.BufferLoad(self.bufs.get(e.buffer, e.buffer), idx)

    def visit_BufferStore(self, s):
        idx = tuple(self.visit(i) for i in s.indices)
        return dataclasses.replace(s, buffer=self.bufs.get(s.buffer, s.buffer),
                                   value=self.visit(s.value), indices=idx)


class _DoubleBuffer(Mutator):
    def __init__(self, bufs, gpu):
        self.bufs = bufs
        self.gpu = gpu      # barriers and copy groups only where threads share the buffers

    def visit_For(self, f):
        body = self.visit(f.body)
        allocs, inner = [], body
        while isinstance(inner, S.Allocate):
            allocs.append(inner.buffer)
            inner = inner.body
        db = [b for b in allocs if b in self.bufs]
        if not db:
            return f if body is f.body else S.For(f.var, f.min, f.extent, f.kind, body,
                                                   f.thread_tag, f.pragmas)
        return self._transform(f, allocs, db, inner)

    def _transform(self, f, allocs, db, inner):
        stmts = list(inner.stmts) if isinstance(inner, S.SeqStmt) else [inner]
        dbset = set(db)
        fills, rest = [], []
        names = ", ".join(b.name for b in db)
        for x in stmts:
            r, w = buffers_accessed(x)
            if w & dbset:
                if r & dbset or any(buffers_accessed(y)[0] & dbset for y in rest):
                    raise ScheduleError(f"double_buffer: {names} must be filled before loop "
                                        f"'{f.var.name}' reads it; it is read in the middle of "
                                        "its fill")
                fills.append(x)
            else:
                rest.append(x)
        fill, use = S.seq(*fills), S.seq(*rest)
        r_fill, _ = buffers_accessed(fill)
        _, w_use = buffers_accessed(use)
        clash = [b.name for b in r_fill & w_use]
        if clash:
            raise ScheduleError(f"double_buffer: {names} read(s) {', '.join(clash)}, which loop "
                                f"'{f.var.name}' writes: the next iteration's fill cannot move "
                                "ahead of this iteration's work")
        stages = max(self.bufs[b] for b in db)
        copies = [{b: b for b in db}] + [
            {b: S.Buffer(f"{b.name}.db{k if k > 1 else ''}", b.shape, b.dtype, b.scope, b.align,
                      b.swizzle)
             for b in db} for k in range(1, stages)]
        v, lo, ext = f.var, f.min, f.extent
        j = E.Var(v.name + ".db", v.dtype)

        def at(stmt, it, k):
            s = substitute(stmt, {v: lo + it})
            return _Rename(copies[k]).visit(s) if k else s

        def less(x):
            return E.likely(E.LT(x, ext))
        zero = E.const(0, v.dtype)
        commit = [S.AsyncCommit()] if self.gpu else []
        barrier = [S.Barrier("shared", async_wait=_groups_in_flight(stages))] if self.gpu else []
        prologue = [S.seq(S.IfThenElse(less(zero + s), at(fill, zero + s, s)) if s else
                          at(fill, zero, 0), *commit) for s in range(stages - 1)]
        steps = []
        for u in range(stages):
            it = j * stages + u
            step = S.seq(*barrier,
                         S.IfThenElse(less(it + (stages - 1)),
                                      at(fill, it + (stages - 1), (u + stages - 1) % stages)),
                         *commit,
                         at(use, it, u))
            steps.append(step if u == 0 else S.IfThenElse(less(it), step))
        loop = S.For(j, E.const(0, ext.dtype), (ext + stages - 1) // stages, S.ForKind.SERIAL,
                     S.seq(*steps), f.thread_tag, f.pragmas)
        out = S.seq(*prologue, loop)
        # the other allocations too: sized for any iteration, refilled before each use
        for b in reversed(allocs):
            out = S.Allocate(b, out)
            for c in copies[1:]:
                if b in c:
                    out = S.Allocate(c[b], out)
        return out


def _groups_in_flight(stages):
    """Copy groups a step's barrier leaves pending: the n - 2 committed after its buffer's
    (the prologue's n - 1 groups and one a step: the buffer read at step v was the group
    committed n - 1 commits before the barrier of step v)."""
    return stages - 2


def inject_double_buffer(func: S.PrimFunc) -> S.PrimFunc:
    bufs = func.attrs.get("double_buffer") or {}
    if not bufs:
        return func
    gpu = []
    walk(func.body, lambda n: gpu.append(1) if isinstance(n, S.For) and n.thread_tag and
         n.thread_tag.split(".")[0] in ("threadIdx", "blockIdx") else None)
    return func.with_body(_DoubleBuffer(bufs, bool(gpu)).visit(func.body))
