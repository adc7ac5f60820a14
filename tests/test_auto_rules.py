"""The auto-scheduler as ordered lists of rules (tdsl/autosched/rule.py): the lists' order
and names, one inline rule for every target family, a rule list given to auto_schedule is
the one applied, and the package's modules reach no private name of one another."""
import ast
import pathlib

import pytest

import tdsl
from tdsl.autosched import CPU_RULES, GPU_RULES, INLINE_PHASE, SCHEDULE_PHASE, Rule
from tdsl.autosched.inline import INLINE, MATERIALIZE


def _softmax(n=64, m=200):
    X = tdsl.placeholder((n, m), name="X")
    k = tdsl.reduce_axis((0, m), name="k")
    mx = tdsl.compute((n,), lambda i: tdsl.max(X[i, k], axis=k), name="mx")
    ex = tdsl.compute((n, m), lambda i, j: tdsl.exp(X[i, j] - mx[i]), name="ex")
    k2 = tdsl.reduce_axis((0, m), name="k2")
    sm = tdsl.compute((n,), lambda i: tdsl.sum(ex[i, k2], axis=k2), name="sm")
    return tdsl.compute((n, m), lambda i, j: ex[i, j] / sm[i], name="Y")


def _scaled_matmul():
    A = tdsl.placeholder((64, 32), name="A")
    B = tdsl.placeholder((32, 48), name="B")
    A2 = tdsl.compute((64, 32), lambda i, k: A[i, k] * 2.0, name="A2")
    k = tdsl.reduce_axis((0, 32), name="k")
    return tdsl.compute((64, 48), lambda i, j: tdsl.sum(A2[i, k] * B[k, j], axis=k), name="C")


def test_the_lists_order_and_names():
    assert [r.name for r in CPU_RULES] == [
        "stencil", "materialize", "inline",
        "update", "stencil tile", "tensorize", "dot-tile", "register-tile", "reduction", "elementwise"]
    assert [r.name for r in GPU_RULES] == [
        "materialize", "inline", "update", "row-group", "tensorize", "block-tile", "cross-thread", "bind"]
    for rules in (CPU_RULES, GPU_RULES):
        assert all(isinstance(r, Rule) for r in rules)
        phases = [r.phase for r in rules]
        # the inline phase's rules first: the list reads in the order the rules run
        assert phases == sorted(phases, key=[INLINE_PHASE, SCHEDULE_PHASE].index)
        assert len({r.name for r in rules}) == len(rules)


def test_one_inline_rule_for_every_family():
    assert INLINE in CPU_RULES and INLINE in GPU_RULES
    assert MATERIALIZE in CPU_RULES and MATERIALIZE in GPU_RULES
    for target in ("llvm", "cuda"):
        e = tdsl.auto_schedule(_scaled_matmul(), target).explain()
        assert e.rules("A2")[0] == "materialize"


def test_a_rule_list_given_is_the_one_applied():
    before = list(CPU_RULES)
    Y = _softmax()
    assert "inline" not in tdsl.auto_schedule(Y, "llvm").explain().rules()   # exp is kept
    # without the materialize rule the costly exp is inlined into both readers
    rules = [r for r in CPU_RULES if r is not MATERIALIZE]
    e = tdsl.auto_schedule(Y, "llvm", rules=rules).explain()
    assert e.rules("ex") == ["inline"]
    # no rule of the schedule phase: nothing but the inline phase's decisions
    e = tdsl.auto_schedule(Y, "llvm", rules=[r for r in CPU_RULES
                                             if r.phase == INLINE_PHASE]).explain()
    assert set(e.rules()) == {"materialize"}
    assert CPU_RULES == before


class Serial(Rule):
    """Leaves every stage it is offered as it is."""
    name = "serial"

    def apply(self, ctx, stage):
        self.note(ctx, stage, "none", "a test rule")


class Declines(Rule):
    name = "declines"

    def apply(self, ctx, stage):
        self.note(ctx, stage, "none", "hands the stage on")
        return False


def test_first_rule_that_applies_takes_the_stage():
    Y = _softmax()
    rules = [r for r in CPU_RULES if r.phase == INLINE_PHASE] + [Declines(), Serial()]
    rules += [r for r in CPU_RULES if r.phase == SCHEDULE_PHASE]
    s = tdsl.auto_schedule(Y, "llvm", rules=rules)
    # the plan computes mx, ex and sm in Y's row loop: Y alone is offered
    assert s.explain().rules("Y") == ["declines", "serial"]
    assert s.explain().rules("mx") == []
    gpu = tdsl.auto_schedule(Y, "cuda", rules=[INLINE, Serial()]).explain()
    # ex inlined; the plan groups mx and sm with Y's rows: Y alone is offered
    assert [(d.stage, d.rule) for d in gpu.decisions] == [("ex", "inline"), ("Y", "serial")]
    built = tdsl.build(tdsl.auto_schedule(Y, "llvm", rules=[Serial()]), target="llvm")
    assert built is not None


def test_what_is_not_a_rule_is_refused():
    with pytest.raises(tdsl.ScheduleError, match="not a rule"):
        tdsl.auto_schedule(_softmax(), "llvm", rules=[INLINE, "elementwise"])


def test_no_module_reaches_a_private_name_of_another():
    """Inside tdsl/autosched: no `from .x import _name`, no `x._name` on another module."""
    root = pathlib.Path(tdsl.__file__).parent / "autosched"
    bad = []
    for path in sorted(root.glob("*.py")):
        tree = ast.parse(path.read_text())
        modules = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                for a in node.names:
                    if a.name.startswith("_") and not a.name.startswith("__"):
                        bad.append(f"{path.name}:{node.lineno}: imports {a.name}")
                    modules.add(a.asname or a.name)
            elif isinstance(node, ast.Import):
                modules |= {(a.asname or a.name).split(".")[0] for a in node.names}
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr.startswith("_") and \
                    not node.attr.startswith("__") and isinstance(node.value, ast.Name) and \
                    node.value.id in modules:
                bad.append(f"{path.name}:{node.lineno}: {node.value.id}.{node.attr}")
    assert bad == []
