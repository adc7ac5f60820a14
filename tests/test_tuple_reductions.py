"""Computes with several outputs and reductions over tuples (argmax/argmin), through every
primitive that touches them, against numpy; and the TVM call forms (`A(i, j)`, `A[i][j]`,
`op.output(i)`, `build(lower(...))`)."""
import numpy as np
import pytest

import tdsl

rng = np.random.default_rng(21)


def argreducer(is_max):
    def combine(x, y):
        better = x[1] >= y[1] if is_max else x[1] <= y[1]
        return tdsl.select(better, x[0], y[0]), tdsl.select(better, x[1], y[1])

    def identity(t0, t1):
        return tdsl.const(-1, t0), tdsl.min_value(t1) if is_max else tdsl.max_value(t1)
    return tdsl.comm_reducer(combine, identity, name="argmax" if is_max else "argmin")


def _rows(R=9, L=37, dtype="float32"):
    A = tdsl.placeholder((R, L), dtype=dtype, name="A")
    k = tdsl.reduce_axis((0, L), name="k")
    return A, k, rng.standard_normal((R, L)).astype(dtype)


def _run(s, args, inputs, outs):
    f = tdsl.build(s, args)
    arrays = [np.full(shape, -7, dtype) for shape, dtype in outs]
    f(*inputs, *arrays)
    return arrays


def test_outputs_of_a_tuple_compute():
    A, k, _ = _rows()
    I, V = tdsl.compute((9,), lambda i: argreducer(True)((k, A[i, k]), axis=k), name="T")
    assert (I.name, V.name) == ("T.v0", "T.v1") and (I.dtype, V.dtype) == ("int32", "float32")
    assert I.op is V.op and I.op.num_outputs == 2
    assert I.op.output(1) is V and (I.value_index, V.value_index) == (0, 1)
    assert len(I.op.bodies) == 2 and I.op.body is I.op.bodies[0]


@pytest.mark.parametrize("is_max", [True, False])
@pytest.mark.parametrize("how", ["plain", "split_vectorized", "rfactor_parallel",
                                 "cache_write"])
def test_argmax_argmin_schedules(is_max, how):
    A, k, a = _rows()
    I, V = tdsl.compute((9,), lambda i: argreducer(is_max)((k, A[i, k]), axis=k), name="T")
    s = tdsl.create_schedule(I.op)
    if how == "split_vectorized":     # rows in vector lanes, the reduction serial inside
        io, ii = s[I].split(I.op.axis[0], factor=4)
        s[I].reorder(io, k, ii)
        s[I].vectorize(ii)
    elif how == "rfactor_parallel":
        ko, ki = s[I].split(k, factor=8)
        IF, VF = s.rfactor(I, ki)
        assert VF.op is IF.op and IF.name == "T.rf.v0"
        s[IF].parallel(IF.op.axis[0])
    elif how == "cache_write":
        IC, VC = s.cache_write([I, V], "local")
        io, ii = s[I].split(I.op.axis[0], factor=4)
        s[IC].compute_at(s[I], io)
    idx, val = _run(s, [A, I, V], [a], [((9,), "int32"), ((9,), "float32")])
    np.testing.assert_array_equal(idx, a.argmax(1) if is_max else a.argmin(1))
    np.testing.assert_array_equal(val, a.max(1) if is_max else a.min(1))


def test_tuple_reduction_with_where_and_init():
    """Elements at odd k are skipped; init=(-2, 0.5) takes part like any element."""
    A, k, a = _rows()
    I, V = tdsl.compute((9,), lambda i: argreducer(True)(
        (k, A[i, k]), axis=k, where=k % 2 == 0, init=(-2, 0.5)), name="T")
    idx, val = _run(tdsl.create_schedule(I.op), [A, I, V], [a],
                    [((9,), "int32"), ((9,), "float32")])
    even = a[:, ::2]
    best = even.max(axis=1)
    np.testing.assert_array_equal(val, np.maximum(best, 0.5))
    np.testing.assert_array_equal(idx, np.where(best >= 0.5, 2 * even.argmax(axis=1), -2))


def test_sum_and_product_in_one_reduction():
    A, k, a = _rows(4, 12)
    B = tdsl.placeholder((4, 12), name="B")
    b = rng.uniform(0.9, 1.1, (4, 12)).astype("float32")
    addmul = tdsl.comm_reducer(lambda x, y: (x[0] + y[0], x[1] * y[1]),
                               lambda t0, t1: (tdsl.const(0, t0), tdsl.const(1, t1)), name="am")
    S, P = tdsl.compute((4,), lambda i: addmul((A[i, k], B[i, k]), axis=k), name="SP")
    s = tdsl.create_schedule(S.op)
    ko, ki = s[S].split(k, factor=5)
    SF, PF = s.rfactor(S, ko)
    s[SF].compute_at(s[S], s[S].op.axis[0])
    sm, pr = _run(s, [A, B, S, P], [a, b], [((4,), "float32"), ((4,), "float32")])
    np.testing.assert_allclose(sm, a.sum(1), rtol=1e-5)
    np.testing.assert_allclose(pr, b.prod(1), rtol=1e-5)


@pytest.mark.parametrize("where", ["inline", "root", "at", "only_one_used"])
def test_two_output_elementwise(where):
    A = tdsl.placeholder((6, 10), name="A")
    S, D = tdsl.compute((6, 10), lambda i, j: (A(i, j) + 1.0, A[i][j] - 1.0), name="SD")
    if where == "only_one_used":
        C = tdsl.compute((6, 10), lambda i, j: D[i, j] * 3.0, name="C")
    else:
        C = tdsl.compute((6, 10), lambda i, j: S[i, j] * D[i, j], name="C")
    s = tdsl.create_schedule(C)
    if where == "inline":
        s[S].compute_inline()
    elif where == "at":
        s[D].compute_at(s[C], C.op.axis[0])
    jo, ji = s[C].split(C.op.axis[1], factor=4)
    s[C].vectorize(ji)
    s[C].parallel(C.op.axis[0])
    a = rng.standard_normal((6, 10)).astype("float32")
    (c,) = _run(s, [A, C], [a], [((6, 10), "float32")])
    ref = (a - 1) * 3 if where == "only_one_used" else (a + 1) * (a - 1)
    np.testing.assert_allclose(c, ref, rtol=1e-6)


def test_multi_output_stage_as_arguments():
    """Both outputs passed, one passed (the other allocated inside), and the schedule of
    both tensors is one stage."""
    A = tdsl.placeholder((8,), name="A")
    S, D = tdsl.compute((8,), lambda i: (A[i] + 1.0, A[i] * 2.0), name="SD")
    s = tdsl.create_schedule([S, D])
    assert s[S] is s[D] and len([st for st in s.stages if st.op is S.op]) == 1
    a = rng.standard_normal(8).astype("float32")
    sv, dv = _run(s, [A, S, D], [a], [((8,), "float32"), ((8,), "float32")])
    np.testing.assert_allclose(sv, a + 1)
    np.testing.assert_allclose(dv, a * 2)
    (dv,) = _run(tdsl.create_schedule(D), [A, D], [a], [((8,), "float32")])
    np.testing.assert_allclose(dv, a * 2)


def test_call_forms_give_the_same_program():
    A = tdsl.placeholder((5, 7), name="A")
    forms = [lambda i, j: A[i, j] * 2.0, lambda i, j: A(i, j) * 2.0,
             lambda i, j: A[i][j] * 2.0, lambda *i: A(*i) * 2.0]
    texts = set()
    for fn in forms:
        B = tdsl.compute((5, 7), fn, name="B")
        texts.add(str(tdsl.lower(tdsl.create_schedule(B), [A, B])).replace("i0", "i")
                  .replace("i1", "j"))
    assert len(texts) == 1


def test_build_of_lower_on_every_cpu_target():
    A = tdsl.placeholder((16,), name="A")
    B = tdsl.compute((16,), lambda i: A[i] * 2.0, name="B")
    s = tdsl.create_schedule(B)
    assert s.normalize() is s
    func = tdsl.lower(s, [A, B], name="double")
    a = rng.standard_normal(16).astype("float32")
    for target in ("llvm", "c"):
        f = tdsl.build(func, target=target, name="twice")
        b = np.zeros(16, "float32")
        f(a, b)
        np.testing.assert_allclose(b, a * 2)
    assert func.name == "double"          # build named a copy


def test_thread_axis_call_forms():
    tx = tdsl.thread_axis((0, 32), "threadIdx.x")
    assert tx.thread_tag == "threadIdx.x" and tx.dom.extent.value == 32
    ty = tdsl.thread_axis("threadIdx.y", "ty")
    assert ty.thread_tag == "threadIdx.y" and ty.var.name == "ty" and ty.dom is None
    vz = tdsl.thread_axis((0, 2), "vthread", name="vz")
    assert vz.var.name == "vz"


def test_store_predicate_on_cpu():
    """Only the elements the predicate admits are written; the others keep their value."""
    A = tdsl.placeholder((6, 8), name="A")
    B = tdsl.compute((6, 8), lambda i, j: A[i, j] + 1.0, name="B")
    s = tdsl.create_schedule(B)
    i, j = B.op.axis
    s[B].set_store_predicate((i.var + j.var) % 2 == 0)
    jo, ji = s[B].split(j, factor=4)
    s[B].vectorize(ji)                  # the predicate becomes a lane mask
    a = rng.standard_normal((6, 8)).astype("float32")
    (b,) = _run(s, [A, B], [a], [((6, 8), "float32")])
    ii, jj = np.meshgrid(range(6), range(8), indexing="ij")
    np.testing.assert_array_equal(b, np.where((ii + jj) % 2 == 0, a + 1, -7))
