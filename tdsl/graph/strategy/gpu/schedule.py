"""The cuda / opencl schedule of a group (also the emulation of one on "c"): a conv, dense
or matmul with its epilogue as one tiled GEMM kernel (contraction.py); softmax and layer
norm a block per row (rows.py); anything else (pools, depthwise convs, elementwise chains)
one output per thread, the reductions that make one output computed by its thread."""
from __future__ import annotations

from . import contraction, rows
from .flat import schedule_pointwise
from .tiles import gpu_facts

THREADS = 256     # per block for one-output-per-thread kernels: 8 warps, many blocks per SM


def schedule_gpu(s, out, g):
    red = contraction.anchor(out)
    if red is not None:
        return contraction.schedule(s, out, red, g.target)
    if rows.applies(out):
        return rows.schedule(s, out, min(THREADS, gpu_facts(g.target).max_threads_per_block))
    schedule_pointwise(s, out, min(THREADS, gpu_facts(g.target).max_threads_per_block))
