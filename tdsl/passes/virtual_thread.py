"""inject_virtual_thread: loops bound to "vthread" become virtual threads, interleaved
inside each real thread.

A vthread loop means "these iterations are threads": independent, and they meet only at
barriers. Run as a plain loop, a body with barriers would repeat the work shared by all
virtual threads (the cooperative fill of a shared cache) once per virtual thread. So the
loop is pushed down into its body, statement by statement:

- a part that does not depend on the virtual thread (neither its variable nor a buffer
  written from it) runs once: it is the same for every virtual thread;
- a part without barriers that depends on it runs for each virtual thread in an unrolled
  loop;
- sequences, loops, allocations and barriers in between are kept, with the virtual thread
  loop pushed into their bodies; a barrier under a condition that depends on the virtual
  thread cannot be kept and is an error;
- a buffer allocated on the way whose contents depend on the virtual thread (a local
  accumulator) gets one copy per virtual thread, at `v * size + index`.

Shared caches are computed for all virtual threads of a thread (bound inference relaxes
their region over vthread loops, as over threadIdx), which is what makes their fill
independent of the virtual thread. Runs after storage_flatten (buffers are 1-d).
"""
from __future__ import annotations

import dataclasses

from .. import arith
from ..errors import ScheduleError
from ..ir import expr as E
from ..ir import stmt as S
from ..ir.visitor import Mutator, free_vars, has_barrier, substitute, walk


def _touched(stmt, v):
    """The buffers written under `stmt` whose contents depend on `v` (through values,
    indices, enclosing conditions, loop bounds, let values or reads of such buffers)."""
    bufs = set()

    def dep(e, lets):
        found = []

        def f(n):
            if isinstance(n, E.Var) and (n is v or n in lets):
                found.append(1)
            elif isinstance(n, E.BufferLoad) and n.buffer in bufs:
                found.append(1)
        walk(e, f)
        return bool(found)

    def scan(s, ctx, lets):
        if isinstance(s, S.SeqStmt):
            for x in s.stmts:
                scan(x, ctx, lets)
        elif isinstance(s, S.For):
            scan(s.body, ctx or dep(s.min, lets) or dep(s.extent, lets), lets)
        elif isinstance(s, S.LetStmt):
            scan(s.body, ctx, lets | {s.var} if dep(s.value, lets) else lets)
        elif isinstance(s, S.IfThenElse):
            c = ctx or dep(s.cond, lets)
            scan(s.then_case, c, lets)
            if s.else_case is not None:
                scan(s.else_case, c, lets)
        elif isinstance(s, S.Allocate):
            scan(s.body, ctx, lets)
        elif isinstance(s, S.BufferStore):
            if s.buffer not in bufs and (ctx or dep(s.value, lets)
                                         or any(dep(i, lets) for i in s.indices)):
                bufs.add(s.buffer)
                changed.append(1)

    while True:
        changed = []
        scan(stmt, False, frozenset())
        if not changed:
            return bufs


class _Expand(Mutator):
    """Accesses of per-virtual-thread copies: buffer -> its copy, index -> v*size + index."""

    def __init__(self, v, copies):
        self.v = v
        self.copies = copies      # buffer -> (copy, size)

    def _idx(self, buf, indices):
        new, size = self.copies[buf]
        return new, (self.v * size + indices[0],)

    def visit_BufferLoad(self, e):
        idx = tuple(self.visit(i) for i in e.indices)
        if e.buffer not in self.copies:
            return E.BufferLoad(e.buffer, idx)
        return E.BufferLoad(*self._idx(e.buffer, idx))

    def visit_BufferStore(self, s):
        idx = tuple(self.visit(i) for i in s.indices)
        value = self.visit(s.value)
        if s.buffer not in self.copies:
            return dataclasses.replace(s, value=value, indices=idx)
        buf, idx = self._idx(s.buffer, idx)
        return dataclasses.replace(s, buffer=buf, value=value, indices=idx)


class _Injector:
    def __init__(self, var, n, touched):
        self.v = var
        self.n = n
        self.touched = touched
        self.copies = {}

    def depends(self, s):
        if self.v in free_vars(s):
            return True
        found = []

        def f(n):
            if isinstance(n, (E.BufferLoad, S.BufferStore)) and n.buffer in self.touched:
                found.append(1)
        walk(s, f)
        return bool(found)

    def each(self, s):
        """`s` once per virtual thread."""
        if self.copies:
            s = _Expand(self.v, self.copies).visit(s)
        return S.For(self.v, E.const(0, self.v.dtype), E.const(self.n, self.v.dtype),
                     S.ForKind.UNROLLED, s)

    def run(self, s):
        if not self.depends(s):
            return s
        if not has_barrier(s):
            return self.each(s)
        if isinstance(s, S.SeqStmt):
            return S.seq(*[self.run(x) for x in s.stmts])
        if isinstance(s, S.Barrier):
            return s
        if isinstance(s, S.For):
            if self.v in free_vars(s.min) | free_vars(s.extent):
                raise self._error(f"the loop '{s.var.name}' holds a barrier and its range "
                                  "depends on the virtual thread")
            return S.For(s.var, s.min, s.extent, s.kind, self.run(s.body), s.thread_tag,
                         s.pragmas)
        if isinstance(s, S.IfThenElse):
            if self.depends(S.Evaluate(s.cond)):
                raise self._error(f"a barrier is under the condition `{s.cond}`, which "
                                  "depends on the virtual thread")
            other = self.run(s.else_case) if s.else_case is not None else None
            return S.IfThenElse(s.cond, self.run(s.then_case), other)
        if isinstance(s, S.LetStmt):
            if self.depends(S.Evaluate(s.value)):   # one value per virtual thread: inline it
                return self.run(substitute(s.body, {s.var: s.value}))
            return S.LetStmt(s.var, s.value, self.run(s.body))
        if isinstance(s, S.Allocate):
            buf = s.buffer
            if buf in self.touched:
                size = arith.simplify(buf.shape[0])
                copy = S.Buffer(buf.name, (arith.simplify(size * self.n),), buf.dtype,
                                buf.scope, buf.align, buf.swizzle)
                self.copies[buf] = (copy, size)
                return S.Allocate(copy, self.run(s.body))
            return S.Allocate(buf, self.run(s.body))
        raise self._error(f"cannot interleave {type(s).__name__}")  # pragma: no cover

    def _error(self, msg):
        return ScheduleError(f"bind: vthread '{self.v.name}': {msg}")


class _VThread(Mutator):
    def visit_For(self, f):
        body = self.visit(f.body)
        if f.kind is S.ForKind.THREAD_BINDING and f.thread_tag == "vthread":
            ext = arith.simplify(f.extent)
            if not isinstance(ext, E.IntImm):
                raise ScheduleError(f"bind: the loop '{f.var.name}' bound to vthread needs a "
                                    f"constant extent, got {ext}")
            if not E.is_const_int(f.min, 0):
                body = substitute(body, {f.var: f.var + f.min})
            return _Injector(f.var, ext.value, _touched(body, f.var)).run(body)
        if body is f.body:
            return f
        return S.For(f.var, f.min, f.extent, f.kind, body, f.thread_tag, f.pragmas)


def inject_virtual_thread(func: S.PrimFunc) -> S.PrimFunc:
    sched = func.attrs.get("schedule")
    if sched is not None and not any(a.thread is not None and a.thread.thread_tag == "vthread"
                                     for st in sched.stages for a in st.iter_var_attrs.values()):
        return func         # nothing to do: skip the walk
    return func.with_body(_VThread().visit(func.body))
