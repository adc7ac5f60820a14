"""Intrinsic lowering rules per target: TVM's `register_intrin_lowering`.

`register_intrin_lowering("exp", "cuda", fn)` makes every `exp(...)` Call of a function
built for "cuda" become `fn(call)` before code generation (`lower_intrinsics`, the last
pass for that target); `fn` returns another expression (`exp2(x * log2(e))`,
`call_pure_extern("float32", "__expf", x)`) or the call itself to keep it. Op names may be
written as TVM writes them ("tir.exp"). The code generators' own mappings stay the
default; a rule only replaces them for its target.

The compile cache keys builds on `digest()`: each rule's result on probe calls, as the
fingerprint captures a reducer by its result, so a rule registered later, or another rule
in another process, never reuses a build made without it.
"""
from __future__ import annotations

import hashlib
from typing import Callable, Dict, Tuple

from ..errors import LoweringError, TdslError
from ..ir import expr as E
from ..ir import stmt as S
from ..ir.visitor import Mutator

_rules: Dict[Tuple[str, str], Callable] = {}


def _op_name(op_name):
    if not isinstance(op_name, str) or not op_name:
        raise TdslError(f"register_intrin_lowering: the op name must be a string such as "
                        f"'exp', got {op_name!r}")
    return op_name[4:] if op_name.startswith("tir.") else op_name


def register_intrin_lowering(op_name, target, f=None, override=False):
    """Lowers intrinsic `op_name` with `f(call) -> Expr` for functions built for `target`
    ("llvm", "c", "cuda", "opencl"). Without `f`, a decorator. A second rule for the same
    op and target needs `override=True`."""
    name = _op_name(op_name)
    if not isinstance(target, str) or not target:
        raise TdslError(f"register_intrin_lowering('{name}'): target must be a target kind "
                        f"such as 'cuda', got {target!r}")
    kind = target.split()[0]
    if f is None:
        return lambda fn: (register_intrin_lowering(op_name, target, fn, override), fn)[1]
    if not callable(f):
        raise TdslError(f"register_intrin_lowering('{name}', '{kind}'): the rule must be a "
                        f"function of the Call, got {f!r}")
    if (name, kind) in _rules and not override:
        raise TdslError(f"register_intrin_lowering: '{name}' already has a rule for target "
                        f"'{kind}'; pass override=True to replace it")
    _rules[(name, kind)] = f
    return f


def remove_intrin_lowering(op_name, target):
    """Drops the rule for `op_name` on `target` (if any)."""
    _rules.pop((_op_name(op_name), target.split()[0]), None)


class _Lower(Mutator):
    def __init__(self, kind):
        self.kind = kind

    def visit_Call(self, e):
        e = self.generic_visit(e)
        f = None if e.extern else _rules.get((e.name, self.kind))
        if f is None:
            return e
        try:
            out = f(e)
        except TdslError:
            raise
        except Exception as ex:
            raise LoweringError(f"the lowering rule for '{e.name}' on '{self.kind}' raised "
                                f"{type(ex).__name__}: {ex}") from ex
        out = E.convert(out) if not isinstance(out, E.Expr) else out
        if not isinstance(out, E.Expr) or out.dtype != e.dtype:
            raise LoweringError(f"the lowering rule for '{e.name}' on '{self.kind}' returned "
                                f"{out!r}; it must return an expression of type {e.dtype}")
        return out


def lower_intrinsics(func: S.PrimFunc, kind: str) -> S.PrimFunc:
    """`func` with the rules of target `kind` applied (once: a rule's result is not
    lowered again, so a rule may return the call it was given). Runs before the GPU
    passes, which split the body into kernels."""
    out = func.with_body(_Lower(kind).visit(func.body)) \
        if any(k == kind for _, k in _rules) else func.with_body(func.body)
    out.attrs["intrinsics_lowered_for"] = kind
    return out


def digest() -> str:
    """A digest of the registered rules, by their results on probe calls."""
    if not _rules:
        return ""
    h = hashlib.sha256()
    for (name, kind), f in sorted(_rules.items(), key=lambda kv: kv[0]):
        h.update(f"{name}|{kind}".encode())
        for dtype in ("float32", "float64", "float16"):
            probe = E.Call(name, (E.Var("x", dtype), E.Var("y", dtype)), dtype)
            try:
                h.update(repr(f(probe)).encode())
            except Exception as ex:     # a rule for one arity or dtype only: its failure is its answer
                h.update(f"raised {type(ex).__name__}".encode())
    return h.hexdigest()
