"""The x86 tensor intrinsics tdsl ships: 16-lane dot products of AVX512-VNNI (uint8 x int8
into int32, 4 products a lane) and AVX512-BF16 (bfloat16 pairs into float32).

Both compute `C[i] += sum_k data[k] * kernel[i, k]` for i < 16: `data` is a few
consecutive elements of a row of A, broadcast; `kernel` is a 16 x (4 or 2) block of B
packed so that the products of one output lane are adjacent (B laid out
[N/16][K/4][16][4] for VNNI, [N/16][K/2][16][2] for BF16; `tdsl.examples.lowp_gemm`).
Asking for one on a target without the extension raises at once.
"""
from __future__ import annotations

from ..errors import ScheduleError
from ..target import as_target
from .compute import compute, placeholder, reduce_axis, sum as _sum
from .tensor_intrin import call, decl_tensor_intrin

LANES = 16


def _require(target, fact, what, name):
    t = as_target(target)
    if t.kind == "llvm" and not getattr(t, fact):
        raise ScheduleError(f"{name}: target '{t}' (cpu {t.cpu}) lacks {what}; use a CPU "
                            "that has it (-mcpu=znver5, sapphirerapids, ...) or the fp32/int32 "
                            "schedule without tensorize")


def _dot(name, a_dtype, b_dtype, acc, group, op, kernel_first):
    data = placeholder((group,), dtype=a_dtype, name="data")
    kernel = placeholder((LANES, group), dtype=b_dtype, name="kernel")
    k = reduce_axis((0, group), name="k")

    def product(i):
        d, w = data[k].astype(acc), kernel[i, k].astype(acc)
        return w * d if kernel_first else d * w     # tensorize matches the operand order
    C = compute((LANES,), lambda i: _sum(product(i), axis=k), name=name)
    return decl_tensor_intrin(
        C.op, lambda ins, outs: call(op, outs[0].access_ptr("rw"), ins[0].access_ptr(),
                                     ins[1].access_ptr(), dtype=acc),
        name=name, inputs=[data, kernel])


def dot_u8s8_int32(target=None, kernel_first=False):
    """`vpdpbusd`: 16 int32 lanes, each += 4 uint8 x int8 products (`kernel_first`: the
    definition it matches writes them int8 x uint8)."""
    _require(target, "has_vnni", "AVX512-VNNI", "dot_u8s8_int32")
    return _dot("dot_u8s8_int32", "uint8", "int8", "int32", 4, "x86.vpdpbusd", kernel_first)


def dot_bf16_float32(target=None, kernel_first=False):
    """`vdpbf16ps`: 16 float32 lanes, each += 2 bfloat16 x bfloat16 products (denormals
    flushed, as the instruction does; `kernel_first`: the definition it matches multiplies
    the kernel's element by the data's)."""
    _require(target, "has_bf16", "AVX512-BF16", "dot_bf16_float32")
    return _dot("dot_bf16_float32", "bfloat16", "bfloat16", "float32", 2, "x86.vdpbf16ps",
                kernel_first)
