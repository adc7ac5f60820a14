"""Tails that loop partitioning peels off loops of run-time extent: codegen tells LLVM to
leave them as written (no vectorizing, no unrolling of a loop that runs less than one
tile), and the kernels stay right at every size, tails included."""
import numpy as np
import pytest

import tdsl
from tdsl.ir import stmt as S
from tdsl.passes.loop_partition import loop_partition

from pass_ir import before, nodes


def _scaled(n, factor=16, vectorize=True):
    A = tdsl.placeholder((n,), name="A")
    B = tdsl.compute((n,), lambda i: A[i] * 2.0 + 1.0, name="B")
    s = tdsl.create_schedule(B)
    _, ii = s[B].split(B.op.axis[0], factor=factor)
    if vectorize:
        s[B].vectorize(ii)
    return s, A, B


def _tails(f):
    return [x for x in nodes(loop_partition(f), S.For) if ("tail", True) in x.pragmas]


def test_symbolic_tail_is_marked_and_constant_tail_is_not():
    s, A, B = _scaled(tdsl.var("n"))
    tails = _tails(before("loop_partition", s, [A, B]))
    assert len(tails) == 1 and tails[0].kind is S.ForKind.SERIAL
    s, A, B = _scaled(40)
    assert not _tails(before("loop_partition", s, [A, B]))


@pytest.mark.parametrize("vectorize", [True, False])
def test_symbolic_tail_is_kept_as_written_and_right(vectorize):
    s, A, B = _scaled(tdsl.var("n"), vectorize=vectorize)
    f = tdsl.build(s, [A, B])
    assert "llvm.loop.unroll.disable" in f.get_source()
    rng = np.random.default_rng(0)
    for n in (1, 15, 16, 17, 100, 1000):
        a = rng.standard_normal(n).astype(np.float32)
        out = np.full(n, np.nan, np.float32)
        f(a, out)
        np.testing.assert_allclose(out, a * 2.0 + 1.0, rtol=1e-6)


def test_static_build_has_no_loop_metadata():
    s, A, B = _scaled(1000)
    assert "llvm.loop.unroll.disable" not in tdsl.build(s, [A, B]).get_source()


def _tiled_matmul(M, N, K=24):
    A = tdsl.placeholder((M, K), name="A")
    Bm = tdsl.placeholder((K, N), name="B")
    k = tdsl.reduce_axis((0, K), name="k")
    C = tdsl.compute((M, N), lambda i, j: tdsl.sum(A[i, k] * Bm[k, j], axis=k), name="C")
    s = tdsl.create_schedule(C)
    i, j = C.op.axis
    io, ii = s[C].split(i, factor=4)
    jo, ji = s[C].split(j, factor=16)
    s[C].reorder(io, jo, k, ii, ji)
    s[C].unroll(ii)
    s[C].vectorize(ji)
    return s, A, Bm, C


def _column_loops(f):
    """The loops over column tiles under each loop over row tiles of partitioned `f`,
    outermost first: [(row loop, [column loops])]."""
    out = loop_partition(f)
    rows = [x for x in nodes(out, S.For) if x.var.name == "i.outer"]
    return [(r, [x for x in nodes(r.body, S.For) if x.var.name == "j.outer"]) for r in rows]


def test_loops_inside_a_symbolic_tail_are_not_partitioned():
    """Rows and columns of run-time extent: the row tail runs once per call, so its column
    loop keeps its guard instead of being split again (three copies of the tile, not
    four), each guard tested outside the loops it does not depend on; constant tails are
    still partitioned inside."""
    s, A, B, C = _tiled_matmul(tdsl.var("M"), tdsl.var("N"))
    (main, main_cols), (tail, tail_cols) = _column_loops(before("loop_partition", s, [A, B, C]))
    assert ("tail", True) in tail.pragmas
    assert len(main_cols) == 2 and len(tail_cols) == 1
    guards = str(tail_cols[0])
    assert "likely(i.outer * 4 + i.inner < M)" in guards and "< N)" in guards
    # the row guard, the same for a whole row, is tested outside the row's vectors
    vectors = [x for x in nodes(tail, S.For) if x.kind is S.ForKind.VECTORIZED]
    assert vectors and not any("< M)" in str(v) for v in vectors)
    s, A, B, C = _tiled_matmul(10, 40)
    (_, main_cols), (_, tail_cols) = _column_loops(before("loop_partition", s, [A, B, C]))
    assert len(main_cols) == 2 and len(tail_cols) == 2


def test_rows_left_in_a_symbolic_tail_are_kept_as_written():
    """The tail's loop over the rows its tile has left ends where the rows do (its guard
    dropped) and is kept as written too: LLVM would unroll it at run time."""
    n = tdsl.var("n")
    A = tdsl.placeholder((n, 32), name="A")
    B = tdsl.compute((n, 32), lambda i, j: A[i, j] * 2.0 + 1.0, name="B")
    s = tdsl.create_schedule(B)
    s[B].split(B.op.axis[0], factor=4)
    s[B].vectorize(B.op.axis[1])
    out = loop_partition(before("loop_partition", s, [A, B]))
    rows = [x for x in nodes(out, S.For) if x.var.name == "i.inner"]
    assert len(rows) == 2 and ("tail", True) not in rows[0].pragmas
    assert ("tail", True) in rows[1].pragmas and "i.outer" in str(rows[1].extent)
    assert not nodes(out, S.IfThenElse)
    f = tdsl.build(s, [A, B])
    rng = np.random.default_rng(2)
    for m in (1, 4, 7, 13):
        a = rng.standard_normal((m, 32)).astype(np.float32)
        got = np.full((m, 32), np.nan, np.float32)
        f(a, got)
        np.testing.assert_allclose(got, a * 2.0 + 1.0, rtol=1e-6)


def test_tiled_matmul_with_symbolic_rows_and_columns_is_right():
    """Guards on run-time sizes over constant tile loops (whose ranges simplify keeps)."""
    K = 24
    s, A, Bm, C = _tiled_matmul(tdsl.var("M"), tdsl.var("N"), K)
    f = tdsl.build(s, [A, Bm, C])
    rng = np.random.default_rng(1)
    for m, n in ((1, 1), (3, 17), (4, 16), (9, 50)):
        a = rng.standard_normal((m, K)).astype(np.float32)
        b = rng.standard_normal((K, n)).astype(np.float32)
        out = np.full((m, n), np.nan, np.float32)
        f(a, b, out)
        np.testing.assert_allclose(out, a @ b, rtol=1e-4, atol=1e-4)


def test_parallel_tail_of_one_task_is_serial():
    """Row tiles of run-time count, parallel: the tail (at most one tile) is a serial loop,
    not a fork of one task; a constant tail stays as it was. Right at every size."""
    def par_rows(m):
        A = tdsl.placeholder((m, 32), name="A")
        B = tdsl.compute((m, 32), lambda i, j: A[i, j] * 2.0 + 1.0, name="B")
        s = tdsl.create_schedule(B)
        io, ii = s[B].split(B.op.axis[0], factor=8)
        s[B].unroll(ii)
        s[B].vectorize(B.op.axis[1])
        s[B].parallel(io)
        return s, A, B

    def outer_loops(s, A, B):
        return [x for x in nodes(loop_partition(before("loop_partition", s, [A, B])), S.For)
                if x.var.name == "i.outer"]
    main, tail = outer_loops(*par_rows(tdsl.var("m")))
    assert main.kind is S.ForKind.PARALLEL
    assert tail.kind is S.ForKind.SERIAL and ("tail", True) in tail.pragmas
    assert [x.kind for x in outer_loops(*par_rows(20))] == [S.ForKind.PARALLEL] * 2
    s, A, B = par_rows(tdsl.var("m"))
    f = tdsl.build(s, [A, B])
    rng = np.random.default_rng(3)
    for m in (1, 7, 8, 9, 100):
        a = rng.standard_normal((m, 32)).astype(np.float32)
        got = np.full((m, 32), np.nan, np.float32)
        f(a, got)
        np.testing.assert_allclose(got, a * 2.0 + 1.0, rtol=1e-6)
