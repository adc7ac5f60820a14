"""Atomic stores: what a code generator needs of a `BufferStore` whose `atomic` is set.

Its value keeps the whole read-modify-write, `buffer[idx] <op> e` (either side), so every
pass that rewrites indices rewrites the load and the store alike and any reader of the IR
sees what is computed; `atomic_operand` gives back `e` for the atomic instruction.
"""
from __future__ import annotations

from ..errors import InternalError
from . import expr as E
from .visitor import expr_key

ATOMIC_OPS = {"add": E.Add, "mul": E.Mul, "min": E.Min, "max": E.Max}
ATOMIC_DTYPES = ("int32", "uint32", "int64", "uint64", "float32", "float64")


def atomic_operand(s) -> E.Expr:
    """The `e` of atomic store `s` (`buffer[idx] = buffer[idx] <s.atomic> e`)."""
    cls = ATOMIC_OPS.get(s.atomic)
    v = s.value
    if cls is not None and isinstance(v, cls):
        want = ("L", id(s.buffer)) + tuple(expr_key(i) for i in s.indices)
        for old, e in ((v.a, v.b), (v.b, v.a)):
            if isinstance(old, E.Select) and isinstance(old.t, E.BufferLoad):
                # the bounds check's guard of the load: the store has the same one
                old = old.t
            if isinstance(old, E.BufferLoad) and expr_key(old) == want:
                return e
    raise InternalError(f"an atomic '{s.atomic}' store to '{s.buffer.name}' no longer has "
                        f"the form {s.buffer.name}[i] {s.atomic} e: {v}")
