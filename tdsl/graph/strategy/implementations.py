"""The shipped implementations of graph operators (TVM's x86.py and cuda.py strategies), one
entry each, highest priority first. Each module named here holds its `applies`, compute
and schedule; see registry.py for how they are chosen.

CPU definitions (family "cpu", the llvm and C kernels with weights packed at build time):
a float conv of groups 1 is a mat-vec, a row conv, a 1x1 GEMM or the blocked NCHW[x]c
conv (conv_choice.conv_path picks one), with weights that are kernel inputs the blocked
conv packing them per call (conv_runtime.py), a conv's weight adjoint a GEMM per tap
(conv_wgrad.py), a depthwise one vectors of partial sums per tap
(conv_wgrad_depthwise.py); then grouped convs, then the depthwise conv with a column
stride, then pools and the max pool's adjoint (pool_grad.py); whatever none takes,
topi's definition. CPU schedules: the
anchor's, else resize's or the direct conv's (found by their stages' tags), else the
auto-scheduler's. GPU (family "gpu"): convs as a column GEMM, topi's definitions
otherwise; schedules: the tiled contraction, one output per thread, or the
auto-scheduler's rules."""
from __future__ import annotations

from . import fallback
from .cpu import (attention, conv1x1, conv_blocked, conv_direct, conv_grouped, conv_int8, conv_runtime, conv_spatial,
                  conv_wgrad, conv_wgrad_depthwise, dense, matmul_int8, pool, pool_grad, resize, squeeze)
from .cpu.conv_choice import fast_conv, on_input, path_is
from .gpu import contraction, conv_gemm, flat
from .registry import Implementation, register

DEFINITION = 30         # the CPU's own definitions with their schedules
GROUPED = 20            # grouped convs: after the definitions of groups 1
STRIDED = 15            # depthwise convs with a column stride, weights not constant
OTHER = 10              # operators with one definition of their own
TAGGED = 5              # schedules of the groups no definition anchors, by their stages' tags
FALLBACK = 0            # topi's definitions, the auto-scheduler's rules

CONV = ("nn.conv2d", "nn.conv3d")

for impl in [
    Implementation("conv2d_matvec", DEFINITION, ("nn.conv2d",), "cpu", path_is("matvec"),
                   on_input(squeeze.conv_matvec), {"cpu": squeeze.schedule_matvec_group}, symbolic=True),
    Implementation("conv2d_rows", DEFINITION, ("nn.conv2d",), "cpu", path_is("rows"),
                   on_input(conv_spatial.conv2d_rows), {"cpu": conv_spatial.schedule}, symbolic=True),
    Implementation("conv2d_1x1", DEFINITION, ("nn.conv2d",), "cpu", path_is("1x1"),
                   on_input(conv1x1.conv1x1), {"cpu": conv1x1.schedule}, symbolic=True),
    Implementation("conv_blocked", DEFINITION, CONV, "cpu", path_is("blocked"),
                   on_input(conv_blocked.conv_padded), {"cpu": conv_blocked.schedule}, symbolic=True),
    Implementation("conv_transpose_blocked", DEFINITION, ("nn.conv2d_transpose", "nn.conv3d_transpose"), "cpu",
                   fast_conv, on_input(conv_blocked.conv_transpose), {"cpu": conv_blocked.schedule}, symbolic=True),
    Implementation("conv2d_blocked", DEFINITION, ("nn.conv2d_blocked", "nn.conv3d_blocked"), "cpu", fast_conv,
                   on_input(conv_blocked.conv2d_blocked), {"cpu": conv_blocked.schedule}, symbolic=True),
    Implementation("conv_runtime_weights", DEFINITION, conv_runtime.OPS, "cpu", conv_runtime.applies,
                   conv_runtime.compute, {"cpu": conv_runtime.schedule}),
    Implementation("conv_weight_grad", DEFINITION, ("nn.conv_weight_grad",), "cpu", conv_wgrad.applies,
                   conv_wgrad.compute, {"cpu": conv_wgrad.schedule}),
    Implementation("depthwise_weight_grad", DEFINITION, ("nn.conv_weight_grad",), "cpu",
                   conv_wgrad_depthwise.applies, conv_wgrad_depthwise.compute,
                   {"cpu": conv_wgrad_depthwise.schedule}),
    Implementation("depthwise2d_blocked", DEFINITION, ("nn.conv2d_blocked",), "cpu", conv_blocked.applies_depthwise,
                   conv_blocked.depthwise2d_blocked, {"cpu": conv_blocked.schedule_depthwise}, symbolic=True),
    Implementation("qconv2d", DEFINITION, ("qnn.conv2d", "qnn.conv2d_blocked"), "cpu", conv_int8.applies,
                   conv_int8.qconv2d, {"cpu": conv_int8.schedule}),
    Implementation("qdepthwise2d_blocked", DEFINITION, ("qnn.conv2d_blocked",), "cpu", conv_int8.applies_depthwise,
                   conv_int8.qdepthwise, {"cpu": conv_blocked.schedule_depthwise}),
    Implementation("qmatmul_vnni", DEFINITION, ("qnn.matmul",), "cpu", matmul_int8.applies,
                   matmul_int8.qmatmul, {"cpu": matmul_int8.schedule}),
    Implementation("dense_packed", DEFINITION, ("nn.dense",), "cpu", dense.applies,
                   dense.dense_packed, {"cpu": dense.schedule}, symbolic=True),
    Implementation("conv2d_grouped", GROUPED, ("nn.conv2d", "qnn.conv2d"), "cpu", conv_grouped.applies,
                   conv_grouped.grouped_conv2d, {"cpu": conv_grouped.schedule}, conv_grouped.fits, symbolic=True),
    Implementation("depthwise2d_strided", STRIDED, ("nn.conv2d",), "cpu", conv_direct.applies_depthwise_strided,
                   conv_direct.depthwise_strided, symbolic=True),
    Implementation("pool2d_separable", OTHER, ("nn.max_pool2d", "nn.avg_pool2d"), "cpu", pool.applies,
                   pool.pool2d_sep, {"cpu": pool.schedule}, pool.fits, symbolic=True),
    Implementation("max_pool2d_grad", OTHER, ("nn.max_pool_grad",), "cpu", pool_grad.applies,
                   pool_grad.max_pool_grad, {"cpu": pool_grad.schedule}),
    Implementation("global_pool_blocked", OTHER, ("mean",), "cpu", squeeze.applies_blocked_pool,
                   squeeze.global_avg_pool_blocked, {"cpu": squeeze.schedule_global_pool_blocked}, symbolic=True),
    Implementation("global_pool", OTHER, ("nn.global_avg_pool",), "cpu", squeeze.applies_global_pool,
                   squeeze.global_avg_pool_fast, {"cpu": squeeze.schedule_global_pool}, symbolic=True),
    Implementation("conv2d_gemm", OTHER, ("nn.conv2d",), "gpu", lambda g, n: conv_gemm.applies(n),
                   conv_gemm.conv2d),
    Implementation("attention_short_keys", OTHER, ("nn.attention",), "cpu", attention.in_short_keys,
                   attention.short_keys, {"cpu": attention.schedule}, symbolic=True),
    Implementation("attention_one", TAGGED, schedules={"cpu": attention.schedule_one}, fits=attention.fits_one,
                   symbolic=True),
    Implementation("attention_blocked", TAGGED, schedules={"cpu": attention.schedule}, fits=attention.fits,
                   symbolic=True),
    Implementation("resize", TAGGED, schedules={"cpu": resize.schedule}, fits=resize.fits, symbolic=True),
    Implementation("conv_direct", TAGGED - 1, schedules={"cpu": conv_direct.schedule}, fits=conv_direct.fits, symbolic=True),
    Implementation("gpu_contraction", TAGGED, schedules={"gpu": contraction.schedule_group}, fits=contraction.fits),
    Implementation("gpu_flat", TAGGED - 1, schedules={"gpu": flat.schedule_group}, fits=flat.fits),
    Implementation("topi", FALLBACK, None, compute=fallback.define, symbolic=True),
    Implementation("auto", FALLBACK, schedules={"cpu": fallback.schedule_cpu, "gpu": fallback.schedule_gpu},
                   symbolic=True),
]:
    register(impl)
