"""A bfloat16 / float16 GEMM on Hopper's warpgroup MMA (`wgmma.mma_async`, sm_90a): C
(float32) = A @ B with `tdsl.autosched.gpu_tensorize.wgmma_schedule` (two warpgroups of
64 x 128 each a block, k steps of 64 through 128-byte-swizzled shared tiles).

Built for "c", the instruction is emulated lane by lane, reading A and B as its matrix
descriptors describe them (through the swizzle of the address bits), so the schedule, the
layouts and the descriptors are checked against numpy anywhere; whether the hardware
reads the same is what `bench/wgmma_probe.py` settles on a Hopper GPU. The CUDA build
compiles for sm_90a only.
"""
from __future__ import annotations

import tdsl
from tdsl.autosched.gpu_tensorize import WG_K, wgmma_schedule
from tdsl.examples.mma_gemm import definition, reference  # noqa: F401  (one definition)


def schedule(M, N, K, dtype="bfloat16", warpgroups=2, n_blocks=2, stages=3):
    """(schedule, args) of C = A @ B, M a multiple of 64 warpgroups, N of 64 n_blocks, K of
    64."""
    bm, bn = 64 * warpgroups, 64 * n_blocks
    if M % bm or N % bn or K % WG_K:
        raise tdsl.ScheduleError(f"wgmma GEMM: M, N, K = {M}, {N}, {K} must be multiples of "
                                 f"the block tile {bm} x {bn} and of the k step {WG_K}")
    A, B, C = definition(M, N, K, dtype)
    s = tdsl.create_schedule(C)
    wgmma_schedule(s, A, B, C, dtype, warpgroups, n_blocks, stages)
    return s, [A, B, C]
