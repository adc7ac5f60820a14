"""Intrinsic lowering rules per target: TVM's `register_intrin_lowering`, applied.

`register_intrin_lowering("exp", "cuda", fn)` makes every `exp(...)` Call of a function
built for "cuda" become `fn(call)` before code generation (`lower_intrinsics`, the last
pass for that target); `fn` returns another expression (`exp2(x * log2(e))`,
`call_pure_extern("float32", "__expf", x)`) or the call itself to keep it. Op names may be
written as TVM writes them ("tir.exp"). The code generators' own mappings stay the
default; a rule only replaces them for its target. The rules are attributes of the ops
(`tdsl.ir.op`, where `register_intrin_lowering` lives); a user's op
(`register_op_attr` + `call_intrin`) left without a rule for the target is a
LoweringError here, not a code generator's failure.

The compile cache keys builds on `digest()`: each rule's result on probe calls, as the
fingerprint captures a reducer by its result, so a rule registered later, or another rule
in another process, never reuses a build made without it.
"""
from __future__ import annotations

import hashlib

from ..errors import LoweringError, TdslError
from ..ir import expr as E
from ..ir import stmt as S
from ..ir.op import (is_user_op, user_ops, lowering_rule, lowering_rules, register_intrin_lowering,
                     remove_intrin_lowering)
from ..ir.visitor import Mutator

__all__ = ["register_intrin_lowering", "remove_intrin_lowering", "lower_intrinsics", "digest"]


class _Lower(Mutator):
    def __init__(self, kind):
        self.kind = kind

    def visit_Call(self, e):
        e = self.generic_visit(e)
        f = None if e.extern else lowering_rule(e.name, self.kind)
        if f is None:
            if not e.extern and is_user_op(e.name):
                raise LoweringError(f"the intrinsic 'tir.{e.name}' has no lowering rule for "
                                    f"target '{self.kind}'; register one with tdsl.ir."
                                    f"register_intrin_lowering('tir.{e.name}', "
                                    f"target='{self.kind}', f=...)")
            return e
        try:
            out = f(e)
        except TdslError:
            raise
        except Exception as ex:
            raise LoweringError(f"the lowering rule for '{e.name}' on '{self.kind}' raised "
                                f"{type(ex).__name__}: {ex}") from ex
        out = E.convert(out) if not isinstance(out, E.Expr) else out
        if out is e and is_user_op(e.name):
            raise LoweringError(f"the lowering rule for 'tir.{e.name}' on '{self.kind}' kept "
                                f"the call (of type {e.dtype}), which no code generator knows; "
                                "it must return an expression the target can compute")
        if not isinstance(out, E.Expr) or out.dtype != e.dtype:
            raise LoweringError(f"the lowering rule for '{e.name}' on '{self.kind}' returned "
                                f"{out!r}; it must return an expression of type {e.dtype}")
        return out


def lower_intrinsics(func: S.PrimFunc, kind: str) -> S.PrimFunc:
    """`func` with the rules of target `kind` applied (once: a rule's result is not
    lowered again, so a rule may return the call it was given). Runs before the GPU
    passes, which split the body into kernels."""
    active = user_ops() or any(k in (kind, "default") for (_, k), _ in lowering_rules())
    out = func.with_body(_Lower(kind).visit(func.body) if active else func.body)
    out.attrs["intrinsics_lowered_for"] = kind
    return out


def digest() -> str:
    """A digest of the registered rules, by their results on probe calls."""
    rules = lowering_rules()
    if not rules:
        return ""
    h = hashlib.sha256()
    for (name, kind), f in rules:
        h.update(f"{name}|{kind}".encode())
        for dtype in ("float32", "float64", "float16"):
            probe = E.Call(name, (E.Var("x", dtype), E.Var("y", dtype)), dtype)
            try:
                h.update(repr(f(probe)).encode())
            except Exception as ex:     # a rule for one arity or dtype only: its failure is its answer
                h.update(f"raised {type(ex).__name__}".encode())
    return h.hexdigest()
