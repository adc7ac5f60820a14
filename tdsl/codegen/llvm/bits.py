"""Integer intrinsics for the LLVM backend, scalar or vector: bitwise operations, shifts,
popcount, clz, and the truncating remainder (`fmod` on integers).

Shifts follow numpy, whose results are defined for every amount: an amount outside
[0, bits) shifts everything out (0, or the sign for an arithmetic right shift), where a
bare LLVM `shl`/`ashr` would give poison. A constant amount in range needs no check.
"""
from __future__ import annotations

from ... import dtype as dt
from .types import I1, int_const_value, lanes_of, type_suffix

INT_OPS = ("bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not", "shift_left",
           "shift_right", "popcount", "clz")


def emit(em, name, args, e):
    """`name` on integer (or bool) LLVM values `args` for the Call `e`."""
    dtype = e.args[0].dtype
    b = em.builder
    x = args[0]
    if name == "bitwise_not":
        return b.xor(x, em.const(dtype, -1 if dtype != "bool" else 1, lanes_of(x)))
    if name == "popcount":
        fn = em.mb.intrinsic(f"llvm.ctpop.{type_suffix(x.type)}", x.type, [x.type])
        return b.call(fn, [x])
    if name == "clz":
        fn = em.mb.intrinsic(f"llvm.ctlz.{type_suffix(x.type)}", x.type, [x.type, I1])
        n = b.call(fn, [x, I1(0)])      # i1 0: the width for 0, not poison
        return em.cast(n, dtype, e.dtype)   # (a count in [0, bits]: no sign issue)
    y = em.cast(args[1], e.args[1].dtype, dtype)
    x, y = em.unify(x, y)
    if name == "bitwise_and":
        return b.and_(x, y)
    if name == "bitwise_or":
        return b.or_(x, y)
    if name == "bitwise_xor":
        return b.xor(x, y)
    return _shift(em, name, x, y, dtype)


def _shift(em, name, x, y, dtype):
    b = em.builder
    bits = dt.bits(dtype)
    lanes = lanes_of(x)
    signed = dt.is_signed(dtype)
    c = int_const_value(y)
    if name == "shift_left":
        op = b.shl
    else:
        op = b.ashr if signed else b.lshr
    if c is not None and 0 <= c % (1 << bits) < bits:
        return op(x, y)
    if c is not None:       # a constant amount out of range: everything shifted out
        if name == "shift_right" and signed:
            return b.ashr(x, em.const(dtype, bits - 1, lanes))
        return em.const(dtype, 0, lanes)
    out_of_range = b.icmp_unsigned(">=", y, em.const(dtype, bits, lanes))
    safe = b.select(out_of_range, em.const(dtype, 0, lanes), y)
    r = op(x, safe)
    if name == "shift_right" and signed:
        fill = b.ashr(x, em.const(dtype, bits - 1, lanes))
    else:
        fill = em.const(dtype, 0, lanes)
    return b.select(out_of_range, fill, r)


def truncmod(em, a, b_, dtype):
    """C's `a % b` on integers: the sign of a; 0 when b is 0 (as numpy.fmod) and for
    INT_MIN % -1 (which traps on x86)."""
    b = em.builder
    lanes = lanes_of(a)
    zero = em.const(dtype, 0, lanes)
    one = em.const(dtype, 1, lanes)
    if not dt.is_signed(dtype):
        is0 = b.icmp_unsigned("==", b_, zero)
        return b.select(is0, zero, b.urem(a, b.select(is0, one, b_)))
    bad = b.or_(b.icmp_signed("==", b_, zero), b.icmp_signed("==", b_, em.const(dtype, -1, lanes)))
    return b.select(bad, zero, b.srem(a, b.select(bad, one, b_)))
