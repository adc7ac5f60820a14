"""The machine operations tensor intrinsics call (`tdsl.te.tensor_intrin.call`), as LLVM
x86 intrinsics on the pointers `Region.access_ptr()` gives.

Each takes (accumulator block, A block, B block): the accumulator is 16 lanes read and
written in place; A is one 32-bit group broadcast to every lane (4 uint8 or 2 bfloat16 of
a row of A); B is 16 groups (a VNNI-packed block of the weights). A target without the
extension gets a BuildError naming it, never an instruction that faults at run time.
"""
from __future__ import annotations

from llvmlite import ir

from ...errors import BuildError
from ...ir import expr as E
from .memory import elem_ptr, flat_index
from .types import F32, I32


class _BFloat(ir.Type):
    """LLVM's `bfloat` (llvmlite has no such type); only the operand type of dpbf16ps."""

    def _to_string(self):
        return "bfloat"

    def __eq__(self, other):
        return isinstance(other, _BFloat)

    def __hash__(self):
        return hash("bfloat")


V16I32 = ir.VectorType(I32, 16)
V16F32 = ir.VectorType(F32, 16)
V32BF16 = ir.VectorType(_BFloat(), 32)

# name -> (LLVM intrinsic, accumulator type, operand type, the Target fact it needs)
OPS = {
    "x86.vpdpbusd": ("llvm.x86.avx512.vpdpbusd.512", V16I32, V16I32, "has_vnni",
                     "AVX512-VNNI"),
    "x86.vdpbf16ps": ("llvm.x86.avx512bf16.dpbf16ps.512", V16F32, V32BF16, "has_bf16",
                      "AVX512-BF16"),
}


def _ptr(em, e):
    if not (isinstance(e, E.Call) and e.name == "address_of"):
        raise BuildError(f"{e} is not a pointer (Region.access_ptr())")
    load = e.args[0]
    return elem_ptr(em, load.buffer, em.index(flat_index(load, load.indices)))


def emit(em, e):
    llvm_name, acc_t, op_t, fact, what = OPS[e.name]
    desc = em.mb.target.description
    if not getattr(desc, fact):
        raise BuildError(f"{e.name} needs {what}, which target '{desc}' (cpu {desc.cpu}) "
                         "lacks; build for a CPU that has it (e.g. -mcpu=znver5, "
                         "sapphirerapids) or schedule without this tensor intrinsic")
    if em.vec is not None:
        raise BuildError(f"{e.name} cannot sit in a vectorized loop")
    b = em.builder
    acc_p, a_p, b_p = (_ptr(em, x) for x in e.args)
    acc = b.load(acc_p, typ=acc_t, align=4)
    word = b.load(a_p, typ=I32, align=1)
    a = b.bitcast(em.splat(word, 16), op_t)
    w = b.bitcast(b.load(b_p, typ=V16I32, align=1), op_t)
    fn = em.mb.module.globals.get(llvm_name)
    if fn is None:
        fn = ir.Function(em.mb.module, ir.FunctionType(acc_t, [acc_t, op_t, op_t]), llvm_name)
    b.store(b.call(fn, [acc, a, w]), acc_p, align=4)
    return ir.Constant(I32, 0)
