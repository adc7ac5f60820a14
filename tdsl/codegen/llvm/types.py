"""LLVM types for tdsl dtypes, and small helpers over llvmlite values.

`bool` is `i1` in registers and one byte (`i8`) in memory; integer and bool scalar
parameters are passed as `i64`, float ones as `double` (see `abi_type`).
"""
from __future__ import annotations

import re

from llvmlite import ir

from ... import dtype as dt
from ...errors import BuildError

I1 = ir.IntType(1)
I8 = ir.IntType(8)
I32 = ir.IntType(32)
I64 = ir.IntType(64)
F32 = ir.FloatType()
PTR = ir.PointerType()
FLOATS = {"float16": ir.HalfType(), "float32": ir.FloatType(), "float64": ir.DoubleType()}
FAST_MATH = ("contract", "reassoc")     # fast-math for user arithmetic (no nnan/ninf)


def scalar_type(dtype: str, mem: bool = False):
    if dtype == "bool":
        return I8 if mem else I1
    if dtype in FLOATS:
        return FLOATS[dtype]
    if dtype == "bfloat16":     # bits only: see tdsl.codegen.llvm.bf16
        return ir.IntType(16)
    if dt.is_int(dtype):
        return ir.IntType(dt.bits(dtype))
    raise BuildError(f"the LLVM backend does not support dtype {dtype!r}")


def vec_type(dtype: str, lanes: int, mem: bool = False):
    t = scalar_type(dtype, mem)
    return t if lanes == 1 else ir.VectorType(t, lanes)


def abi_type(dtype: str):
    """How a scalar parameter of `dtype` is passed: double for floats, i64 otherwise."""
    return ir.DoubleType() if dt.is_float(dtype) else I64


def lanes_of(v) -> int:
    return v.type.count if isinstance(v.type, ir.VectorType) else 1


def elem_type(t):
    return t.element if isinstance(t, ir.VectorType) else t


def with_elem(t, e):
    """`t` with its (lane) element type replaced by `e`."""
    return ir.VectorType(e, t.count) if isinstance(t, ir.VectorType) else e


def type_suffix(t) -> str:
    """The overload suffix of an LLVM intrinsic: `f32`, `i8`, `v8f32`, ..."""
    if isinstance(t, ir.VectorType):
        return f"v{t.count}{type_suffix(t.element)}"
    if isinstance(t, ir.HalfType):
        return "f16"
    if isinstance(t, ir.FloatType):
        return "f32"
    if isinstance(t, ir.DoubleType):
        return "f64"
    if isinstance(t, ir.IntType):
        return f"i{t.width}"
    raise BuildError(f"no intrinsic suffix for type {t}")  # pragma: no cover


def int_const_value(v):
    """The Python value of an integer `ir.Constant`, else None."""
    if isinstance(v, ir.Constant) and isinstance(v.type, ir.IntType) \
            and isinstance(v.constant, int):
        return v.constant
    return None


def wrap(value: int, bits: int) -> int:
    """`value` wrapped to a signed `bits`-bit integer."""
    value &= (1 << bits) - 1
    return value - (1 << bits) if value >= 1 << (bits - 1) else value


def sanitize(name: str) -> str:
    s = re.sub(r"[^A-Za-z0-9_]", "_", name or "main")
    return s if s else "main"
