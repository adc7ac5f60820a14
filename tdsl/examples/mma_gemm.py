"""A bfloat16 / float16 GEMM on CUDA tensor cores: C (float32) = A @ B, every 16 x 8 x 16
block one `mma.sync` of a warp (`tdsl.intrin_cuda`).

A block of threads is a grid of warps (threadIdx.y, 32 lanes on threadIdx.x). Each warp
holds its tile of C in registers (`cache_write(C, "mma.accumulator")`, each lane only its
elements in the instruction's layout), zeroed by the fill before the k loop. Per k step all
the block's threads copy a tile of A and of B into shared memory (rows padded for
`ldmatrix`); each warp loads its A and B fragments from there with `ldmatrix` and runs
`mma.sync` over its tile (the tiles are taken from `stages` shared buffers in turn, the
next steps' copies in flight meanwhile); at the end it stores the tile to C from its
registers
(`tdsl.intrin_cuda.mma_store`). The schedule is `tdsl.autosched.gpu_tensorize.mma_schedule`,
the auto-scheduler's rule for such products. Built for "c", the same schedule runs with the
fill, the instruction and the store emulated lane by lane in the instruction's register
layout, which is how it is checked without a GPU.
"""
from __future__ import annotations

import numpy as np

import tdsl
from tdsl.autosched.gpu_tensorize import mma_schedule

MT, NT, KT = 16, 8, 16      # the instruction's block


def definition(M, N, K, dtype="bfloat16"):
    """C = A @ B, the casts saying that products and sums are float32."""
    A = tdsl.placeholder((M, K), dtype=dtype, name="A")
    B = tdsl.placeholder((K, N), dtype=dtype, name="B")
    k = tdsl.reduce_axis((0, K), name="k")
    C = tdsl.compute((M, N), lambda i, j: tdsl.sum(
        A[i, k].astype("float32") * B[k, j].astype("float32"), axis=k), name="C")
    return A, B, C


def schedule(M, N, K, dtype="bfloat16", warps=(2, 2), warp_tiles=(2, 2), k_step=32, stages=2):
    """`warps` (rows, columns) of warps a block, each accumulating `warp_tiles` (rows,
    columns) of 16 x 8 blocks of C in registers; `k_step` columns of A (rows of B) staged
    in shared memory at a time, in `stages` buffers taken in turn. (2, 2) warps of (4, 8)
    blocks, 128 x 128 a block, 4 stages, is what the auto-scheduler takes for large
    products on sm_80 and sm_90."""
    wm, wn = warp_tiles[0] * MT, warp_tiles[1] * NT
    bm, bn = warps[0] * wm, warps[1] * wn
    if M % bm or N % bn or K % k_step or k_step % KT:
        raise tdsl.ScheduleError(f"mma GEMM: M, N, K = {M}, {N}, {K} must be multiples of the "
                                 f"block tile {bm} x {bn} and of k_step {k_step} (itself a "
                                 f"multiple of {KT})")
    A, B, C = definition(M, N, K, dtype)
    s = tdsl.create_schedule(C)
    mma_schedule(s, A, B, C, dtype, warps, warp_tiles, k_step, stages=stages)
    return s, [A, B, C]


def inputs(M, N, K, dtype="bfloat16", seed=0):
    """Random A (M x K) and B (K x N) in `dtype` (bfloat16 as uint16 bits)."""
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((M, K)).astype(np.float32)
    b = rng.standard_normal((K, N)).astype(np.float32)
    if dtype == "bfloat16":
        return tdsl.nd.float32_to_bfloat16(a), tdsl.nd.float32_to_bfloat16(b)
    return a.astype(np.float16), b.astype(np.float16)


def reference(a, b):
    """numpy's float32 product of the bfloat16 / float16 inputs."""
    def f32(x):
        return tdsl.nd.bfloat16_to_float32(x) if x.dtype == np.uint16 else x.astype(np.float32)
    return f32(a) @ f32(b)
