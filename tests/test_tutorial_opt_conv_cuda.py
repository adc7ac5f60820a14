"""Apache TVM's tutorial "How to optimize convolution on GPU"
(gallery/how_to/optimize_operators/opt_conv_cuda.py, v0.16), ported name for name
(`tdsl.` for `te.` and `tvm.tir.`) at small sizes, built with bounds_check=True: on the C
emulation and OpenCL it must match numpy and touch no memory outside any buffer; for CUDA
its source must compile to PTX."""
import numpy as np
import pytest

import tdsl
from tdsl.runtime import cuda as rcuda
from tdsl.runtime.ndarray import opencl

# The sizes of inputs and filters (the tutorial: batch 256, 256 -> 512 channels, 14 x 14);
# block_factor = 64 must divide batch and out_channel, step = 8 in_channel
batch = 64
in_channel = 16
out_channel = 64
in_size = 4
kernel = 3
pad = 1
stride = 1


def tutorial_schedule():
    # Algorithm
    A = tdsl.placeholder((in_size, in_size, in_channel, batch), name="A")
    W = tdsl.placeholder((kernel, kernel, in_channel, out_channel), name="W")
    out_size = (in_size - kernel + 2 * pad) // stride + 1
    # Pad input
    Apad = tdsl.compute(
        (in_size + 2 * pad, in_size + 2 * pad, in_channel, batch),
        lambda yy, xx, cc, nn: tdsl.if_then_else(
            tdsl.all(yy >= pad, yy - pad < in_size, xx >= pad, xx - pad < in_size),
            A[yy - pad, xx - pad, cc, nn],
            tdsl.const(0.0, "float32"),
        ),
        name="Apad",
    )
    # Create reduction variables
    rc = tdsl.reduce_axis((0, in_channel), name="rc")
    ry = tdsl.reduce_axis((0, kernel), name="ry")
    rx = tdsl.reduce_axis((0, kernel), name="rx")
    # Compute the convolution
    B = tdsl.compute(
        (out_size, out_size, out_channel, batch),
        lambda yy, xx, ff, nn: tdsl.sum(
            Apad[yy * stride + ry, xx * stride + rx, rc, nn] * W[ry, rx, rc, ff], axis=[ry, rx, rc]
        ),
        name="B",
    )

    # Designate the memory hierarchy
    s = tdsl.create_schedule(B.op)
    s[Apad].compute_inline()  # compute Apad inline
    AA = s.cache_read(Apad, "shared", [B])
    WW = s.cache_read(W, "shared", [B])
    AL = s.cache_read(AA, "local", [B])
    WL = s.cache_read(WW, "local", [B])
    BL = s.cache_write(B, "local")

    # tile consts
    tile = 8
    num_thread = 8
    block_factor = tile * num_thread
    step = 8
    vthread = 2

    # Get the GPU thread indices
    block_x = tdsl.thread_axis("blockIdx.x")
    block_y = tdsl.thread_axis("blockIdx.y")
    block_z = tdsl.thread_axis("blockIdx.z")
    thread_x = tdsl.thread_axis((0, num_thread), "threadIdx.x")
    thread_y = tdsl.thread_axis((0, num_thread), "threadIdx.y")
    thread_xz = tdsl.thread_axis((0, vthread), "vthread", name="vx")
    thread_yz = tdsl.thread_axis((0, vthread), "vthread", name="vy")

    # Split the workloads
    hi, wi, fi, ni = s[B].op.axis
    bz = s[B].fuse(hi, wi)
    by, fi = s[B].split(fi, factor=block_factor)
    bx, ni = s[B].split(ni, factor=block_factor)

    # Bind the iteration variables to GPU thread indices
    s[B].bind(bz, block_z)
    s[B].bind(by, block_y)
    s[B].bind(bx, block_x)

    tyz, fi = s[B].split(fi, nparts=vthread)  # virtual thread split
    txz, ni = s[B].split(ni, nparts=vthread)  # virtual thread split
    ty, fi = s[B].split(fi, nparts=num_thread)
    tx, ni = s[B].split(ni, nparts=num_thread)
    s[B].reorder(bz, by, bx, tyz, txz, ty, tx, fi, ni)

    s[B].bind(tyz, thread_yz)
    s[B].bind(txz, thread_xz)
    s[B].bind(ty, thread_y)
    s[B].bind(tx, thread_x)

    # Schedule BL local write
    s[BL].compute_at(s[B], tx)
    yi, xi, fi, ni = s[BL].op.axis
    ry, rx, rc = s[BL].op.reduce_axis
    rco, rci = s[BL].split(rc, factor=step)
    s[BL].reorder(rco, ry, rx, rci, fi, ni)

    # Attach computation to iteration variables
    s[AA].compute_at(s[BL], rx)
    s[WW].compute_at(s[BL], rx)
    s[AL].compute_at(s[BL], rci)
    s[WL].compute_at(s[BL], rci)

    # Schedule for A's shared memory load
    yi, xi, ci, ni = s[AA].op.axis
    ty, ci = s[AA].split(ci, nparts=num_thread)
    tx, ni = s[AA].split(ni, nparts=num_thread)
    _, ni = s[AA].split(ni, factor=4)
    s[AA].reorder(ty, tx, yi, xi, ci, ni)
    s[AA].bind(ty, thread_y)
    s[AA].bind(tx, thread_x)
    s[AA].vectorize(ni)  # vectorize memory load

    # Schedule for W's shared memory load
    yi, xi, ci, fi = s[WW].op.axis
    ty, ci = s[WW].split(ci, nparts=num_thread)
    tx, fi = s[WW].split(fi, nparts=num_thread)
    _, fi = s[WW].split(fi, factor=4)
    s[WW].reorder(ty, tx, yi, xi, ci, fi)
    s[WW].bind(ty, thread_y)
    s[WW].bind(tx, thread_x)
    s[WW].vectorize(fi)  # vectorize memory load
    return s, A, W, B


def reference(a, w):
    ap = np.pad(a, ((pad, pad), (pad, pad), (0, 0), (0, 0)))
    out_size = (in_size - kernel + 2 * pad) // stride + 1
    b = np.zeros((out_size, out_size, out_channel, batch), np.float32)
    for ry in range(kernel):
        for rx in range(kernel):
            win = ap[ry:ry + out_size * stride:stride, rx:rx + out_size * stride:stride]
            b += np.einsum("yxcn,cf->yxfn", win, w[ry, rx])
    return b


@pytest.mark.parametrize("target", ["c", "opencl"])
def test_tutorial_matches_numpy_with_bounds_checks(target):
    if target == "opencl":
        pytest.importorskip("pyopencl")
        from tdsl.runtime import opencl as rocl
        if not opencl(0).exist or rocl.unusable_reason():
            pytest.skip("no working OpenCL device")
    s, A, W, B = tutorial_schedule()
    func = tdsl.build(s, [A, W, B], target=target, bounds_check=True)
    rng = np.random.default_rng(0)
    a_np = rng.uniform(size=(in_size, in_size, in_channel, batch)).astype(A.dtype)
    w_np = rng.uniform(size=(kernel, kernel, in_channel, out_channel)).astype(W.dtype)
    b = np.zeros((in_size, in_size, out_channel, batch), dtype=B.dtype)
    func(a_np, w_np, b)
    np.testing.assert_allclose(b, reference(a_np, w_np), rtol=1e-4, atol=1e-4)


def test_tutorial_cuda_source_compiles():
    s, A, W, B = tutorial_schedule()
    for checked in (False, True):
        func = tdsl.build(s, [A, W, B], target="cuda", bounds_check=checked)
        assert ("__tdsl_oob" in func.get_source()) == checked
        if rcuda.have_nvrtc():
            assert ".entry" in func.get_source("ptx")
