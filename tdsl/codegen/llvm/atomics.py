"""Atomic stores (`BufferStore.atomic`, an update's `atomic()`) as LLVM atomic
instructions: `atomicrmw` add/fadd, min/max/umin/umax/fmin/fmax, and a `cmpxchg` loop for
a product. Monotonic ordering is enough: the updates only need each read-modify-write to
be indivisible; the thread pool's join orders them before anything reads the result."""
from __future__ import annotations

from llvmlite import ir

from ... import dtype as dt
from ...errors import BuildError
from ...ir.atomic import ATOMIC_DTYPES, atomic_operand
from .memory import elem_ptr, flat_index
from .types import scalar_type

_ORDER = "monotonic"


def _rmw_name(op, dtype):
    if dt.is_float(dtype):
        return {"add": "fadd", "min": "fmin", "max": "fmax"}.get(op)
    if op == "add":
        return "add"
    if op in ("min", "max"):
        return op if dt.is_signed(dtype) else "u" + op
    return None


def store(em, s):
    """Emits atomic store `s` (outside vector code: vectorized loops with one run
    serially, see `lanes.vector_legality`)."""
    buf = s.buffer
    if buf.dtype not in ATOMIC_DTYPES:
        raise BuildError(f"atomic update of '{buf.name}': {buf.dtype} has no atomic "
                         f"operations; use one of {', '.join(ATOMIC_DTYPES)}")
    bl = em.builder
    e = atomic_operand(s)
    val = em.cast(em.expr(e), e.dtype, buf.dtype)
    ptr = elem_ptr(em, buf, em.index(flat_index(s, s.indices)))
    name = _rmw_name(s.atomic, buf.dtype)
    if name is not None:
        bl.atomic_rmw(name, ptr, val, _ORDER)
        return
    # a product: compare and swap the bits until no other thread came in between
    t = scalar_type(buf.dtype, True)
    it = ir.IntType(dt.bits(buf.dtype))
    first = bl.load_atomic(ptr, _ORDER, dt.itemsize(buf.dtype), typ=it)
    pre = bl.block
    loop = em.new_block("atomic.cas")
    done = em.new_block("atomic.done")
    bl.branch(loop)
    bl.position_at_end(loop)
    old_bits = bl.phi(it)
    old_bits.add_incoming(first, pre)
    old = bl.bitcast(old_bits, t) if dt.is_float(buf.dtype) else old_bits
    new = bl.fmul(old, val) if dt.is_float(buf.dtype) else bl.mul(old, val)
    new_bits = bl.bitcast(new, it) if dt.is_float(buf.dtype) else new
    pair = bl.cmpxchg(ptr, old_bits, new_bits, _ORDER, _ORDER)
    seen = bl.extract_value(pair, 0)
    ok = bl.extract_value(pair, 1)
    old_bits.add_incoming(seen, bl.block)
    bl.cbranch(ok, done, loop)
    bl.position_at_end(done)
