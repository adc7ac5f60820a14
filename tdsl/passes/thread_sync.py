"""thread_sync: barriers where the threads of a block hand data to each other through
shared memory.

Inside a kernel every thread runs the whole body; loops bound to thread tags are not
loops on the device, so the pass looks through them. In a sequence of statements, a
barrier goes before a statement that reads a shared buffer written since the last barrier
(read after write) or writes one read since the last barrier (write after read). A serial
loop whose body both reads and writes a shared buffer gets a barrier at the end of its
body, so the next iteration does not overwrite what slower threads still read. A statement
that starts with a barrier of its own (a `multi_buffer` pipeline's step) needs none before
it, and a loop whose body starts with one none at its end. A barrier
must be reached by all threads of the block: the pass refuses to put one under a
condition that depends on a thread index.
"""
from __future__ import annotations

from ..errors import BuildError
from ..ir import expr as E
from ..ir import stmt as S
from ..ir.visitor import free_vars, has_barrier, walk
from ..te.tensor_intrin import pointer_writes


def shared_accesses(node):
    """(buffers read, buffers written) among shared-scope buffers under `node`; a tensor
    intrinsic's pointer (`Region.access_ptr`) reads, and writes where its mode says so."""
    reads, writes = set(), set()

    def f(n):
        if isinstance(n, E.BufferLoad) and n.buffer.scope == "shared":
            reads.add(n.buffer)
        elif isinstance(n, S.BufferStore) and n.buffer.scope == "shared":
            writes.add(n.buffer)
        elif isinstance(n, E.Call) and n.name == "address_of" and pointer_writes(n):
            if n.args[0].buffer.scope == "shared":
                writes.add(n.args[0].buffer)
    walk(node, f)
    return reads, writes


def _ends_with_barrier(s):
    """A serial loop that runs at least once and whose body ends with a barrier."""
    if not (isinstance(s, S.For) and s.kind is S.ForKind.SERIAL
            and isinstance(s.extent, E.IntImm) and s.extent.value > 0):
        return False
    body = s.body
    last = body.stmts[-1] if isinstance(body, S.SeqStmt) and body.stmts else body
    return isinstance(last, S.Barrier)


def _starts_with_barrier(s):
    """Whether every shared access of `s` comes after a barrier of its own."""
    if isinstance(s, S.Barrier):
        return True
    if isinstance(s, S.SeqStmt):
        for x in s.stmts:
            if _starts_with_barrier(x):
                return True
            r, w = shared_accesses(x)
            if r or w or has_barrier(x):
                return False
        return False
    if isinstance(s, S.IfThenElse):
        return _starts_with_barrier(s.then_case) and \
            (s.else_case is None or _starts_with_barrier(s.else_case))
    if isinstance(s, (S.LetStmt, S.Allocate)):
        return _starts_with_barrier(s.body)
    if isinstance(s, S.For) and s.kind is S.ForKind.SERIAL:
        return isinstance(s.extent, E.IntImm) and s.extent.value > 0 and \
            _starts_with_barrier(s.body)
    return False


class _Sync:
    def __init__(self):
        self.thread_vars = set()

    def visit(self, s):
        t = type(s)
        if t is S.SeqStmt:
            return self.seq([self.visit(x) for x in s.stmts])
        if t is S.For:
            if s.kind is S.ForKind.THREAD_BINDING and s.thread_tag.startswith("threadIdx"):
                self.thread_vars.add(s.var)
            body = self.visit(s.body)
            if s.kind is S.ForKind.SERIAL:
                r, w = shared_accesses(body)
                if r & w and not _starts_with_barrier(body):
                    body = S.seq(body, S.Barrier("shared"))
            if body is s.body:
                return s
            return S.For(s.var, s.min, s.extent, s.kind, body, s.thread_tag, s.pragmas)
        if t is S.IfThenElse:
            then = self.visit(s.then_case)
            other = self.visit(s.else_case) if s.else_case is not None else None
            if (has_barrier(then) or (other is not None and has_barrier(other))) and \
                    free_vars(s.cond) & self.thread_vars:
                raise BuildError(
                    f"thread_sync: shared memory is exchanged under the thread-dependent "
                    f"condition `{s.cond}`, where not all threads of the block reach the "
                    "barrier; move the condition inside the loops that use the buffer")
            if then is s.then_case and other is s.else_case:
                return s
            return S.IfThenElse(s.cond, then, other)
        if t is S.LetStmt:
            body = self.visit(s.body)
            return s if body is s.body else S.LetStmt(s.var, s.value, body)
        if t is S.Allocate:
            body = self.visit(s.body)
            return s if body is s.body else S.Allocate(s.buffer, body)
        return s

    def seq(self, stmts):
        out = []
        written, read = set(), set()
        for x in stmts:
            if isinstance(x, S.Barrier):
                written, read = set(), set()
                out.append(x)
                continue
            if _starts_with_barrier(x):
                written, read = set(), set()
            r, w = shared_accesses(x)
            if (r & written) or (w & read):
                out.append(S.Barrier("shared"))
                written, read = set(), set()
            out.append(x)
            written |= w
            read |= r
            if _ends_with_barrier(x):   # everything in it is synchronised by then
                written, read = set(), set()
        return S.seq(*out)


def thread_sync_stmt(stmt):
    return _Sync().visit(stmt)


def thread_sync(func: S.PrimFunc) -> S.PrimFunc:
    return func.with_body(thread_sync_stmt(func.body))
