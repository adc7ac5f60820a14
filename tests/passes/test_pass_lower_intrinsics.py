"""lower_intrinsics alone: the calls with a rule registered for the target become the
rule's expression; other targets, extern calls and calls without a rule are left alone."""
import pytest

import tdsl
from tdsl.ir import expr as E
from tdsl.ir import stmt as S
from tdsl.passes.intrin_rules import lower_intrinsics

from pass_ir import func, loop, nodes


@pytest.fixture
def exp_rule_for_c():
    tdsl.register_intrin_lowering(
        "exp", "c", lambda op: E.call("exp2", op.args[0] * E.const(1.4426950408889634)))
    yield
    tdsl.remove_intrin_lowering("exp", "c")


def _exp_and_sqrt():
    i = E.Var("i")
    A = S.Buffer("A", (E.const(8),), "float32")
    x = E.BufferLoad(A, (i,))
    value = E.call("exp", x) + E.call("sqrt", x) + \
        E.call_pure_extern("float32", "exp", x)
    return func([A], loop(i, 8, S.BufferStore(A, value, (i,))))


def test_calls_with_a_rule_for_the_target_are_replaced(exp_rule_for_c):
    out = lower_intrinsics(_exp_and_sqrt(), "c")
    names = [c.name for c in nodes(out, E.Call)]
    assert "exp2" in names and "sqrt" in names
    assert [c for c in nodes(out, E.Call) if c.name == "exp" and not c.extern] == []
    assert any(c.name == "exp" and c.extern for c in nodes(out, E.Call))  # as written
    assert out.attrs["intrinsics_lowered_for"] == "c"


def test_other_targets_are_left_alone(exp_rule_for_c):
    f = _exp_and_sqrt()
    out = lower_intrinsics(f, "llvm")
    assert out.body is f.body
    assert out.attrs["intrinsics_lowered_for"] == "llvm"
