"""legalize_bf16 alone: bfloat16 arithmetic becomes float32 arithmetic rounded back after
each operation; float32 math on converted loads and IR without bfloat16 are left alone."""
import tdsl
from tdsl.ir import expr as E
from tdsl.passes.legalize_bf16 import legalize_bf16

from pass_ir import before, func, nodes


def _bf16_and_f32():
    A = tdsl.placeholder((8,), name="A", dtype="bfloat16")
    B = tdsl.compute((8,), lambda i: A[i] * A[i] + tdsl.const(1.0, "bfloat16"), name="B")
    C = tdsl.compute((8,), lambda i: A[i].astype("float32") * 2.0, name="C")
    s = tdsl.create_schedule([B.op, C.op])
    return before("legalize_bf16", s, [A, B, C])


def test_bf16_arithmetic_goes_through_float32():
    f = _bf16_and_f32()
    assert "B[i] = A[i] * A[i] + 1.0" in str(f)
    out = legalize_bf16(f)
    assert "B[i] = bfloat16(float32(bfloat16(float32(A[i]) * float32(A[i]))) + " \
        "float32(bfloat16(1.0f)))" in str(out)
    for op in nodes(out, E.BinaryOp):
        assert op.a.dtype != "bfloat16" and op.b.dtype != "bfloat16"


def test_float32_math_on_converted_loads_is_left_alone():
    f = _bf16_and_f32()
    out = legalize_bf16(f)
    assert f.body.stmts[1] is out.body.stmts[1]      # C[i] = float32(A[i]) * 2.0f
    g = func(f.params, f.body.stmts[1])
    assert legalize_bf16(g) is g                     # no bfloat16 arithmetic: the same function
