"""storage_flatten alone: n-d accesses become one row-major index (storage_align pads a
stride); parameters keep their n-d Buffer, allocations become flat; 1-d IR is left as it
is."""
import tdsl
from tdsl.ir import expr as E
from tdsl.ir import stmt as S
from tdsl.passes.storage_flatten import storage_flatten

from pass_ir import before, func, loop, nodes


def _staged(align=False):
    A = tdsl.placeholder((4, 6), name="A")
    B = tdsl.compute((4, 6), lambda i, j: A[i, j] * 2.0, name="B")
    C = tdsl.compute((4, 6), lambda i, j: B[i, j] + 1.0, name="C")
    s = tdsl.create_schedule(C)
    s[B].compute_at(s[C], C.op.axis[0])
    if align:
        s[B].storage_align(B.op.axis[0], 8, 1)
    return before("storage_flatten", s, [A, C])


def test_accesses_become_row_major_flat_indices():
    f = _staged()
    assert "C[i, j_1] = B[0, j_1] + 1.0f" in str(f)
    out = storage_flatten(f)
    text = str(out)
    assert "B = allocate((6), float32" in text
    assert "B[j] = A[i * 6 + j] * 2.0f" in text
    assert "C[i * 6 + j_1] = B[j_1] + 1.0f" in text
    assert out.params == f.params                       # argument buffers keep their shape
    assert all(len(x.indices) == 1 for x in nodes(out, (E.BufferLoad, S.BufferStore)))


def test_storage_align_pads_the_stride():
    out = storage_flatten(_staged(align=True))
    # B is (1, 6); the stride of axis 0 goes from 6 up to 9 (9 % 8 == 1)
    assert "B = allocate((9), float32" in str(out)


def test_flat_ir_is_left_as_it_is():
    i = E.Var("i")
    A = S.Buffer("A", (E.const(8),), "float32")
    T = S.Buffer("T", (E.const(8),), "float32")
    body = S.Allocate(T, S.seq(loop(i, 8, S.BufferStore(T, E.FloatImm(1.0), (i,))),
                               loop(i, 8, S.BufferStore(A, E.BufferLoad(T, (i,)), (i,)))))
    f = func([A], body)
    assert str(storage_flatten(f)) == str(f)
