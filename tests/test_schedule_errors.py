"""One test per user mistake in defining or scheduling: each raises a TdslError subclass that
names the primitive, the stage and the axis, at the moment the mistake is made."""
import pytest

import tdsl
from tdsl import ScheduleError, TdslError


def matmul(n=64, m=48, k=32):
    A = tdsl.placeholder((n, k), name="A")
    B = tdsl.placeholder((k, m), name="B")
    r = tdsl.reduce_axis((0, k), name="r")
    C = tdsl.compute((n, m), lambda i, j: tdsl.sum(A[i, r] * B[r, j], axis=r), name="C")
    return A, B, C


def test_split_by_zero():
    A, B, C = matmul()
    s = tdsl.create_schedule(C)
    with pytest.raises(ScheduleError, match=r"split: stage 'C'.*axis 'i'.*positive integer"):
        s[C].split(C.op.axis[0], factor=0)


def test_split_needs_one_of_factor_nparts():
    A, B, C = matmul()
    s = tdsl.create_schedule(C)
    with pytest.raises(ScheduleError, match="exactly one of factor= or nparts="):
        s[C].split(C.op.axis[0], factor=4, nparts=2)
    with pytest.raises(ScheduleError, match="exactly one"):
        s[C].split(C.op.axis[0])


def test_split_float_factor():
    A, B, C = matmul()
    s = tdsl.create_schedule(C)
    with pytest.raises(ScheduleError, match="positive integer"):
        s[C].split(C.op.axis[0], factor=2.5)


def test_axis_of_another_stage():
    A, B, C = matmul()
    D = tdsl.compute(C.shape, lambda i, j: C[i, j] + 1, name="D")
    s = tdsl.create_schedule(D)
    with pytest.raises(ScheduleError, match=r"split: stage 'D': axis 'i' is not a loop of this stage"):
        s[D].split(C.op.axis[0], factor=4)


def test_split_twice_the_same_axis():
    A, B, C = matmul()
    s = tdsl.create_schedule(C)
    i = C.op.axis[0]
    s[C].split(i, factor=4)
    with pytest.raises(ScheduleError, match="'i' was already split or fused"):
        s[C].split(i, factor=2)


def test_fused_axis_split_twice():
    A, B, C = matmul()
    s = tdsl.create_schedule(C)
    f = s[C].fuse(*C.op.axis)
    s[C].split(f, factor=8)
    with pytest.raises(ScheduleError, match="already split or fused"):
        s[C].split(f, factor=8)


def test_fuse_non_adjacent():
    A, B, C = matmul()
    s = tdsl.create_schedule(C)
    i, j = C.op.axis
    with pytest.raises(ScheduleError, match=r"fuse: stage 'C': axes i, r must be adjacent"):
        s[C].fuse(i, C.op.reduce_axis[0])


def test_fuse_reduce_with_spatial():
    A, B, C = matmul()
    s = tdsl.create_schedule(C)
    j = C.op.axis[1]
    r = C.op.reduce_axis[0]
    with pytest.raises(ScheduleError, match="cannot fuse a reduction axis with a spatial axis"):
        s[C].fuse(j, r)


def test_reorder_duplicate():
    A, B, C = matmul()
    s = tdsl.create_schedule(C)
    i, j = C.op.axis
    with pytest.raises(ScheduleError, match="reorder: stage 'C': an axis appears twice"):
        s[C].reorder(i, i)


def test_vectorize_reduction_axis():
    A, B, C = matmul()
    s = tdsl.create_schedule(C)
    with pytest.raises(ScheduleError, match=r"vectorize: stage 'C': cannot vectorize the reduction axis 'r'"):
        s[C].vectorize(C.op.reduce_axis[0])


def test_parallel_reduction_axis():
    A, B, C = matmul()
    s = tdsl.create_schedule(C)
    with pytest.raises(ScheduleError, match=r"parallel: stage 'C': cannot parallelize the reduction axis 'r'"):
        s[C].parallel(C.op.reduce_axis[0])


def test_vectorize_non_constant_extent():
    n = tdsl.var("n")
    A = tdsl.placeholder((n,), name="A")
    B = tdsl.compute((n,), lambda i: A[i] * 2, name="B")
    s = tdsl.create_schedule(B)
    s[B].vectorize(B.op.axis[0])
    with pytest.raises(ScheduleError, match=r"vectorize: stage 'B': axis 'i' has the non-constant extent n"):
        tdsl.lower(s, [A, B])


def test_annotate_twice_differently():
    A, B, C = matmul()
    s = tdsl.create_schedule(C)
    i = C.op.axis[0]
    s[C].parallel(i)
    with pytest.raises(ScheduleError, match="already marked parallel"):
        s[C].unroll(i)


def test_compute_at_loop_the_consumer_lacks():
    A, B, C = matmul()
    D = tdsl.compute(C.shape, lambda i, j: C[i, j] * 2, name="D")
    s = tdsl.create_schedule(D)
    with pytest.raises(ScheduleError, match=r"compute_at: stage 'C': 'i' is an axis of this stage, not of stage 'D'"):
        s[C].compute_at(s[D], C.op.axis[0])


def test_compute_at_a_producer():
    A, B, C = matmul()
    D = tdsl.compute(C.shape, lambda i, j: C[i, j] * 2, name="D")
    s = tdsl.create_schedule(D)
    with pytest.raises(ScheduleError, match="is a producer of this stage"):
        s[D].compute_at(s[C], C.op.axis[0])


def test_compute_at_a_stage_that_does_not_read_it():
    A = tdsl.placeholder((16,), name="A")
    X = tdsl.compute((16,), lambda i: A[i] + 1, name="X")
    Y = tdsl.compute((16,), lambda i: A[i] * 2, name="Y")
    s = tdsl.create_schedule([X, Y])
    with pytest.raises(ScheduleError, match="stage 'Y' does not read this stage"):
        s[X].compute_at(s[Y], Y.op.axis[0])


def test_inline_a_reduction():
    A, B, C = matmul()
    D = tdsl.compute(C.shape, lambda i, j: C[i, j] * 2, name="D")
    s = tdsl.create_schedule(D)
    with pytest.raises(ScheduleError, match="compute_inline: stage 'C': a reduction cannot be inlined"):
        s[C].compute_inline()


def test_inline_an_output():
    A = tdsl.placeholder((8,), name="A")
    B = tdsl.compute((8,), lambda i: A[i] + 1, name="B")
    s = tdsl.create_schedule(B)
    with pytest.raises(ScheduleError, match="output of the schedule cannot be inlined"):
        s[B].compute_inline()


def test_schedule_a_placeholder():
    A, B, C = matmul()
    s = tdsl.create_schedule(C)
    with pytest.raises(ScheduleError, match="stage 'A': is a placeholder"):
        s[A].split(C.op.axis[0], factor=2)


def test_unknown_cache_scope():
    A, B, C = matmul()
    s = tdsl.create_schedule(C)
    with pytest.raises(ScheduleError, match="unknown scope 'texture'"):
        s.cache_read(A, "texture", [C])


def test_cache_read_for_a_non_reader():
    A = tdsl.placeholder((16,), name="A")
    B = tdsl.placeholder((16,), name="B")
    X = tdsl.compute((16,), lambda i: A[i] + 1, name="X")
    s = tdsl.create_schedule(X)
    with pytest.raises(ScheduleError):
        s.cache_read(B, "local", [X])


def test_rfactor_spatial_axis():
    A, B, C = matmul()
    s = tdsl.create_schedule(C)
    with pytest.raises(ScheduleError, match="rfactor: stage 'C': axis 'i' is not a reduction axis"):
        s.rfactor(C, C.op.axis[0])


def test_bind_non_thread_axis():
    A, B, C = matmul()
    s = tdsl.create_schedule(C)
    with pytest.raises(ScheduleError, match="expected tdsl.thread_axis"):
        s[C].bind(C.op.axis[0], C.op.axis[1])


def test_storage_align_bad_offset():
    A, B, C = matmul()
    s = tdsl.create_schedule(C)
    with pytest.raises(ScheduleError, match="0 <= offset < factor"):
        s[C].storage_align(C.op.axis[0], 8, 9)


# --- mistakes in the definition ------------------------------------------------------------

def test_integer_true_division():
    i = tdsl.var("i")
    with pytest.raises(TdslError, match="use '//'"):
        i / 2


def test_wrong_index_count():
    A = tdsl.placeholder((4, 4), name="A")
    with pytest.raises(TdslError, match="tensor 'A' has 2 dimensions but was indexed with 1"):
        tdsl.compute((4,), lambda i: A[i])


def test_lambda_arity():
    A = tdsl.placeholder((4, 4), name="A")
    with pytest.raises(TdslError, match="the lambda takes 1 indices"):
        tdsl.compute((4, 4), lambda i: A[i, i])


def test_nested_reduction():
    A = tdsl.placeholder((4, 4), name="A")
    k = tdsl.reduce_axis((0, 4), name="k")
    with pytest.raises(TdslError, match="a reduction must be the whole body"):
        tdsl.compute((4,), lambda i: tdsl.sum(A[i, k], axis=k) * 2)


def test_float_intrinsic_on_int():
    A = tdsl.placeholder((4,), dtype="int32", name="A")
    with pytest.raises(TdslError, match="exp\\(\\) needs a floating-point argument"):
        tdsl.compute((4,), lambda i: tdsl.exp(A[i]))


def test_unknown_dtype():
    with pytest.raises(TdslError, match="unknown dtype 'float8'"):
        tdsl.placeholder((4,), dtype="float8")


def test_python_bool_of_expression():
    A = tdsl.placeholder((4,), name="A")
    with pytest.raises(TdslError, match="as a Python bool"):
        tdsl.compute((4,), lambda i: A[i] if A[i] > 0 else 0)
