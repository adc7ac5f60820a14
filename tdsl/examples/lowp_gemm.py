"""Low-precision GEMM schedules for the CPU: uint8 x int8 -> int32 on AVX512-VNNI and
bfloat16 x bfloat16 -> float32 on AVX512-BF16, each a register-blocked micro-kernel whose
innermost block is one dot-product instruction (`s[C].tensorize`, `tdsl.intrin_x86`).

The weights are packed once, as onnxruntime and oneDNN do for quantized networks: B (K x N)
becomes [N/16][K/g][16][g] (g = 4 uint8 or 2 bfloat16 per 32-bit lane), so one 64-byte load
feeds 16 output lanes. The tile of C held in registers comes from the target, as for the
float32 schedule (`tdsl.examples.gemm.register_blocked`). The micro-kernel is the
auto-scheduler's (`tdsl.autosched.cpu_tensorize`), which packs B inside the schedule on
every call instead.

Each function returns (schedule, [A, packed B, C]); `pack(b, dtype)` packs a numpy B.
"""
from __future__ import annotations

import numpy as np

import tdsl
from tdsl import tiling
from tdsl.autosched.cpu_tensorize import dot_micro_kernel
from tdsl.target import as_target

LANES = 16
# dtype of A and B -> (dtype of C, products per 32-bit lane, the intrinsic, B's dtype)
KINDS = {
    "uint8": ("int32", 4, tdsl.intrin_x86.dot_u8s8_int32, "int8"),
    "bfloat16": ("float32", 2, tdsl.intrin_x86.dot_bf16_float32, "bfloat16"),
}


def definition(M, N, K, dtype="uint8"):
    """C = A @ B with B packed; the casts say where the precision widens."""
    acc, g, _, b_dtype = KINDS[dtype]
    if N % LANES or K % g:
        raise tdsl.ScheduleError(f"low-precision GEMM: N must be a multiple of {LANES} and K "
                                 f"of {g}, got N={N}, K={K}")
    A = tdsl.placeholder((M, K), dtype=dtype, name="A")
    B = tdsl.placeholder((N // LANES, K // g, LANES, g), dtype=b_dtype, name="B")
    k = tdsl.reduce_axis((0, K), name="k")
    C = tdsl.compute((M, N), lambda m, n: tdsl.sum(
        A[m, k].astype(acc) * B[n // LANES, k // g, n % LANES, k % g].astype(acc), axis=k),
        name="C")
    return A, B, C


def pack(b, dtype="uint8"):
    """B (K x N, numpy) in the layout `definition` reads: [N/16][K/g][16][g]."""
    g = KINDS[dtype][1]
    K, N = b.shape
    return np.ascontiguousarray(b.reshape(K // g, g, N // LANES, LANES).transpose(2, 0, 3, 1))


def tile(M, N, dtype="uint8", target=None):
    """(rows, vectors of 16 lanes) of C kept in registers."""
    acc = KINDS[dtype][0]
    return tiling.register_tile(target, M, N, acc, whole_rows=True, whole_vecs=True)


def tensorized(M, N, K, dtype="uint8", target=None, mr=None, vecs=None):
    """The micro-kernel: an mr x (vecs*16) tile of C accumulates in registers while k runs
    over A's rows and B's packed panel, 16 lanes x g products per instruction."""
    acc, g, intrin, _ = KINDS[dtype]
    t = as_target(target)
    rows, nv = tile(M, N, dtype, t)
    mr, vecs = mr or rows, vecs or nv
    A, B, C = definition(M, N, K, dtype)
    s = tdsl.create_schedule(C)
    CC = s.cache_write(C, "local")
    no, mo = dot_micro_kernel(s, s[C], s[CC], mr, vecs, g, intrin(t))
    s[C].parallel(s[C].fuse(no, mo))
    return s, [A, B, C]


def reference(a, b, dtype="uint8"):
    """numpy's answer in the accumulation type."""
    acc = KINDS[dtype][0]
    if dtype == "bfloat16":
        return tdsl.nd.bfloat16_to_float32(a) @ tdsl.nd.bfloat16_to_float32(b)
    return a.astype(acc) @ b.astype(acc)
