"""The cuda / opencl schedule of a group (also the emulation of one on "c"), chosen from the
registry (registry.py, implementations.py): a conv, dense or matmul with its epilogue as
the auto-scheduler's tiled contraction (contraction.py; a column-GEMM conv, conv_gemm.py,
has no conv stage and takes the auto-scheduler's rules); elementwise chains, pools and
depthwise convs one output per thread, the reductions that make one output computed by
its thread (flat.py); every other group (softmax, layer norm, global pools, reductions:
rows across threads) the auto-scheduler's GPU rules (fallback.py), like groups without a
hand strategy on the CPU."""
from __future__ import annotations

from ....target import Target
from .. import registry

THREADS = 256     # per block for one-output-per-thread kernels: 8 warps, many blocks per SM


def gpu_facts(target):
    """The target GPU schedules are sized for; the emulation of GPU schedules on "c" stands
    for a CUDA device."""
    return target if target.is_gpu else Target("cuda")


def schedule_gpu(s, out, g):
    registry.schedule(s, out, g, "gpu")
