"""The registry of graph operator implementations (tdsl/graph/strategy/registry.py): the
order they are tried in, which one defines a node and which one schedules a group, and
registrations that last for a `with` block."""
import numpy as np
import pytest

import tdsl
import tdsl.graph as G
from tdsl.graph import GraphError, strategy
from tdsl.graph.ir import Const, Function
from tdsl.graph.strategy import registry
from tdsl.graph.strategy.cpu.schedule import schedule_llvm
from tdsl.graph.strategy.groupdef import GroupDef


def _groups(mod):
    return [(n.op, {i: a.data for i, a in enumerate(n.args) if isinstance(a, Const)})
            for n in mod.main.nodes() if isinstance(n.op, Function)]


def _relu_module(shape=(8, 32)):
    x = G.Var("x", G.TensorType(shape, "float32"))
    return G.optimize(G.Module(G.Function("main", [x], [G.Call("nn.relu", [x])])))


def test_implementations_are_tried_highest_priority_first():
    prios = [i.priority for i in strategy.implementations()]
    assert prios == sorted(prios, reverse=True)
    names = [i.name for i in strategy.implementations()]
    assert len(set(names)) == len(names) and names[-2:] == ["topi", "auto"]


def test_tags_are_distinct():
    values = [v for k, v in vars(strategy.tag).items() if k.isupper()]
    assert len(set(values)) == len(values)


def test_a_node_takes_the_first_implementation_that_applies():
    (fn, consts), = _groups(_relu_module())
    seen = []

    def never(g, n):
        seen.append(n.op)
        return False

    low = strategy.Implementation("low_relu", 50, ("nn.relu",), "cpu", never, compute=lambda g, n, t: None)
    with strategy.registered(low):
        g = GroupDef(fn, consts, "llvm")
        out = g.build()
    assert seen == ["nn.relu"] and out.op.tag == "" and g.anchor is None     # topi's relu
    assert low not in strategy.implementations()


def test_a_group_without_an_anchor_takes_the_fallback_schedule():
    (fn, consts), = _groups(_relu_module())
    g = GroupDef(fn, consts, "llvm")
    out = g.build()
    s = tdsl.create_schedule(out)
    assert registry.schedule(s, out, g, "cpu").name == "auto"


def test_an_anchor_schedules_its_group_where_it_fits():
    (fn, consts), = _groups(_relu_module())
    ran = []

    def compute(g, n, tensors):
        x = g.operand(n.args[0], tensors)
        y = tdsl.compute(x.shape, lambda i, j: tdsl.max(x[i, j], tdsl.const(0, x.dtype)), name="r")
        return strategy.tag.mark(y, "toy", rows=2)

    def schedule(s, out, g, parallel=True):
        ran.append(g.anchor.tensor.op.attrs["rows"])

    for fits, want in ((None, [2]), (lambda out, g: False, [])):
        impl = strategy.Implementation("toy", 100, ("nn.relu",), "cpu", compute=compute,
                                       schedules={"cpu": schedule}, fits=fits)
        with strategy.registered(impl):
            g = GroupDef(fn, consts, "llvm")
            out = g.build()
            assert g.anchor.impl is impl and g.anchor.tensor is out and out.op.tag == "toy"
            ran.clear()
            schedule_llvm(tdsl.create_schedule(out), out, g)
            assert ran == want
            if not want:
                assert g.explanation is not None        # the auto-scheduler's rules ran


def test_registering_forgets_the_kernels_built_before():
    mod = _relu_module((4, 16))
    x = np.arange(-32, 32, dtype=np.float32).reshape(4, 16)
    G.build(mod).run(x)
    ran = []

    def schedule(s, out, g, parallel=True):
        ran.append(out.op.name)

    impl = strategy.Implementation("toy_fallback", 100, schedules={"cpu": schedule})
    with strategy.registered(impl):
        np.testing.assert_array_equal(G.build(mod).run(x)[0], np.maximum(x, 0))
    assert ran                      # not the kernel compiled before the registration


def test_names_are_unique():
    with pytest.raises(GraphError, match="registered already"):
        strategy.register(strategy.Implementation("topi", 0))
    assert [i.name for i in strategy.implementations()][-2:] == ["topi", "auto"]
