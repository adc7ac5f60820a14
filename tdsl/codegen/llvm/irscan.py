"""Fast scans of loop IR for the LLVM backend's analyses.

Iterative (no recursion limit on deep expressions) and specialised to the node kinds that
reach code generation, so they are cheaper than the generic `tdsl.ir.visitor.walk`.
"""
from __future__ import annotations

from ... import dtype as dt
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


# a serial loop of constant extent up to this many trips is unrolled whole by LLVM
LLVM_UNROLLS = 8


def invariant_reads(var, body) -> dict:
    """{buffer: bytes} of the buffers that loop `var`'s `body` reads at an index that
    stays the same from one trip to the next (free of `var`, of the loops inside it that
    stay loops and of the values bound from those) and writes nowhere, with how many
    distinct bytes of them it reads so (a load once per step of the unrolled and
    vectorized loops its index moves with): what LLVM's LICM hoists out of the loop into
    registers. {} where the body calls an extern function (it may write any buffer)."""
    varying, steps, loads, written = {var}, {}, {}, set()

    def moves(e):
        return bool(expr_vars(e, set()) & varying)

    def ex(e):
        stack = [e]
        while stack:
            x = stack.pop()
            if isinstance(x, E.BufferLoad) and not any(moves(i) for i in x.indices):
                n = dt.bits(x.buffer.dtype) // 8
                for v in set().union(*(expr_vars(i, set()) for i in x.indices)):
                    n *= steps.get(v, 1)
                loads[(x.buffer,) + tuple(structural_key(i) for i in x.indices)] = n
            stack.extend(iter_children(x))

    def st(s):
        if isinstance(s, S.SeqStmt):
            for c in s.stmts:
                st(c)
        elif isinstance(s, S.For):
            ex(s.min); ex(s.extent)
            # a loop unrolled (by tdsl, or by LLVM when it is short) or vectorized reads
            # the same places every trip of the outer loop; LLVM hoists none of a longer
            # loop's loads out of it
            if isinstance(s.extent, E.IntImm) and not moves(s.min) and \
                    (s.kind in (S.ForKind.UNROLLED, S.ForKind.VECTORIZED) or s.extent.value <= LLVM_UNROLLS):
                steps[s.var] = s.extent.value
            else:
                varying.add(s.var)
            st(s.body)
        elif isinstance(s, S.LetStmt):
            ex(s.value)
            if moves(s.value):
                varying.add(s.var)
            st(s.body)
        elif isinstance(s, S.IfThenElse):
            ex(s.cond); st(s.then_case)
            if s.else_case is not None:
                st(s.else_case)
        elif isinstance(s, S.BufferStore):
            written.add(s.buffer)
            ex(s.value)
            for i in s.indices:
                ex(i)
        elif isinstance(s, S.Allocate):
            written.add(s.buffer)
            st(s.body)
        elif isinstance(s, S.Evaluate):
            ex(s.value)
        elif isinstance(s, S.ExternCall):
            raise _Opaque
    try:
        st(body)
    except _Opaque:
        return {}
    out = {}
    for (b, *_), n in loads.items():
        if b not in written:
            out[b] = out.get(b, 0) + n
    return out


class _Opaque(Exception):
    """A body whose reads and writes the scan cannot see."""
