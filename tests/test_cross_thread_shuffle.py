"""Cross-thread reductions on CUDA combine within warps by shuffles and across warps through
one shared value per warp: one barrier instead of log2(threads). Other targets (OpenCL,
the "c" emulation) keep the shared-memory tree. No GPU here: the CUDA side is checked on
its source and on NVRTC's PTX, the others numerically."""
import numpy as np
import pytest

import tdsl
from tdsl.runtime import cuda as rcuda

from test_auto_schedule import _opencl_ok


def _rowsum(rows, n, threads=None, dtype="float32"):
    A = tdsl.placeholder((rows, n), name="A", dtype=dtype)
    k = tdsl.reduce_axis((0, n), name="k")
    B = tdsl.compute((rows,), lambda i: tdsl.sum(A[i, k], axis=k), name="B")
    if threads is None:
        return tdsl.auto_schedule(B, target="cuda -arch=sm_90"), [A, B]
    s = tdsl.create_schedule(B)
    _, ki = s[B].split(k, factor=threads)
    s[B].bind(B.op.axis[0], tdsl.thread_axis("blockIdx.x"))
    s[B].bind(ki, tdsl.thread_axis("threadIdx.x"))
    return s, [A, B]


def _argmax_rows(n, threads):
    argmax = tdsl.comm_reducer(
        lambda x, y: (tdsl.select(x[1] >= y[1], x[0], y[0]), tdsl.select(x[1] >= y[1], x[1], y[1])),
        lambda t0, t1: (tdsl.const(-1, t0), tdsl.min_value(t1)), name="argmax")
    A = tdsl.placeholder((5, n), name="A")
    k = tdsl.reduce_axis((0, n), name="k")
    I, V = tdsl.compute((5,), lambda i: argmax((k.astype("int32"), A[i, k]), axis=k), name="T")
    s = tdsl.create_schedule(I.op)
    _, ki = s[I].split(k, factor=threads)
    s[I].bind(I.op.axis[0], tdsl.thread_axis("blockIdx.x"))
    s[I].bind(ki, tdsl.thread_axis("threadIdx.x"))
    return s, [A, I, V]


@pytest.mark.parametrize("threads, warps", [(512, 16), (96, 3), (32, 1)])
def test_cuda_reduces_within_warps_by_shuffles(threads, warps):
    s, args = _rowsum(7, 1000, threads)
    src = tdsl.build(s, args, target="cuda").get_source()
    assert src.count("__shfl_down_sync") == 5 + (warps - 1).bit_length()
    assert src.count("__syncthreads") == (1 if warps > 1 else 0)
    assert f"B_red[{warps}]" in src or warps == 1


def test_cuda_tuple_reduction_shuffles_every_element():
    s, args = _argmax_rows(900, 128)
    src = tdsl.build(s, args, target="cuda").get_source()
    assert src.count("__shfl_down_sync") == 2 * (5 + 2)
    # shuffled values are let-bound, never under the combiner's selects
    assert "? __shfl" not in src and ": __shfl" not in src


@pytest.mark.parametrize("threads", [48, 100])
def test_cuda_keeps_the_tree_for_partial_warps(threads):
    src = tdsl.build(*_rowsum(7, 1000, threads), target="cuda").get_source()
    assert "__shfl" not in src and "__syncthreads" in src


def test_cuda_keeps_the_tree_for_types_a_shuffle_does_not_move():
    src = tdsl.build(*_rowsum(7, 1000, 64, "int8"), target="cuda").get_source()
    assert "__shfl" not in src


def test_rowsum_auto_schedule_has_one_barrier_in_ptx():
    if not rcuda.have_nvrtc():
        pytest.skip("NVRTC is not installed")
    m = tdsl.build(*_rowsum(8192, 8192), target="cuda")
    ptx = m.get_source("ptx")
    assert ptx.count("bar.sync") == 1       # the shared-memory tree had 10 for 512 threads
    assert "shfl.sync.down" in ptx


@pytest.mark.parametrize("target", ["c", "opencl"])
@pytest.mark.parametrize("threads", [32, 96])
def test_other_targets_keep_the_shared_tree(target, threads):
    if target == "opencl" and not _opencl_ok():
        pytest.skip("no working OpenCL device")
    s, args = _argmax_rows(700, threads)
    f = tdsl.build(s, args, target=target)
    assert "shfl" not in f.get_source()
    a = np.random.default_rng(threads).standard_normal((5, 700)).astype("float32")
    idx, val = np.zeros(5, "int32"), np.zeros(5, "float32")
    f(a, idx, val)
    np.testing.assert_array_equal(idx, a.argmax(1))
    np.testing.assert_allclose(val, a.max(1))
