"""bfloat16 in LLVM IR: an `i16` holding the upper half of a float32.

llvmlite has no `bfloat` type, and LLVM's own bfloat conversions become library calls on
CPUs without AVX512-BF16; these shifts vectorize everywhere. The rounding (nearest even,
NaN kept quiet) is `tdsl.dtype.float32_to_bfloat16`'s.
"""
from __future__ import annotations

from llvmlite import ir

from .types import F32, I32, with_elem


def _c(t, value):
    return ir.Constant(t, [value] * t.count) if isinstance(t, ir.VectorType) else ir.Constant(t, value)


def to_f32(b, v):
    """bfloat16 bits (i16 or a vector of them) -> float32."""
    u = b.zext(v, with_elem(v.type, I32))
    return b.bitcast(b.shl(u, _c(u.type, 16)), with_elem(v.type, F32))


def from_f32(b, v):
    """float32 (or a vector) -> bfloat16 bits, rounded to nearest even."""
    it = with_elem(v.type, I32)
    u = b.bitcast(v, it)
    odd = b.and_(b.lshr(u, _c(it, 16)), _c(it, 1))
    rounded = b.lshr(b.add(u, b.add(odd, _c(it, 0x7FFF))), _c(it, 16))
    quiet = b.or_(b.lshr(u, _c(it, 16)), _c(it, 0x40))
    r = b.select(b.fcmp_unordered("uno", v, v), quiet, rounded)
    return b.trunc(r, with_elem(v.type, ir.IntType(16)))
