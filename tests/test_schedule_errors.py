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


# ------------------------------------------------- tuple reductions, multi-output computes

def _argmax():
    return tdsl.comm_reducer(
        lambda x, y: (tdsl.select(x[1] >= y[1], x[0], y[0]), tdsl.select(x[1] >= y[1], x[1], y[1])),
        lambda t0, t1: (tdsl.const(-1, t0), tdsl.min_value(t1)), name="argmax")


def test_incomplete_chained_index():
    A, B, C = matmul()
    with pytest.raises(TdslError, match=r"tensor 'A' has 2 dimensions but was indexed with 1"):
        tdsl.compute((64,), lambda i: A[i] + 1.0, name="D")


def test_output_index_out_of_range():
    A, B, C = matmul()
    with pytest.raises(TdslError, match=r"operation 'C' has 1 output\(s\); output\(1\)"):
        C.op.output(1)


def test_one_element_of_a_tuple_reduction():
    A = tdsl.placeholder((4, 6), name="A")
    k = tdsl.reduce_axis((0, 6), name="k")
    with pytest.raises(TdslError, match="compute 'T': the reduction 'argmax' is over a tuple"):
        tdsl.compute((4,), lambda i: _argmax()((k, A[i, k]), axis=k)[0], name="T")


def test_reductions_and_values_in_one_compute():
    A = tdsl.placeholder((4, 6), name="A")
    k = tdsl.reduce_axis((0, 6), name="k")
    with pytest.raises(TdslError, match="compute 'T': either every output is a reduction"):
        tdsl.compute((4,), lambda i: (tdsl.sum(A[i, k], axis=k), A[i, 0]), name="T")
    with pytest.raises(TdslError, match="compute 'T': several reductions in one compute"):
        tdsl.compute((4,), lambda i: (tdsl.sum(A[i, k], axis=k), tdsl.max(A[i, k], axis=k)),
                     name="T")


def test_combiner_returns_the_wrong_arity():
    A = tdsl.placeholder((4, 6), name="A")
    k = tdsl.reduce_axis((0, 6), name="k")
    bad = tdsl.comm_reducer(lambda x, y: x[0], lambda t0, t1: (0, 0), name="bad")
    T = tdsl.compute((4,), lambda i: bad((k, A[i, k]), axis=k), name="T")
    with pytest.raises(TdslError, match="comm_reducer 'bad': the combiner must return a tuple of 2"):
        tdsl.lower(tdsl.create_schedule(T[0].op), [A] + T)
    with pytest.raises(TdslError, match="argmax: init= must be a tuple of 2 values"):
        _argmax()((k, A[0, k]), axis=k, init=(1,))


def test_cache_write_of_one_output_of_two():
    A = tdsl.placeholder((4, 6), name="A")
    S, P = tdsl.compute((4, 6), lambda i, j: (A[i, j] + 1.0, A[i, j] * 2.0), name="SP")
    s = tdsl.create_schedule(S.op)
    with pytest.raises(ScheduleError, match=r"cache_write: stage 'SP' has 2 outputs \(SP.v0, "
                                            r"SP.v1\); pass all of them"):
        s.cache_write(S, "local")


# ------------------------------------------------- thread axes, store predicates, vthread

def test_thread_axis_domain_not_from_zero():
    with pytest.raises(TdslError, match=r"thread_axis 'threadIdx.x': the domain must be \(0, n\)"):
        tdsl.thread_axis((1, 4), "threadIdx.x")


def test_thread_axis_domain_disagrees_with_the_loop():
    A, B, C = matmul()
    s = tdsl.create_schedule(C)
    s[C].bind(C.op.axis[0], tdsl.thread_axis("blockIdx.x"))
    s[C].bind(C.op.axis[1], tdsl.thread_axis((0, 32), "threadIdx.x"))
    with pytest.raises(ScheduleError, match=r"bind: stage 'C': axis 'j' has 48 iterations but "
                                            r"the thread axis threadIdx.x was declared with the "
                                            r"domain \[0, 32\); split it with nparts=32"):
        tdsl.lower(s, [A, B, C], target="cuda")


def test_store_predicate_not_a_condition():
    A, B, C = matmul()
    s = tdsl.create_schedule(C)
    with pytest.raises(ScheduleError, match="set_store_predicate: stage 'C': the predicate must "
                                            "be a condition, got i"):
        s[C].set_store_predicate(C.op.axis[0].var + 1)


def test_store_predicate_on_a_thread_nothing_is_bound_to():
    A, B, C = matmul()
    s = tdsl.create_schedule(C)
    s[C].bind(C.op.axis[0], tdsl.thread_axis("blockIdx.x"))
    s[C].set_store_predicate(tdsl.thread_axis("threadIdx.y").var.equal(0))
    with pytest.raises(ScheduleError, match="set_store_predicate: stage 'C': the predicate reads "
                                            "threadIdx.y, which no loop of the schedule is bound to"):
        tdsl.lower(s, [A, B, C], target="cuda")


def test_vthread_on_a_reduction_axis():
    A, B, C = matmul()
    s = tdsl.create_schedule(C)
    with pytest.raises(ScheduleError, match="bind: stage 'C': the reduction axis 'r' cannot be "
                                            "bound to a vthread"):
        s[C].bind(C.op.reduce_axis[0], tdsl.thread_axis("vthread"))


def test_vthread_with_a_symbolic_extent():
    n = tdsl.var("n")
    X = tdsl.placeholder((n,), name="X")
    Y = tdsl.compute((n,), lambda i: X[i] * 2.0, name="Y")
    s = tdsl.create_schedule(Y)
    s[Y].bind(Y.op.axis[0], tdsl.thread_axis("vthread"))
    with pytest.raises(ScheduleError, match="bind: stage 'Y': axis 'i' has the non-constant "
                                            "extent n; split it by a constant factor and bind "
                                            "the inner axis to vthread"):
        tdsl.lower(s, [X, Y])


def test_one_vthread_axis_bound_twice():
    A, B, C = matmul()
    s = tdsl.create_schedule(C)
    v = tdsl.thread_axis("vthread")
    s[C].bind(C.op.axis[0], v)
    with pytest.raises(ScheduleError, match="bind: stage 'C': vthread is already bound to axis 'i'"):
        s[C].bind(C.op.axis[1], v)


# ------------------------------------------------- double_buffer

def _producer_consumer():
    A = tdsl.placeholder((8, 6), name="A")
    P = tdsl.compute((8, 6), lambda i, j: A[i, j] * 2.0, name="P")
    C = tdsl.compute((8, 6), lambda i, j: P[i, j] + 1.0, name="C")
    return A, P, C


def test_double_buffer_an_output():
    A, P, C = _producer_consumer()
    s = tdsl.create_schedule(C)
    with pytest.raises(ScheduleError, match="double_buffer: stage 'C': is an output"):
        s[C].double_buffer()


def test_double_buffer_at_root():
    A, P, C = _producer_consumer()
    s = tdsl.create_schedule(C)
    s[P].double_buffer()
    with pytest.raises(ScheduleError, match="double_buffer: stage 'P' is computed at root; "
                                            "attach it"):
        tdsl.lower(s, [A, C])


def test_double_buffer_at_a_parallel_loop():
    A, P, C = _producer_consumer()
    s = tdsl.create_schedule(C)
    s[P].compute_at(s[C], C.op.axis[0])
    s[C].parallel(C.op.axis[0])
    s[P].double_buffer()
    with pytest.raises(ScheduleError, match="double_buffer: stage 'P' is attached at loop 'i' "
                                            "of 'C', which is parallel"):
        tdsl.lower(s, [A, C])


def test_double_buffer_whose_fill_reads_what_the_loop_writes():
    A = tdsl.placeholder((8, 6), name="A")
    k = tdsl.reduce_axis((0, 6), name="k")
    S = tdsl.compute((8,), lambda i: tdsl.sum(A[i, k], axis=k), name="S")
    C = tdsl.compute((8,), lambda i: S[i] * 2.0, name="C")
    s = tdsl.create_schedule(C)
    s[S].compute_at(s[C], C.op.axis[0])
    SC = s.cache_read(S, "local", [C])
    s[SC].compute_at(s[C], C.op.axis[0])
    s[SC].double_buffer()
    with pytest.raises(ScheduleError, match=r"double_buffer: S.local read\(s\) S, which loop 'i' "
                                            "writes"):
        tdsl.lower(s, [A, C])


def test_build_of_a_lowered_function_with_other_args():
    A, P, C = _producer_consumer()
    s = tdsl.create_schedule(C)
    with pytest.raises(tdsl.BuildError, match="build: function 'main' was lowered with its "
                                              "arguments"):
        tdsl.build(tdsl.lower(s, [A, C]), [C, A])


def test_build_of_a_gpu_function_for_the_cpu():
    A, P, C = _producer_consumer()
    s = tdsl.create_schedule(C)
    s[P].compute_inline()
    s[C].bind(C.op.axis[0], tdsl.thread_axis("blockIdx.x"))
    with pytest.raises(tdsl.LoweringError, match="was lowered for the GPU target 'cuda'; lower "
                                                 "the schedule again for target 'llvm'"):
        tdsl.build(tdsl.lower(s, [A, C], target="cuda"), target="llvm")


# ------------------------------------------------- bitwise operations and intrinsics

def test_bitwise_operators_on_floats():
    A, B, C = matmul()
    with pytest.raises(TdslError, match="'&' needs booleans or integers, got A"):
        tdsl.compute((64,), lambda i: A[i, 0] & 1, name="D")
    with pytest.raises(TdslError, match="'<<' needs integers"):
        tdsl.compute((64,), lambda i: A[i, 0] << 1, name="D")
    with pytest.raises(TdslError, match="'~' needs a boolean or an integer"):
        tdsl.compute((64,), lambda i: ~A[i, 0], name="D")


def test_integer_intrinsics_on_floats_and_back():
    A, B, C = matmul()
    with pytest.raises(TdslError, match=r"popcount\(\) needs an integer argument"):
        tdsl.popcount(A[0, 0])
    with pytest.raises(TdslError, match=r"hypot\(\) needs a floating-point argument"):
        tdsl.hypot(tdsl.var("x"), 2)
    with pytest.raises(TdslError, match=r"ldexp\(x, e\) needs an integer exponent"):
        tdsl.ldexp(A[0, 0], A[0, 1])


def test_store_predicate_on_an_inlined_stage():
    A, P, C = _producer_consumer()
    s = tdsl.create_schedule(C)
    s[P].set_store_predicate(P.op.axis[0].var < 4)
    s[P].compute_inline()
    with pytest.raises(ScheduleError, match="set_store_predicate: stage 'P' is inlined"):
        tdsl.lower(s, [A, C])


@pytest.mark.parametrize("stages", [1, 0, 2.5, True, "3"])
def test_multi_buffer_needs_two_or_more_integer_stages(stages):
    A = tdsl.placeholder((16, 16), name="A")
    B = tdsl.compute((16, 16), lambda i, j: A[i, j] + 1.0, name="B")
    C = tdsl.compute((16, 16), lambda i, j: B[i, j] * 2.0, name="C")
    s = tdsl.create_schedule(C)
    with pytest.raises(tdsl.ScheduleError, match=r"multi_buffer.*'B'.*stages must be an "
                                                  r"integer >= 2"):
        s[B].multi_buffer(stages)
