"""Integer division for the LLVM backend, scalar or vector: Python's floor semantics
(`//`, `%`), and C's truncating remainder (`fmod` on integers).

A constant divisor takes the cheap path (shifts and masks for powers of two, one `sdiv`
plus a correction otherwise). A variable divisor is guarded: division by zero gives 0, as
numpy does, and `INT_MIN / -1` (which traps on x86) is computed as a negation.
"""
from __future__ import annotations

from ... import dtype as dt
from ...ir import expr as E
from .types import int_const_value, lanes_of


def _divisor(b, bexpr):
    return bexpr.value if isinstance(bexpr, E.IntImm) else int_const_value(b)


def floordiv(em, a, b, dtype, bexpr=None):
    bl = em.builder
    lanes = lanes_of(a)
    c = _divisor(b, bexpr)
    signed = dt.is_signed(dtype)
    ca = int_const_value(a)
    if c is not None and ca is not None and c != 0:
        return em.const(dtype, ca // c if signed else (ca % (1 << dt.bits(dtype))) // c)
    if c is not None and c > 0 and c & (c - 1) == 0:
        k = c.bit_length() - 1
        if k == 0:
            return a
        sh = em.const(dtype, k, lanes)
        return bl.ashr(a, sh) if signed else bl.lshr(a, sh)
    if not signed:
        if c is not None and c != 0:
            return bl.udiv(a, b)
        zero = em.const(dtype, 0, lanes)
        is0 = bl.icmp_unsigned("==", b, zero)
        safe = bl.select(is0, em.const(dtype, 1, lanes), b)
        return bl.select(is0, zero, bl.udiv(a, safe))
    if c is not None and c not in (0, -1):
        q = bl.sdiv(a, b)
        r = bl.srem(a, b)
        zero = em.const(dtype, 0, lanes)
        if c > 0:
            adj = bl.icmp_signed("<", r, zero)
        else:
            adj = bl.icmp_signed(">", r, zero)
        return bl.sub(q, bl.zext(adj, q.type))
    # general divisor: guard 0 (-> 0, as numpy) and -1 (INT_MIN / -1 traps)
    zero = em.const(dtype, 0, lanes)
    one = em.const(dtype, 1, lanes)
    m1 = em.const(dtype, -1, lanes)
    is0 = bl.icmp_signed("==", b, zero)
    ism1 = bl.icmp_signed("==", b, m1)
    safe = bl.select(bl.or_(is0, ism1), one, b)
    q = bl.sdiv(a, safe)
    r = bl.srem(a, safe)
    adj = bl.and_(bl.icmp_signed("!=", r, zero),
                  bl.icmp_signed("<", bl.xor(r, safe), zero))
    q = bl.sub(q, bl.zext(adj, q.type))
    q = bl.select(ism1, bl.sub(zero, a), q)
    return bl.select(is0, zero, q)


def floormod(em, a, b, dtype, bexpr=None):
    bl = em.builder
    lanes = lanes_of(a)
    c = _divisor(b, bexpr)
    signed = dt.is_signed(dtype)
    ca = int_const_value(a)
    if c is not None and ca is not None and c != 0:
        return em.const(dtype, ca % c if signed else (ca % (1 << dt.bits(dtype))) % c)
    if c is not None and c > 0 and c & (c - 1) == 0:
        return bl.and_(a, em.const(dtype, c - 1, lanes))
    zero = em.const(dtype, 0, lanes)
    if not signed:
        if c is not None and c != 0:
            return bl.urem(a, b)
        is0 = bl.icmp_unsigned("==", b, zero)
        safe = bl.select(is0, em.const(dtype, 1, lanes), b)
        return bl.select(is0, zero, bl.urem(a, safe))
    if c is not None and c not in (0, -1):
        r = bl.srem(a, b)
        adj = bl.icmp_signed("<", r, zero) if c > 0 else bl.icmp_signed(">", r, zero)
        return bl.add(r, bl.select(adj, b, zero))
    is0 = bl.icmp_signed("==", b, zero)
    ism1 = bl.icmp_signed("==", b, em.const(dtype, -1, lanes))
    bad = bl.or_(is0, ism1)
    safe = bl.select(bad, em.const(dtype, 1, lanes), b)
    r = bl.srem(a, safe)
    adj = bl.and_(bl.icmp_signed("!=", r, zero),
                  bl.icmp_signed("<", bl.xor(r, safe), zero))
    r = bl.add(r, bl.select(adj, safe, zero))
    return bl.select(bad, zero, r)
