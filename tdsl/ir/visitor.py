"""Generic traversal of expressions and statements.

`Mutator` rebuilds a node only when a child changed; subclasses override `visit_<Class>`
for the nodes they care about. `walk` calls a function on every node, children first.
"""
from __future__ import annotations

import dataclasses
from functools import lru_cache

from . import expr as E
from .expr import And, BufferLoad, Expr, Var
from .stmt import Allocate, Barrier, Buffer, BufferStore, Prefetch, Stmt


@lru_cache(maxsize=None)
def _child_fields(cls):
    return tuple(f.name for f in dataclasses.fields(cls)
                 if f.name not in ("dtype", "name", "kind", "thread_tag", "pragmas", "scope",
                                   "combiner", "buffer", "tensor", "var"))


def _is_node(x):
    return isinstance(x, (Expr, Stmt))


class Mutator:
    """Rebuilds the tree bottom-up; override visit_<ClassName>(node) to change nodes."""

    def visit(self, node):
        if node is None:
            return None
        meth = getattr(self, "visit_" + type(node).__name__, None)
        if meth is not None:
            return meth(node)
        return self.generic_visit(node)

    def generic_visit(self, node):
        if not dataclasses.is_dataclass(node) or isinstance(node, (Var, Buffer)):
            return node
        changes = {}
        for name in _child_fields(type(node)):
            old = getattr(node, name)
            if _is_node(old):
                new = self.visit(old)
            elif isinstance(old, tuple) and old and any(_is_node(x) for x in old):
                new = tuple(self.visit(x) if _is_node(x) else x for x in old)
                if all(a is b for a, b in zip(new, old)):
                    new = old
            else:
                continue
            if new is not old:
                changes[name] = new
        if not changes:
            return node
        return dataclasses.replace(node, **changes)


def walk(node, fn):
    """Calls fn on every Expr/Stmt node under `node` (children before parents)."""
    if node is None:
        return
    if dataclasses.is_dataclass(node) and not isinstance(node, (Var, Buffer)):
        for name in _child_fields(type(node)):
            v = getattr(node, name)
            if _is_node(v):
                walk(v, fn)
            elif isinstance(v, tuple):
                for x in v:
                    if _is_node(x):
                        walk(x, fn)
    fn(node)


class _Substituter(Mutator):
    def __init__(self, vmap):
        self.vmap = vmap

    def visit_Var(self, v):
        return self.vmap.get(v, v)


def substitute(node, vmap):
    """Replaces variables by expressions (keys are Var objects)."""
    if not vmap:
        return node
    return _Substituter(vmap).visit(node)


class _BufferSwap(Mutator):
    def __init__(self, bmap):
        self.bmap = bmap

    def visit_BufferLoad(self, e):
        return BufferLoad(self.bmap.get(e.buffer, e.buffer), tuple(self.visit(i) for i in e.indices))

    def visit_BufferStore(self, s):
        return dataclasses.replace(s, buffer=self.bmap.get(s.buffer, s.buffer),
                                   value=self.visit(s.value),
                                   indices=tuple(self.visit(i) for i in s.indices))

    def visit_Prefetch(self, s):
        return Prefetch(self.bmap.get(s.buffer, s.buffer), tuple(self.visit(i) for i in s.indices),
                        self.visit(s.extent))

    def visit_Allocate(self, s):
        return Allocate(self.bmap.get(s.buffer, s.buffer), self.visit(s.body))


def replace_buffers(node, bmap):
    """`node` with the buffers that are keys of `bmap` replaced by their values."""
    return _BufferSwap(bmap).visit(node) if bmap else node


def free_vars(node):
    """The set of Vars read in `node` (loop and let variables included)."""
    out = set()

    def f(n):
        if isinstance(n, Var):
            out.add(n)
    walk(node, f)
    # walk skips Var nodes reached as fields named "var"; those are definitions.
    return out


def uses_var(node, var) -> bool:
    return var in free_vars(node)


def buffers_accessed(node):
    """(buffers read, buffers written) by the loads and stores under `node`."""
    reads, writes = set(), set()

    def f(n):
        if isinstance(n, BufferLoad):
            reads.add(n.buffer)
        elif isinstance(n, BufferStore):
            writes.add(n.buffer)
    walk(node, f)
    return reads, writes


def has_barrier(node) -> bool:
    """Whether a Barrier is anywhere under `node`."""
    found = []
    walk(node, lambda n: found.append(1) if isinstance(n, Barrier) else None)
    return bool(found)


def conjuncts(cond):
    """The terms of a chain of `And`s, left to right (`[cond]` for any other condition)."""
    if isinstance(cond, And):
        return conjuncts(cond.a) + conjuncts(cond.b)
    return [cond]


def expr_key(e):
    """A hashable key, equal for structurally equal expressions (variables, buffers and
    tensors compared by identity): what an update's `old` read and an atomic store's
    target are matched by."""
    if isinstance(e, E.Var):
        return ("V", id(e))
    if isinstance(e, (E.IntImm, E.FloatImm)):
        return (type(e).__name__, e.dtype, e.value)
    if isinstance(e, E.BufferLoad):
        return ("L", id(e.buffer)) + tuple(expr_key(i) for i in e.indices)
    if isinstance(e, E.ProducerLoad):
        return ("P", id(e.tensor)) + tuple(expr_key(i) for i in e.indices)
    if isinstance(e, E.BinaryOp):
        return (type(e).__name__, expr_key(e.a), expr_key(e.b))
    if isinstance(e, E.Not):
        return ("Not", expr_key(e.a))
    if isinstance(e, E.Cast):
        return ("Cast", e.dtype, expr_key(e.value))
    if isinstance(e, E.Select):
        return ("Sel", expr_key(e.cond), expr_key(e.t), expr_key(e.f))
    if isinstance(e, E.Call):
        return ("Call", e.name, e.dtype) + tuple(expr_key(a) for a in e.args)
    return ("id", id(e))
