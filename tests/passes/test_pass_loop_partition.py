"""loop_partition alone: a loop guarded by `likely` becomes a guard-free main loop (and a
tail where the guard can fail); vector loops and unguarded loops are left alone."""
import tdsl
from tdsl.ir import expr as E
from tdsl.ir import stmt as S
from tdsl.passes.loop_partition import loop_partition

from pass_ir import before, func, loop, nodes


def _split_10_by_4(vectorize=False):
    A = tdsl.placeholder((10,), name="A")
    B = tdsl.compute((10,), lambda i: A[i] + 1.0, name="B")
    s = tdsl.create_schedule(B)
    _, ii = s[B].split(B.op.axis[0], factor=4)
    if vectorize:
        s[B].vectorize(ii)
    return before("loop_partition", s, [A, B])


def test_guard_peeled_into_main_loop_and_tail():
    f = _split_10_by_4()
    assert "likely(i.outer * 4 + i.inner < 10)" in str(f)
    out = loop_partition(f)
    main, tail = out.body.stmts
    assert str(main.extent) == "2" and str(main.body.extent) == "4"
    assert not nodes(main, S.IfThenElse)                 # the main loop runs unguarded
    assert str(tail.min) == "2" and str(tail.extent) == "1"
    assert "likely" not in str(out)


def test_guard_whose_tail_does_nothing_drops_the_tail():
    i = E.Var("i")
    A = S.Buffer("A", (E.const(100),), "float32")
    n = E.Var("n", nonneg=True)
    body = S.IfThenElse(E.likely(i < n), S.BufferStore(A, E.FloatImm(1.0), (i,)))
    out = loop_partition(func([A, n], loop(i, 100, body)))
    assert isinstance(out.body, S.For) and not nodes(out, S.IfThenElse)
    assert str(out.body.extent) == "min(n, 100)"


def test_vectorized_loop_is_not_partitioned():
    f = _split_10_by_4(vectorize=True)
    out = loop_partition(f)
    # the outer serial loop is partitioned; the vector loops keep their extent, and the
    # tail's its guard
    main, tail = out.body.stmts
    assert [str(x.body.extent) for x in (main, tail)] == ["4", "4"]
    assert not nodes(main, S.IfThenElse)
    assert "likely(i.outer * 4 + i.inner < 10)" in str(tail)


def test_loop_without_likely_guard_is_left_alone():
    i = E.Var("i")
    A = S.Buffer("A", (E.const(8),), "float32")
    body = S.IfThenElse(i < 4, S.BufferStore(A, E.FloatImm(1.0), (i,)))   # no likely()
    f = func([A], loop(i, 8, body))
    assert str(loop_partition(f)) == str(f)
