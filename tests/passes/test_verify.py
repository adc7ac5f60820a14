"""The IR verifier (tdsl.passes.verify): it accepts well-formed IR and catches each kind of
malformed IR it claims to, naming the function, the pass and the node; lowering runs it
after every pass when TDSL_VERIFY=1 or TDSL_DEBUG is set."""
import pytest

import tdsl
from tdsl.errors import InternalError
from tdsl.ir import expr as E
from tdsl.ir import stmt as S
from tdsl.passes.gpu import Kernel
from tdsl.passes.verify import IRVerifyError, verify

from pass_ir import LOWER, func, loop

F32 = "float32"
i, j, n = E.Var("i"), E.Var("j"), E.Var("n")
A = S.Buffer("A", (n,), F32)
T = S.Buffer("T", (E.const(8),), F32)
ONE = E.FloatImm(1.0)


def store(buf, idx, value=ONE):
    return S.BufferStore(buf, value, (idx,))


def kernel_loop(body, tag="threadIdx.x", var=None, extent=8):
    return loop(var if var is not None else E.Var("tx"), extent, body,
                S.ForKind.THREAD_BINDING, tag)


def good():
    """Sizes, a let, an allocation, a kernel with a barrier, a vector loop."""
    tx, v = E.Var("tx"), E.Var("v")
    fill = kernel_loop(store(T, tx, E.BufferLoad(A, (tx,))), var=tx)
    tx2 = E.Var("tx")
    use = kernel_loop(S.LetStmt(v, tx2 * 2, store(A, v, E.BufferLoad(T, (7 - tx2,)))),
                      var=tx2)
    block = loop(E.Var("bx"), n, S.Allocate(T, S.seq(fill, S.Barrier(), use)),
                 S.ForKind.THREAD_BINDING, "blockIdx.x")
    vec = loop(i, 4, store(A, i), S.ForKind.VECTORIZED)
    return func([A, n], S.seq(block, vec))


def test_well_formed_ir_passes():
    f = good()
    assert verify(f, "test") is f


def _fails(f, match, after="some_pass"):
    with pytest.raises(IRVerifyError, match=match) as e:
        verify(f, after)
    msg = str(e.value)
    assert f"function '{f.name}'" in msg and f"after pass '{after}'" in msg
    assert isinstance(e.value, InternalError)
    return msg


@pytest.mark.parametrize("body,match", [
    (store(A, i), "variable 'i' is used where it is not defined"),
    (S.seq(loop(i, 4, S.Evaluate(i)), S.Evaluate(i)), "variable 'i' is used where"),
    (S.seq(S.LetStmt(j, E.const(1), S.Evaluate(j)), store(A, j)), "variable 'j' is used"),
    (loop(i, 4, loop(i, 2, store(A, i))), "variable 'i' is defined again inside its own"),
])
def test_undefined_and_redefined_variables(body, match):
    msg = _fails(func([A, n], body), match)
    assert "in:\n" in msg                  # the offending node follows


def test_sibling_loops_may_share_a_variable():
    verify(func([A, n], S.seq(loop(i, 4, store(A, i)), loop(i, 4, store(A, i + 4)))))


@pytest.mark.parametrize("body,match", [
    (loop(i, 8, store(T, i)), "buffer 'T' is accessed where it is neither a parameter nor"),
    (S.seq(S.Allocate(T, loop(i, 8, store(T, i))), S.Evaluate(E.BufferLoad(T, (0,)))),
     "buffer 'T' is accessed where"),
    (S.Prefetch(T, (E.const(0),), E.const(4)), "buffer 'T' is accessed"),
    (S.ExternCall("f", (T,), ((E.const(8),),), (0,)), "buffer 'T' is accessed"),
    (S.Allocate(T, S.BufferStore(T, ONE, (E.const(0), E.const(0)))),
     "buffer 'T' of 1 dimensions is accessed with 2 indices"),
])
def test_buffers_accessed_outside_their_allocation(body, match):
    _fails(func([A, n], body), match)


@pytest.mark.parametrize("node", [S.Barrier(), S.AsyncCommit()])
def test_barriers_only_inside_kernels(node):
    _fails(func([A, n], loop(i, 4, node)), f"a {type(node).__name__} outside every GPU kernel")
    # inside a virtual thread (the CPU runs those) is no kernel either
    _fails(func([A, n], kernel_loop(node, "vthread", extent=2)), "outside every GPU kernel")
    verify(func([A, n], kernel_loop(node, "blockIdx.x")))


@pytest.mark.parametrize("kind,tag,match", [
    (S.ForKind.VECTORIZED, "", r"\(vectorized\) has the non-constant extent n"),
    (S.ForKind.UNROLLED, "", r"\(unrolled\) has the non-constant extent n"),
    (S.ForKind.THREAD_BINDING, "vthread", "bound to vthread.*non-constant extent"),
])
def test_constant_extents_where_needed(kind, tag, match):
    _fails(func([A, n], loop(i, n, store(A, i), kind, tag)), match)
    verify(func([A, n], loop(i, 4, store(A, i), kind, tag)))


def test_user_mistakes_stay_the_users_errors(monkeypatch):
    """A thread loop of symbolic extent is a schedule the user must change: split_kernels
    says how, the verifier does not call it a bug of tdsl (a grid of any size is fine)."""
    monkeypatch.setenv("TDSL_VERIFY", "1")
    verify(func([A, n], loop(i, n, store(A, i), S.ForKind.THREAD_BINDING, "blockIdx.x")))
    m = tdsl.var("m")
    X = tdsl.placeholder((m,), name="X")
    Y = tdsl.compute((m,), lambda i: X[i] * 2.0, name="Y")
    s = tdsl.create_schedule(Y)
    s[Y].bind(Y.op.axis[0], tdsl.thread_axis("threadIdx.x"))
    with pytest.raises(tdsl.ScheduleError, match="non-constant extent m; split it"):
        tdsl.lower(s, [X, Y], target="cuda")


@pytest.mark.parametrize("body,match", [
    (loop(i, 4, store(A, i), S.ForKind.SERIAL, "threadIdx.x"),
     "loop 'i' of kind serial has the thread tag 'threadIdx.x'"),
    (loop(i, 4, store(A, i), S.ForKind.THREAD_BINDING),
     "of kind thread_binding has the thread tag ''"),
    (loop(i, E.FloatImm(4.0), store(A, i)), "over float32 4.0f: loops count in integers"),
    (S.IfThenElse(n, store(A, n)), "the condition has type int32"),
    (S.LetStmt(j, ONE, store(A, E.const(0))), "let 'j' of type int32 is bound to a value of type"),
    (store(A, n, E.const(1)), "a value of type int32 is stored to buffer 'A' of type float32"),
    (S.Evaluate(E.Call("exp", (E.Var("x", F32),), F32)), "variable 'x' is used"),
])
def test_types_and_loop_kinds(body, match):
    _fails(func([A, n], body), match)


def test_tensor_expression_nodes_are_not_loop_ir():
    X = tdsl.placeholder((4,), name="X")
    _fails(func([A, n], store(A, E.const(0), X[1])), r"tensor-expression node \(ProducerLoad\)")


def _split(kernel_params, body):
    f = func([O, alpha], body)
    f.attrs["kernels"] = [Kernel("f_kernel", body, kernel_params, {})]
    return f


O, alpha = S.Buffer("O", (E.const(8),), F32), E.Var("alpha", F32)


def test_kernels_use_only_their_parameters():
    bx = E.Var("bx")
    body = kernel_loop(store(O, bx, alpha), "blockIdx.x", var=bx)
    verify(_split([O, alpha], body))
    msg = _fails(_split([O], body), "variable 'alpha' is used where it is not defined")
    assert "kernel 'f_kernel'" in msg
    _fails(_split([alpha], body), "buffer 'O' is accessed where it is neither")


def test_a_pass_that_returns_no_function():
    with pytest.raises(IRVerifyError, match="pass 'p' returned SeqStmt"):
        verify(S.seq(), "p")


def _bad_pass(f):
    """Uses a variable no loop defines: the bug the verifier must pin on this pass."""
    return f.with_body(S.seq(f.body, S.Evaluate(E.Var("ghost"))))


def _schedule():
    A = tdsl.placeholder((8,), name="A")
    B = tdsl.compute((8,), lambda i: A[i] + 1.0, name="B")
    return tdsl.create_schedule(B), [A, B]


def test_lowering_verifies_after_every_pass(monkeypatch):
    broken = LOWER.PASSES[:8] + [LOWER.Pass("broken", _bad_pass)] + LOWER.PASSES[8:]
    monkeypatch.setattr(LOWER, "PASSES", broken)
    monkeypatch.setenv("TDSL_VERIFY", "1")
    with pytest.raises(IRVerifyError, match="function 'main' after pass 'broken': variable "
                       "'ghost' is used where it is not defined"):
        tdsl.lower(*_schedule())
    monkeypatch.delenv("TDSL_VERIFY")
    monkeypatch.setenv("TDSL_DEBUG", "1")
    assert LOWER.verifies()
    with pytest.raises(IRVerifyError, match="after pass 'broken'"):
        tdsl.lower(*_schedule())
    monkeypatch.delenv("TDSL_DEBUG")
    assert not LOWER.verifies()
    assert "ghost" in str(tdsl.lower(*_schedule()))     # unchecked, the bug goes through
