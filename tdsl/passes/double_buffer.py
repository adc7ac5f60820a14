"""inject_double_buffer: the stages marked `double_buffer()` alternate between two buffers
across the iterations of the loop they are attached to, so the data of iteration v + 1 is
fetched while iteration v uses the other buffer.

For a serial loop `for v in [lo, lo + E): Allocate(D, seq(F, R))`, where F are the
statements that fill the double-buffered buffers D and R the rest:

    Allocate(D, Allocate(D', seq(
        F(v = lo) into D,
        for j in [0, (E + 1) // 2):
            if likely(2j + 1 < E): F(v = lo + 2j + 1) into D'
            R(v = lo + 2j) reading D
            if likely(2j + 1 < E):
                if likely(2j + 2 < E): F(v = lo + 2j + 2) into D
                R(v = lo + 2j + 1) reading D')))

Two buffer objects rather than one of twice the size, and the body unrolled by two so each
copy names its buffers statically: `thread_sync` reasons about whole buffers, and with two
of them it puts one barrier per iteration (between using one buffer and refilling it)
instead of two. The fill of v + 1 moves ahead of R(v), so F must not read what the loop
writes; that is checked. Runs first, on the buffers `schedule_ops` recorded in
`func.attrs["double_buffer"]` (by identity).
"""
from __future__ import annotations

from ..errors import ScheduleError
from ..ir import expr as E
from ..ir import stmt as S
from ..ir.visitor import Mutator, substitute, walk


def _reads_writes(stmt):
    reads, writes = set(), set()

    def f(n):
        if isinstance(n, E.BufferLoad):
            reads.add(n.buffer)
        elif isinstance(n, S.BufferStore):
            writes.add(n.buffer)
    walk(stmt, f)
    return reads, writes


class _Rename(Mutator):
    def __init__(self, bufs):
        self.bufs = bufs

    def visit_BufferLoad(self, e):
        idx = tuple(self.visit(i) for i in e.indices)
        return E.BufferLoad(self.bufs.get(e.buffer, e.buffer), idx)

    def visit_BufferStore(self, s):
        idx = tuple(self.visit(i) for i in s.indices)
        return S.BufferStore(self.bufs.get(s.buffer, s.buffer), self.visit(s.value), idx)


class _DoubleBuffer(Mutator):
    def __init__(self, bufs):
        self.bufs = bufs

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
            r, w = _reads_writes(x)
            if w & dbset:
                if r & dbset or any(_reads_writes(y)[0] & dbset for y in rest):
                    raise ScheduleError(f"double_buffer: {names} must be filled before loop "
                                        f"'{f.var.name}' reads it; it is read in the middle of "
                                        "its fill")
                fills.append(x)
            else:
                rest.append(x)
        fill, use = S.seq(*fills), S.seq(*rest)
        r_fill, _ = _reads_writes(fill)
        _, w_use = _reads_writes(use)
        clash = [b.name for b in r_fill & w_use]
        if clash:
            raise ScheduleError(f"double_buffer: {names} read(s) {', '.join(clash)}, which loop "
                                f"'{f.var.name}' writes: the next iteration's fill cannot move "
                                "ahead of this iteration's work")
        back = {b: S.Buffer(b.name + ".db", b.shape, b.dtype, b.scope, b.align) for b in db}
        v, lo, ext = f.var, f.min, f.extent
        j = E.Var(v.name + ".db", v.dtype)

        def at(stmt, it, half):
            s = substitute(stmt, {v: lo + it})
            return _Rename(back).visit(s) if half else s

        def less(x):
            return E.likely(E.LT(x, ext))
        two_j = j * 2
        body = S.seq(
            S.IfThenElse(less(two_j + 1), at(fill, two_j + 1, 1)),
            at(use, two_j, 0),
            S.IfThenElse(less(two_j + 1), S.seq(
                S.IfThenElse(less(two_j + 2), at(fill, two_j + 2, 0)),
                at(use, two_j + 1, 1))))
        loop = S.For(j, E.const(0, ext.dtype), (ext + 1) // 2, S.ForKind.SERIAL, body,
                     f.thread_tag, f.pragmas)
        out = S.seq(at(fill, E.const(0, v.dtype), 0), loop)
        # the other allocations too: sized for any iteration, refilled before each use
        for b in reversed(allocs):
            out = S.Allocate(b, out)
            if b in back:
                out = S.Allocate(back[b], out)
        return out


def inject_double_buffer(func: S.PrimFunc) -> S.PrimFunc:
    bufs = set(func.attrs.get("double_buffer") or ())
    if not bufs:
        return func
    return func.with_body(_DoubleBuffer(bufs).visit(func.body))
