"""The values of the sizes alone computed into a workspace's slots (size_scratch.py,
size_values.py) instead of numpy's temporaries: each operator written in place against its
numpy meaning (registry.evaluate), a T5's relative position buckets against numpy at
sizes that grow and shrink with one workspace, views that keep the slots they read alive,
and errors that name the group."""
import numpy as np
import pytest

import tdsl.graph as G
from tdsl.graph.ir import Call, Const, Function, TensorType, Var
from tdsl.graph.ir.dims import size_var
from tdsl.graph.ir.registry import OPS, evaluate
from tdsl.graph.size_scratch import Workspace, slot_plan
from tdsl.graph.size_values import SizeValue, group_value

RNG = np.random.default_rng(5)


def _arrays(shape, dtype):
    if dtype == "bool":
        return RNG.random(shape) < 0.5
    if dtype.startswith("int"):
        return RNG.integers(-9, 10, shape).astype(dtype)
    return (RNG.random(shape) * 4 + 0.25).astype(dtype)     # positive: log and sqrt defined


FLOAT_ONLY = ["log", "exp", "sqrt", "floor", "ceil", "round", "tanh", "isnan"]
NUMERIC = ["abs", "negative", "add", "subtract", "multiply", "divide", "maximum", "minimum", "equal",
           "not_equal", "less", "greater", "less_equal", "greater_equal"]
LOGICAL = ["logical_not", "logical_and", "logical_or"]
CASES = ([(op, "float32") for op in FLOAT_ONLY + NUMERIC] + [(op, d) for op in NUMERIC for d in ("int64", "int32")]
         + [(op, "bool") for op in LOGICAL])


def test_every_operator_written_in_place_is_checked_here():
    """An operator given an `into` in the registry is one more way a value is computed:
    it joins the cases above (or the cast/where test below)."""
    assert {n for n, d in OPS.items() if d.into is not None} == set(
        FLOAT_ONLY + NUMERIC + LOGICAL + ["cast", "where"])


@pytest.mark.parametrize("op,dtype", CASES)
def test_each_operator_in_place_equals_its_numpy_meaning(op, dtype):
    binary = op not in FLOAT_ONLY + ["abs", "negative", "logical_not"]
    # operands broadcast against each other, one along a stride-0 axis
    shapes = [(3, 1, 6), (1, 4, 6)] if binary else [(3, 4, 6)]
    params = [Var(f"p{i}", TensorType(s, dtype)) for i, s in enumerate(shapes)]
    fn = Function("g", params, [Call(op, params)])
    args = [_arrays(s, dtype) for s in shapes]
    if op == "divide" and dtype != "float32":
        args[1][args[1] == 0] = 3
    got = group_value(fn, args, {})
    ref = evaluate(op, {}, args)
    assert got.dtype == ref.dtype and got.shape == ref.shape
    np.testing.assert_array_equal(got, ref)


@pytest.mark.parametrize("dtype", ["float32", "int64"])
def test_cast_where_take_reshape_in_place(dtype):
    x = Var("x", TensorType((5, 4), "float32"))
    idx = Var("i", TensorType((3, 7), "int64"))
    c = Var("c", TensorType((1, 4), "bool"))
    t = Call("transpose", [x], {"axes": [1, 0]})
    r = Call("reshape", [t], {"newshape": [2, 10]})           # of a non-contiguous view
    cast = Call("cast", [r], {"dtype": dtype})
    w = Call("where", [c, x, Const(np.array(-2.5, np.float32))])
    tk = Call("take", [w, idx], {"axis": 1})
    fn1, fn2 = Function("g", [x], [cast]), Function("h", [x, idx, c], [tk])
    xv = (RNG.standard_normal((5, 4)) * 9).astype(np.float32)
    iv = RNG.integers(-4, 4, (3, 7))        # negative indices count from the end
    cv = RNG.random((1, 4)) < 0.5
    np.testing.assert_array_equal(group_value(fn1, [xv], {}), xv.T.reshape(2, 10).astype(dtype))
    wv = np.where(cv, xv, np.float32(-2.5))
    np.testing.assert_array_equal(group_value(fn2, [xv, iv, cv], {}),
                                  np.take(wv, np.where(iv < 0, iv + 4, iv), axis=1))


def _buckets(n, num=32, distance=128):
    """A T5 encoder's relative position buckets (transformers' formula), in numpy."""
    rel = np.arange(n)[None, :] - np.arange(n)[:, None]
    half = num // 2
    out = (rel > 0).astype(np.int64) * half
    rel = np.abs(rel)
    exact = half // 2
    big = exact + (np.log(np.maximum(rel, 1).astype(np.float32) / exact) / np.log(distance / exact)
                   * (half - exact)).astype(np.int64)
    return out + np.where(rel < exact, rel, np.minimum(big, half - 1))


def _bucket_group():
    n = size_var("sequence")
    half, exact = 16, 8
    pos = Call("arange", [], {"shape": [n], "dtype": "int64"})
    rel = Call("subtract", [Call("reshape", [pos], {"newshape": [1, n]}),
                            Call("reshape", [pos], {"newshape": [n, 1]})])
    sign = Call("multiply", [Call("cast", [Call("greater", [rel, Const(np.array(0))])], {"dtype": "int64"}),
                             Const(np.array(half))])
    a = Call("abs", [rel])
    lg = Call("log", [Call("divide", [Call("cast", [Call("maximum", [a, Const(np.array(1))])],
                                                  {"dtype": "float32"}),
                                      Const(np.array(exact, np.float32))])])
    scale = np.float32((half - exact) / np.log(128 / exact))
    big = Call("add", [Call("cast", [Call("multiply", [lg, Const(scale)])], {"dtype": "int64"}),
                       Const(np.array(exact))])
    near = Call("where", [Call("less", [a, Const(np.array(exact))]), a,
                          Call("minimum", [big, Const(np.array(half - 1))])])
    return Function("buckets", [], [Call("add", [sign, near])])


def test_relative_buckets_at_growing_and_shrinking_sizes_share_one_workspace():
    fn = _bucket_group()
    step = SizeValue(fn, ["sequence"])
    sizes = [300, 7, 130, 300, 1, 64]
    grown = []
    for s in sizes:
        out = np.full((s, s), -1, np.int64)
        step.module(out, s)
        np.testing.assert_array_equal(out, _buckets(s))
        grown.append(sum(w.nbytes for w in step.workspaces.idle))
    # one workspace, grown by the largest size and never again; fewer slots than nodes
    assert len(step.workspaces.idle) == 1 and len(set(grown)) == 1
    assert len(set(step.slots.values())) < len(step.slots)


def test_a_slot_read_by_a_view_stays_alive():
    """(x + 1) viewed transposed is read after two more values were computed: their
    slots must not be the one the view reads."""
    x = Var("x", TensorType((4, 4), "float32"))
    a = Call("add", [x, Const(np.float32(1))])
    t = Call("transpose", [a], {"axes": [1, 0]})
    b = Call("multiply", [x, Const(np.float32(3))])
    c = Call("subtract", [b, Const(np.float32(2))])
    fn = Function("g", [x], [Call("add", [t, c])])
    slots = slot_plan(fn, {a, b, c, fn.outputs[0]})
    assert slots[a] not in (slots[b], slots[c])
    xv = RNG.standard_normal((4, 4)).astype(np.float32)
    np.testing.assert_array_equal(group_value(fn, [xv], {}, Workspace(), slots), (xv + 1).T + (xv * 3 - 2))


def test_an_index_out_of_range_names_the_group_and_sizes():
    n = size_var("sequence")
    table = Var("t", TensorType((4, 3), "float32"))
    pos = Call("arange", [], {"shape": [n], "dtype": "int64"})
    fn = Function("fused_take", [table], [Call("take", [table, pos], {"axis": 0})])
    step = SizeValue(fn, ["sequence"])
    step.module(np.ones((4, 3), np.float32), np.empty((4, 3), np.float32), 4)
    with pytest.raises(G.GraphError, match=r"@fused_take: .* at sequence=6 .*IndexError"):
        step.module(np.ones((4, 3), np.float32), np.empty((6, 3), np.float32), 6)
