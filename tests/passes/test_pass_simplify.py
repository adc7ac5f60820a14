"""simplify as a pass of the pipeline (its rules one by one: tests/test_simplify_pass.py):
after storage_flatten, a fused axis's `f // 6 * 6 + f % 6` is `f` again, and a loop of one
iteration is replaced by its body; what is already simple is left as it is."""
import tdsl
from tdsl.ir import expr as E
from tdsl.ir import stmt as S
from tdsl.passes.simplify import simplify_func

from pass_ir import before, func, loop


def test_flattened_index_of_a_fused_axis_folds_back():
    A = tdsl.placeholder((4, 6), name="A")
    B = tdsl.compute((4, 6), lambda i, j: A[i, j] + 1.0, name="B")
    s = tdsl.create_schedule(B)
    s[B].fuse(*B.op.axis)
    f = before("simplify", s, [A, B], nth=1)
    assert "B[i.j.fused // 6 * 6 + i.j.fused % 6]" in str(f)
    assert "B[i.j.fused] = A[i.j.fused] + 1.0f" in str(simplify_func(f))


def test_peeled_tail_of_one_iteration_loses_its_loop():
    A = tdsl.placeholder((10,), name="A")
    B = tdsl.compute((10,), lambda i: A[i] + 1.0, name="B")
    s = tdsl.create_schedule(B)
    s[B].split(B.op.axis[0], factor=4)
    f = before("simplify", s, [A, B], nth=1)
    assert "for i.outer in range(2, 3):" in str(f)
    out = simplify_func(f)
    assert "range(2, 3)" not in str(out)
    assert "B[i.inner + 8] = A[i.inner + 8] + 1.0f" in str(out)


def test_simple_ir_is_returned_unchanged():
    i = E.Var("i")
    A = S.Buffer("A", (E.const(8),), "float32")
    f = func([A], loop(i, 8, S.BufferStore(A, E.FloatImm(1.0), (i,))))
    out = simplify_func(f)
    assert out.body is f.body
