"""A schedule's fingerprint: a digest of everything `lower()` reads, so `build()` can find
the code it made for an equal schedule in an earlier process without lowering again.

Lowering and IR generation take about half of a network's build (the rest is LLVM), so a
cache keyed on the generated IR alone cannot make a warm build much faster. Instead, the
whole object graph reachable from the schedule and the arguments is serialised: every
instance attribute of every object, objects shared by identity (two distinct variables
both named `n` stay distinct), dataclass nodes, tuples, dicts, numbers with their types.
Nothing is chosen field by field, so a new attribute can never be silently left out.

What cannot be serialised faithfully makes the fingerprint None (no caching), never a
guess: functions and other callables, modules, unknown native objects, sets of objects.
The one callable lowering does read, a reducer's `combine`/`identity`, is captured by
what it returns on fresh variables, exactly as lowering uses it. Private caches that
differ between processes at worst make the fingerprint differ: a miss, not a wrong hit.
"""
from __future__ import annotations

import dataclasses
import hashlib
import types

import numpy as np

from .ir import expr as E

_ATOMS = (type(None), bool, int, float, complex, str, bytes)
_CALLABLES = (types.FunctionType, types.MethodType, types.BuiltinFunctionType,
              types.BuiltinMethodType, types.ModuleType)


class _Opaque(Exception):
    """Something reachable from the schedule cannot be serialised faithfully."""


def fingerprint(*roots) -> str | None:
    """The hex digest of `roots` and everything reachable from them, or None."""
    w = _Writer()
    try:
        for r in roots:
            w.visit(r)
    except (_Opaque, RecursionError):
        return None
    return w.hash.hexdigest()


class _Writer:
    def __init__(self):
        self.hash = hashlib.sha256()
        self.ids = {}
        self.alive = []        # keeps temporaries alive so their ids stay unique
        self.reducers = set()  # ids of the CommReducers captured through their Reduce

    def emit(self, s: str):
        self.hash.update(s.encode("utf-8", "surrogatepass") + b"\0")

    def visit(self, x):
        t = type(x)
        if t in _ATOMS:
            self.emit(f"{t.__name__}:{x!r}")
        elif t is list or t is tuple:
            self.emit(f"{t.__name__}[{len(x)}")
            for v in x:
                self.visit(v)
            self.emit("]")
        elif t is dict:
            self.emit(f"dict[{len(x)}")
            for k, v in x.items():
                self.visit(k)
                self.visit(v)
            self.emit("]")
        elif t is set or t is frozenset:
            if not all(type(v) in _ATOMS for v in x):
                raise _Opaque("a set of objects has no stable order")
            self.emit(f"set[{sorted(repr(v) for v in x)}]")
        elif isinstance(x, np.ndarray):
            self.emit(f"ndarray:{x.dtype.str}:{x.shape}:"
                      f"{hashlib.sha256(np.ascontiguousarray(x).tobytes()).hexdigest()}")
        elif isinstance(x, np.generic):
            self.emit(f"np:{x.dtype.str}:{x!r}")
        elif isinstance(x, type):
            self.emit(f"type:{x.__module__}.{x.__qualname__}")
        elif isinstance(x, _CALLABLES) or t.__module__.startswith("functools"):
            raise _Opaque(f"a {t.__name__} is reachable from the schedule")
        else:
            self.visit_object(x)

    def visit_object(self, x):
        ref = self.ids.get(id(x))
        if ref is not None:
            self.emit(f"@{ref}")
            return
        self.ids[id(x)] = len(self.ids)
        self.alive.append(x)
        t = type(x)
        self.emit(f"obj:{t.__module__}.{t.__qualname__}")
        if t.__module__.split(".")[0] == "sympy":
            import sympy
            self.emit(sympy.srepr(x))
            return
        if isinstance(x, E.Reduce):
            self.visit_reducer(x)
        if isinstance(x, E.CommReducer):
            if id(x) not in self.reducers:
                raise _Opaque("a reducer outside a reduction")
            self.emit(f"end:{x.name}")     # its functions were captured by visit_reducer
            return
        for name, value in _attributes(x):
            self.emit(name)
            self.visit(value)
        self.emit("end")

    def visit_reducer(self, r):
        """A reducer's functions, by their results on fresh operands of the source type
        (tuples of them for a reduction over tuples)."""
        if isinstance(r.source, tuple):
            dtypes = [x.dtype for x in r.source]
            a = tuple(E.Var(f"lhs{k}", d) for k, d in enumerate(dtypes))
            b = tuple(E.Var(f"rhs{k}", d) for k, d in enumerate(dtypes))
            combined = r.combiner.combine_values(a, b)
            identity = r.combiner.identity_values(dtypes)
            self.alive += [a, b]
        else:
            dtype = r.source.dtype
            a, b = E.Var("lhs", dtype), E.Var("rhs", dtype)
            combined, identity = r.combiner.combine(a, b), r.combiner.identity(dtype)
        self.alive += [a, b, combined, identity]
        self.reducers.add(id(r.combiner))
        self.emit(f"reducer:{r.combiner.name}")
        self.visit(combined)
        self.visit(identity)


def _attributes(x):
    """(name, value) of every attribute held by instance `x`, in a stable order."""
    out = {}
    d = getattr(x, "__dict__", None)
    if d is not None:
        out.update(d)
    for cls in type(x).__mro__:
        for name in getattr(cls, "__slots__", ()):
            if name not in ("__dict__", "__weakref__") and hasattr(x, name):
                out[name] = getattr(x, name)
    if d is None and not out and not dataclasses.is_dataclass(x):
        raise _Opaque(f"cannot look inside a {type(x).__name__}")
    return sorted(out.items())
