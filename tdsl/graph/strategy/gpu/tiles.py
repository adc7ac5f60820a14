"""Tile sizes of the GPU strategies, from the target's facts (threads and shared memory per
block). A plan gives every output axis (threads, outputs per thread), or None for an axis
that only spreads over blocks (batch)."""
from __future__ import annotations

from ....target import GPU_KINDS, Target

REG = 4          # outputs per thread along M and along the innermost N axis: a 4x4 tile
BLOCK_M = 16     # threads along M: 64 output channels (rows of the GEMM) per block
BLOCK_N = 16     # threads along N: 64 pixels (or columns) per block
FLOAT = 4


def gpu_facts(target):
    """The facts a GPU schedule is sized by; the emulation of GPU schedules on "c" stands
    for a CUDA device."""
    return target if target.kind in GPU_KINDS else Target("cuda")


def _cdiv(a, b):
    return -(-a // b)


def _even_threads(extent, per, cap):
    """Threads along an axis of `extent` outputs, `per` each, at most `cap`: as few blocks
    as the cap allows, then the threads that cover the extent evenly across them."""
    need = _cdiv(extent, per)
    return _cdiv(need, _cdiv(need, cap))


def conv_plan(out_shape, groups, target):
    """Plan of an NCHW conv: output channels along M, a block of output rows x columns
    along N (a thread REG columns of one row)."""
    N, CO, OH, OW = out_shape
    cog = CO // groups
    rm = REG if cog >= REG else 1
    tm = _even_threads(cog, rm, BLOCK_M)
    if groups > 1:
        # a channel tile must not straddle two groups: the input slice it reads is one group's
        rm = max(r for r in (REG, 2, 1) if cog % r == 0)
        tm = max(t for t in range(1, _even_threads(cog, rm, BLOCK_M) + 1) if cog % (t * rm) == 0)
    rx = min(REG, OW)
    tx = _even_threads(OW, rx, BLOCK_N)
    ty = min(OH, max(1, BLOCK_N // tx))
    facts = gpu_facts(target)
    while ty > 1 and tm * tx * ty > facts.max_threads_per_block:
        ty = max(1, ty // 2)
    return [None, (tm, rm), (ty, 1), (tx, rx)]


def gemm_plan(out_shape, target):
    """Plan of a (batch...) M x N matmul or dense output."""
    *batch, M, N = out_shape
    rm = REG if M >= REG else 1
    tm = _even_threads(M, rm, BLOCK_M)
    # a matrix-vector product (a batch-1 dense) is bound by reading the weights: a warp of
    # single columns per block spreads them over as many blocks as there are 32 columns
    rn = REG if M >= REG else 1
    tn = _even_threads(N, rn, BLOCK_N if M >= REG else 32)
    tn = min(tn, gpu_facts(target).max_threads_per_block // tm)
    return [None] * len(batch) + [(tm, rm), (tn, rn)]


def reduction_step(first_extent, bytes_per_unit, target, most=16):
    """How much of the first reduction axis one step stages in shared memory: the most that
    keeps the step's tiles within half the block's shared memory (two blocks per SM)."""
    budget = gpu_facts(target).shared_memory_bytes // 2
    kt = max(1, min(most, first_extent, budget // max(bytes_per_unit, 1)))
    for k in range(kt, 0, -1):      # a divisor leaves no ragged last step to guard
        if first_extent % k == 0 and 2 * k > kt:
            return k
    return kt
