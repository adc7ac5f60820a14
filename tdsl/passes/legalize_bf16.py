"""legalize_bf16: arithmetic on bfloat16 becomes float32 arithmetic between conversions.

No backend computes in bfloat16 (x86 has only dot products and conversions; C, CUDA's
portable path and OpenCL have no bfloat16 arithmetic), so after this pass a bfloat16 value
is only loaded, stored, selected, or converted to and from float32. Each operation rounds
its float32 result back to bfloat16, as numpy does with `ml_dtypes.bfloat16` arrays, so a
definition means the same everywhere; a definition that wants float32 accumulation says
so with casts (`A[i].astype("float32")`), and then only the loads are converted.
"""
from __future__ import annotations

from ..ir import expr as E
from ..ir.visitor import Mutator

BF16, F32 = "bfloat16", "float32"


def _f32(e):
    return E.Cast(F32, e) if e.dtype == BF16 else e


class _Legalize(Mutator):
    def visit_FloatImm(self, e):
        return E.Cast(BF16, E.FloatImm(e.value, F32)) if e.dtype == BF16 else e

    def visit_Cast(self, e):
        v = self.visit(e.value)
        if v.dtype == e.dtype:
            return v
        if BF16 in (e.dtype, v.dtype) and F32 not in (e.dtype, v.dtype):
            return E.Cast(e.dtype, E.Cast(F32, v))      # every other conversion via float32
        return e if v is e.value else E.Cast(e.dtype, v)

    def _via_f32(self, e, fields):
        node = self.generic_visit(e)
        if not any(getattr(node, f).dtype == BF16 for f in fields):
            return node
        wide = node.__class__(**{**{f: getattr(node, f) for f in node.__dataclass_fields__},
                                 **{f: _f32(getattr(node, f)) for f in fields}})
        return E.Cast(BF16, wide) if e.dtype == BF16 else wide

    def generic_binary(self, e):
        return self._via_f32(e, ("a", "b"))

    visit_Add = visit_Sub = visit_Mul = visit_Div = visit_FloorDiv = visit_FloorMod = \
        visit_Min = visit_Max = visit_EQ = visit_NE = visit_LT = visit_LE = visit_GT = \
        visit_GE = generic_binary

    def visit_Call(self, e):
        if e.name == "address_of":      # a tensor intrinsic's pointer, not a value
            return e
        node = self.generic_visit(e)
        if not any(a.dtype == BF16 for a in node.args) and node.dtype != BF16:
            return node
        args = tuple(_f32(a) for a in node.args)
        wide = E.Call(node.name, args, F32 if node.dtype == BF16 else node.dtype)
        return E.Cast(BF16, wide) if node.dtype == BF16 else wide


def legalize_bf16(func):
    body = _Legalize().visit(func.body)
    return func if body is func.body else func.with_body(body)
