"""Fast scans of loop IR for the LLVM backend's analyses.

Iterative (no recursion limit on deep expressions) and specialised to the node kinds that
reach code generation, so they are cheaper than the generic `tdsl.ir.visitor.walk`.
"""
from __future__ import annotations

from ...ir import expr as E
from ...ir import stmt as S


def structural_key(e):
    """A hashable key equal for structurally equal expressions (Vars/Buffers by identity)."""
    if isinstance(e, E.Var):
        return ("V", id(e))
    if isinstance(e, (E.IntImm, E.FloatImm)):
        return (type(e).__name__, e.dtype, e.value)
    if isinstance(e, E.BufferLoad):
        return ("L", id(e.buffer)) + tuple(structural_key(i) for i in e.indices)
    if isinstance(e, E.BinaryOp):
        return (type(e).__name__, structural_key(e.a), structural_key(e.b))
    if isinstance(e, E.Not):
        return ("Not", structural_key(e.a))
    if isinstance(e, E.Cast):
        return ("Cast", e.dtype, structural_key(e.value))
    if isinstance(e, E.Select):
        return ("Sel", structural_key(e.cond), structural_key(e.t), structural_key(e.f))
    if isinstance(e, E.Call):
        return ("Call", e.name, e.dtype) + tuple(structural_key(a) for a in e.args)
    return ("id", id(e))


def iter_children(e):
    if isinstance(e, E.BinaryOp):
        return (e.a, e.b)
    if isinstance(e, E.Not):
        return (e.a,)
    if isinstance(e, E.Select):
        return (e.cond, e.t, e.f)
    if isinstance(e, E.Cast):
        return (e.value,)
    if isinstance(e, E.Call):
        return e.args
    if isinstance(e, E.BufferLoad):
        return e.indices
    return ()


def expr_vars(e, out: set):
    stack = [e]
    while stack:
        x = stack.pop()
        if isinstance(x, E.Var):
            out.add(x)
        else:
            stack.extend(iter_children(x))
    return out


def has_load(e) -> bool:
    stack = [e]
    while stack:
        x = stack.pop()
        if isinstance(x, E.BufferLoad):
            return True
        stack.extend(iter_children(x))
    return False


def collect_refs(stmt, vars_: dict, bufs: dict):
    """Vars and Buffers referenced under `stmt` (dicts used as ordered sets)."""
    def ex(e):
        stack = [e]
        while stack:
            x = stack.pop()
            if isinstance(x, E.Var):
                vars_[x] = None
            elif isinstance(x, E.BufferLoad):
                bufs[x.buffer] = None
                stack.extend(x.indices)
            else:
                stack.extend(iter_children(x))

    def st(s):
        if isinstance(s, S.SeqStmt):
            for c in s.stmts:
                st(c)
        elif isinstance(s, S.For):
            ex(s.min); ex(s.extent); st(s.body)
        elif isinstance(s, S.LetStmt):
            ex(s.value); st(s.body)
        elif isinstance(s, S.IfThenElse):
            ex(s.cond); st(s.then_case)
            if s.else_case is not None:
                st(s.else_case)
        elif isinstance(s, S.BufferStore):
            bufs[s.buffer] = None
            ex(s.value)
            for i in s.indices:
                ex(i)
        elif isinstance(s, S.Prefetch):
            bufs[s.buffer] = None
            ex(s.extent)
            for i in s.indices:
                ex(i)
        elif isinstance(s, S.Allocate):
            for d in s.buffer.shape:
                ex(d)
            st(s.body)
        elif isinstance(s, S.Evaluate):
            ex(s.value)
    st(stmt)
