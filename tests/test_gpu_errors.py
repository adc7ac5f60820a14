"""Illegal GPU schedules: each raises ScheduleError or BuildError naming the fault."""
import numpy as np
import pytest

import tdsl
from tdsl.examples import gpu as G


def _tx(tag):
    return tdsl.thread_axis(tag)


def _elementwise(n=1024):
    A = tdsl.placeholder((n,), name="A")
    B = tdsl.compute((n,), lambda i: A[i] * 2.0, name="B")
    return A, B, tdsl.create_schedule(B)


@pytest.mark.parametrize("target", ["cuda", "opencl"])
def test_unbound_stage_is_named(target):
    A, B, s = _elementwise()
    with pytest.raises(tdsl.ScheduleError, match=r"stage 'B' is not bound.*blockIdx.x"):
        tdsl.build(s, [A, B], target=target)


def test_unbound_producer_stage_is_named():
    A = tdsl.placeholder((256,), name="A")
    T = tdsl.compute((256,), lambda i: A[i] + 1.0, name="T")
    B = tdsl.compute((256,), lambda i: T[i] * 2.0, name="B")
    s = tdsl.create_schedule(B)
    bx, tx = s[B].split(B.op.axis[0], factor=64)
    s[B].bind(bx, _tx("blockIdx.x"))
    s[B].bind(tx, _tx("threadIdx.x"))
    with pytest.raises(tdsl.ScheduleError, match=r"stage 'T' is not bound"):
        tdsl.build(s, [A, B], target="cuda")


def test_two_extents_on_one_thread_tag():
    s, args = G.matmul_schedule(64, 64, 64)
    AA = [st for st in s.stages if st.name == "A.shared"][0]
    # rebind the cooperative copy of A.shared with 4 threads on threadIdx.x (C uses 8)
    AA.iter_var_attrs.clear()
    AA.relations.clear()
    AA.leaf_iter_vars = list(AA.all_iter_vars[:2])
    AA.all_iter_vars = list(AA.leaf_iter_vars)
    a0, a1 = AA.leaf_iter_vars
    xo, xi = AA.split(a1, nparts=4)
    AA.bind(xo, _tx("threadIdx.x"))
    with pytest.raises(tdsl.ScheduleError, match=r"threadIdx.x is bound to loops of different "
                                                 r"extents.*stage 'C'.*8.*stage 'A.shared'.*4"):
        tdsl.build(s, args, target="cuda")


def test_two_stages_disagree_in_one_kernel():
    A = tdsl.placeholder((64, 64), name="A")
    T = tdsl.compute((64, 64), lambda i, j: A[i, j] + 1.0, name="T")
    B = tdsl.compute((64, 64), lambda i, j: T[i, j] * 2.0, name="B")
    s = tdsl.create_schedule(B)
    i, j = B.op.axis
    s[B].bind(i, _tx("blockIdx.x"))
    jo, ji = s[B].split(j, factor=32)
    s[B].bind(ji, _tx("threadIdx.x"))
    s[T].compute_at(s[B], i)
    to, ti = s[T].split(s[T].op.axis[1], factor=16)
    s[T].bind(ti, _tx("threadIdx.x"))
    with pytest.raises(tdsl.ScheduleError, match=r"threadIdx.x.*'j.inner' of stage 'T' has 16.*"
                                                 r"'j.inner' of stage 'B' has 32"):
        tdsl.build(s, [A, B], target="cuda")


def test_too_many_threads_per_block():
    A = tdsl.placeholder((64, 64), name="A")
    B = tdsl.compute((64, 64), lambda i, j: A[i, j] * 2.0, name="B")
    s = tdsl.create_schedule(B)
    i, j = B.op.axis
    s[B].bind(i, _tx("threadIdx.y"))
    s[B].bind(j, _tx("threadIdx.x"))
    with pytest.raises(tdsl.BuildError, match=r"4096 threads per block.*threadIdx.x=64, "
                                              r"threadIdx.y=64.*limit of 1024"):
        tdsl.build(s, [A, B], target="cuda")


def test_shared_buffer_too_large():
    s, args = G.matmul_schedule(512, 512, 512, block=(16, 16), thread_tile=(8, 8), k_tile=64)
    with pytest.raises(tdsl.BuildError, match=r"shared memory of 65536 bytes.*'A.shared' "
                                              r"32768 B.*exceeds the 48 KiB"):
        tdsl.build(s, args, target="opencl")


def test_shared_memory_past_48_kib_is_dynamic_on_cuda():
    """The same 64 KiB of tiles build for CUDA: past the 48 KiB a block may declare, the
    kernel declares one dynamic block of shared memory (each tile 16-byte aligned in it)
    and its launch passes the size; past what any GPU gives a block (227 KiB), an error."""
    s, args = G.matmul_schedule(512, 512, 512, block=(16, 16), thread_tile=(8, 8), k_tile=64)
    src = tdsl.lower(s, args, target="cuda")
    (k,) = src.attrs["kernels"]
    assert k.shared_bytes == 65536 and k.dynamic_shared_bytes == 65536
    assert [at for _, at in k.shared_offsets()] == [0, 32768]
    f = tdsl.build(s, args, target="cuda")
    assert "extern __shared__ __align__(16) unsigned char tdsl_dynamic_shared[];" in \
        f.get_source()
    s, args = G.matmul_schedule(2048, 2048, 512, block=(16, 16), thread_tile=(16, 16),
                                k_tile=128)
    with pytest.raises(tdsl.BuildError, match=r"shared memory of 262144 bytes.*exceeds the "
                                              r"227 KiB"):
        tdsl.build(s, args, target="cuda")


def test_reduction_bound_to_blocks():
    A = tdsl.placeholder((16, 64), name="A")
    k = tdsl.reduce_axis((0, 64), name="k")
    B = tdsl.compute((16,), lambda i: tdsl.sum(A[i, k], axis=k), name="B")
    s = tdsl.create_schedule(B)
    s[B].bind(B.op.axis[0], _tx("threadIdx.x"))
    s[B].bind(k, _tx("blockIdx.x"))
    with pytest.raises(tdsl.ScheduleError, match=r"stage 'B'.*reduction axis 'k' is bound to "
                                                 r"blockIdx.x"):
        tdsl.build(s, [A, B], target="cuda")


def test_serial_loop_outside_the_grid():
    A = tdsl.placeholder((8, 64), name="A")
    B = tdsl.compute((8, 64), lambda i, j: A[i, j] * 2.0, name="B")
    s = tdsl.create_schedule(B)
    s[B].bind(B.op.axis[1], _tx("threadIdx.x"))
    with pytest.raises(tdsl.ScheduleError, match=r"stage 'B': the loop 'i' is outside"):
        tdsl.build(s, [A, B], target="cuda")


def test_thread_bound_schedule_on_llvm_is_refused():
    A, B, s = _elementwise()
    bx, tx = s[B].split(B.op.axis[0], factor=64)
    s[B].bind(bx, _tx("blockIdx.x"))
    s[B].bind(tx, _tx("threadIdx.x"))
    with pytest.raises(tdsl.BuildError, match="blockIdx.x"):
        tdsl.build(s, [A, B], target="llvm")


def test_gpu_module_argument_checks():
    s, args = G.elementwise_schedule(256)
    f = tdsl.build(s, args, target="c")
    with pytest.raises(tdsl.ArgumentError, match="argument 1 'B'.*shape"):
        f(np.zeros(256, np.float32), np.zeros(255, np.float32))
    with pytest.raises(tdsl.ArgumentError, match="takes 2 arguments"):
        f(np.zeros(256, np.float32))
    with pytest.raises(tdsl.ArgumentError, match="dtype float32"):
        f(np.zeros(256, np.float64), np.zeros(256, np.float32))
