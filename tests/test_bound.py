"""Bound inference, asserted directly on the inferred ranges (no code generation)."""
import tdsl
from tdsl import arith
from tdsl.ir import expr as E
from tdsl.schedule.bound import infer_bounds, pass_down, pass_up_index, attach_leaf


def _ext(r):
    e = arith.simplify(r.extent)
    return e.value if isinstance(e, E.IntImm) else str(e)


def _doms(op):
    return {iv: iv.dom for iv in list(op.axis) + list(op.reduce_axis)}


def test_split_factor_and_nparts_extents():
    A = tdsl.placeholder((100, 30), name="A")
    B = tdsl.compute((100, 30), lambda i, j: A[i, j] + 1, name="B")
    s = tdsl.create_schedule(B)
    i, j = B.op.axis
    io, ii = s[B].split(i, factor=8)
    jo, ji = s[B].split(j, nparts=4)
    rng = pass_down(s[B], _doms(B.op))
    assert (_ext(rng[io]), _ext(rng[ii])) == (13, 8)
    assert (_ext(rng[jo]), _ext(rng[ji])) == (4, 8)


def test_split_factor_larger_than_extent_is_clamped():
    A = tdsl.placeholder((5,), name="A")
    B = tdsl.compute((5,), lambda i: A[i] + 1, name="B")
    s = tdsl.create_schedule(B)
    io, ii = s[B].split(B.op.axis[0], factor=16)
    rng = pass_down(s[B], _doms(B.op))
    assert (_ext(rng[io]), _ext(rng[ii])) == (1, 5)


def test_fuse_extent_and_pass_up():
    A = tdsl.placeholder((6, 7), name="A")
    B = tdsl.compute((6, 7), lambda i, j: A[i, j] + 1, name="B")
    s = tdsl.create_schedule(B)
    i, j = B.op.axis
    f = s[B].fuse(i, j)
    rng = pass_down(s[B], _doms(B.op))
    assert _ext(rng[f]) == 42
    vals = pass_up_index(s[B], rng, {f: E.const(40)})
    assert arith.simplify(vals[i]).value == 5 and arith.simplify(vals[j]).value == 5


def test_symbolic_split_extent():
    n = tdsl.var("n")
    A = tdsl.placeholder((n,), name="A")
    B = tdsl.compute((n,), lambda i: A[i] * 2, name="B")
    s = tdsl.create_schedule(B)
    io, ii = s[B].split(B.op.axis[0], factor=4)
    rng = pass_down(s[B], _doms(B.op))
    assert _ext(rng[ii]) == 4
    assert "n" in _ext(rng[io])


def test_compute_at_region_of_a_stencil():
    A = tdsl.placeholder((20, 30), name="A")
    P = tdsl.compute((19, 29), lambda i, j: A[i, j] + A[i + 1, j + 1], name="P")
    C = tdsl.compute((18, 28), lambda i, j: P[i, j] + P[i + 1, j] + P[i, j + 1], name="C")
    s = tdsl.create_schedule(C)
    i, j = C.op.axis
    s[P].compute_at(s[C], i)
    b = infer_bounds(s)[s[P]]
    pi, pj = P.op.axis
    # inside one row i of C, P is needed on rows i..i+1 and columns 0..28
    assert _ext(b.ranges[pi]) == 2
    assert _ext(b.ranges[pj]) == 29
    assert [x.value for x in b.alloc_shape] == [2, 29]
    assert arith.simplify(b.ranges[pi].min - i.var).value == 0


def test_compute_at_tiled_consumer_region():
    A = tdsl.placeholder((64, 64), name="A")
    P = tdsl.compute((64, 64), lambda i, j: A[i, j] * 2, name="P")
    C = tdsl.compute((64, 64), lambda i, j: P[i, j] + 1, name="C")
    s = tdsl.create_schedule(C)
    io, jo, ii, ji = s[C].tile(*C.op.axis, 8, 16)
    s[P].compute_at(s[C], jo)
    b = infer_bounds(s)[s[P]]
    assert [_ext(b.ranges[iv]) for iv in P.op.axis] == [8, 16]
    assert [x.value for x in b.alloc_shape] == [8, 16]


def test_attach_axis_split_after_compute_at_means_each_value():
    A = tdsl.placeholder((64, 64), name="A")
    P = tdsl.compute((64, 64), lambda i, j: A[i, j] * 2, name="P")
    C = tdsl.compute((64, 64), lambda i, j: P[i, j] + 1, name="C")
    s = tdsl.create_schedule(C)
    s[P].compute_at(s[C], C.op.axis[0])
    io, jo, ii, ji = s[C].tile(*C.op.axis, 8, 16)
    assert attach_leaf(s[P]) is ii
    b = infer_bounds(s)[s[P]]
    assert [_ext(b.ranges[iv]) for iv in P.op.axis] == [1, 16]


def test_cache_write_region_is_the_tile():
    from tdsl.examples import gemm
    s, (A, B, C) = gemm.write_cache(64, 64, 64, bn=32)
    cc = [st for st in s.stages if st.op.name == "C.global"][0]
    b = infer_bounds(s)[cc]
    assert [x.value for x in b.alloc_shape] == [32, 32]
    assert [_ext(b.ranges[iv]) for iv in cc.op.axis] == [32, 32]
    assert _ext(b.ranges[cc.op.reduce_axis[0]]) == 64


def test_rfactor_shapes():
    A = tdsl.placeholder((8, 100), name="A")
    k = tdsl.reduce_axis((0, 100), name="k")
    S = tdsl.compute((8,), lambda i: tdsl.sum(A[i, k], axis=k), name="S")
    s = tdsl.create_schedule(S)
    ko, ki = s[S].split(k, factor=16)
    SF = s.rfactor(S, ki)
    assert [x.value for x in SF.shape] == [16, 8]
    assert _ext(s[SF].op.reduce_axis[0].dom) == 7
    assert _ext(s[S].op.reduce_axis[0].dom) == 16
