"""The cuda / opencl schedule of a group (also the emulation of one on "c"): a conv, dense
or matmul with its epilogue as the auto-scheduler's tiled contraction (contraction.py; a
column-GEMM conv, conv_gemm.py, has no conv stage and takes the auto-scheduler's rules);
elementwise chains, pools and depthwise convs one output per thread, the reductions that
make one output computed by its thread (flat.py); every other group (softmax, layer norm,
global pools, reductions: rows across threads) the auto-scheduler's GPU rules, like groups
without a hand strategy on the CPU."""
from __future__ import annotations

from ....autosched import apply_rules
from ....target import GPU_KINDS, Target
from . import contraction, flat

THREADS = 256     # per block for one-output-per-thread kernels: 8 warps, many blocks per SM


def gpu_facts(target):
    """The target GPU schedules are sized for; the emulation of GPU schedules on "c" stands
    for a CUDA device."""
    return target if target.kind in GPU_KINDS else Target("cuda")


def schedule_gpu(s, out, g):
    target = gpu_facts(g.target)
    if g.use_auto:
        red = contraction.anchor(out)
        if red is not None:
            g.explanation = contraction.schedule(s, out, red, target, g.auto_params)
            return
        if not flat.applies(out):
            g.explanation = apply_rules(s, target, g.auto_params)
            return
    flat.schedule_pointwise(s, out, min(THREADS, target.max_threads_per_block))
