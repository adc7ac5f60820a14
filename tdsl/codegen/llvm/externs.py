"""Calls out of generated code: `ExternCall` statements (the stages of `tdsl.extern`,
through the registry's `tdsl_arg` ABI, `tdsl.runtime.extern`) and `call_pure_extern`
expressions (a C function by its own name, per lane in vector code).

A failed extern call does not return at once: heap buffers allocated around it would
leak. It sets the function's status to `EXTERN_FAILED`, which the function returns at its
end, and the runtime raises with the message the callee left (`extern.take_error`)."""
from __future__ import annotations

from llvmlite import ir

from ... import dtype as dt
from ...errors import BuildError
from ...runtime import extern
from .types import I32, I64, PTR, elem_type, lanes_of, scalar_type

_ARG = ir.LiteralStructType([PTR, PTR, I32, I32])     # tdsl_arg


def _status(em):
    """The function's status slot (0 until an extern call fails)."""
    slot = em.extern_status
    if slot is None:
        slot = em.alloca_builder.alloca(I32, name="extern_status")
        em.alloca_builder.store(ir.Constant(I32, 0), slot)
        em.extern_status = slot
    return slot


def emit_call(em, s):
    """Emits ExternCall `s`: the tdsl_arg array on the stack, the call, the status."""
    entry = extern.lookup(s.name)
    em.mb.externs.setdefault(s.name, entry)
    b, ab = em.builder, em.alloca_builder
    n = len(s.args)
    arr = ab.alloca(ir.ArrayType(_ARG, max(n, 1)), name="extern_args")
    for k, (a, shape) in enumerate(zip(s.args, s.shapes)):
        if shape is not None:
            data = em.bufs.get(a)
            if data is None:
                raise BuildError(f"extern call '{s.name}': buffer {a.name!r} has no storage here")
            dims = ab.alloca(ir.ArrayType(I64, max(len(shape), 1)), name="extern_shape")
            for d, size in enumerate(shape):
                p = b.gep(dims, [ir.Constant(I32, 0), ir.Constant(I32, d)], inbounds=True)
                b.store(em.to_i64(em.expr(size), size.dtype), p)
            fields = (data, dims, ir.Constant(I32, len(shape)), a.dtype)
        else:
            is_float = dt.is_float(a.dtype)
            slot = ab.alloca(ir.DoubleType() if is_float else I64, name="extern_scalar")
            v = em.expr(a)
            v = em.cast(v, a.dtype, "float64") if is_float else em.to_i64(v, a.dtype)
            b.store(v, slot)
            fields = (slot, ir.Constant(PTR, None), ir.Constant(I32, -1), a.dtype)
        rec = b.gep(arr, [ir.Constant(I32, 0), ir.Constant(I32, k)], inbounds=True)
        values = fields[:3] + (ir.Constant(I32, extern.DTYPE_CODES[fields[3]]),)
        for f, v in enumerate(values):
            b.store(v, b.gep(rec, [ir.Constant(I32, 0), ir.Constant(I32, f)], inbounds=True))
    fn = em.mb.declare(entry.symbol, I32, [PTR, I32])
    rc = b.call(fn, [arr, ir.Constant(I32, n)])
    failed = b.icmp_signed("!=", rc, ir.Constant(I32, 0))
    slot = _status(em)
    b.store(b.select(failed, ir.Constant(I32, extern.EXTERN_FAILED), b.load(slot)), slot)


def emit_pure(em, e, args):
    """A `call_pure_extern` Call: the C function `e.name` on scalars, once per lane on
    vectors (LLVM cannot widen an unknown function)."""
    ret = scalar_type(e.dtype)
    fn = em.mb.declare(e.name, ret, [elem_type(a.type) for a in args])
    lanes = max(lanes_of(a) for a in args)
    b = em.builder
    if lanes == 1:
        return b.call(fn, list(args))
    out = ir.Constant(ir.VectorType(ret, lanes), ir.Undefined)
    for i in range(lanes):
        idx = ir.Constant(I32, i)
        lane = [b.extract_element(a, idx) if lanes_of(a) > 1 else a for a in args]
        out = b.insert_element(out, b.call(fn, lane), idx)
    return out
