"""Size classes that a network's declared bounds rule out are not compiled
(strategy/class_reach.py); the kernels stay right at every size the bounds allow, and
a kernel built under some bounds is not reused under others. Results are compared
with onnxruntime."""
import numpy as np
import pytest
import sympy
from onnx import TensorProto, helper

import tdsl
import tdsl.graph as G
from tdsl.graph import models
from tdsl.graph.strategy.class_reach import may_hold, size_intervals

pytest.importorskip("onnxruntime")


def _dense_model(k=64, n=96):
    w = np.random.default_rng(0).standard_normal((k, n)).astype(np.float32)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "sequence", k])
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "dense", [x],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          initializer=[helper.make_tensor("w", TensorProto.FLOAT, w.shape, w.ravel().tolist())])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _classes(exe):
    ((k, _, _),) = exe.steps
    return sorted(v.name.rsplit("_", 1)[1] for _, v in k.variants)


def test_conditions_within_intervals():
    b, s = tdsl.size_var("b", "int32"), tdsl.size_var("s", "int32")
    rows = b * s
    ivs = size_intervals({"b": sympy.Symbol("b"), "s": sympy.Symbol("s")},
                         {"b": (1, 8), "s": (2, 64)})
    assert ivs == {"b": (1, 8), "s": (2, 64)}
    assert not may_hold(rows >= 1000, ivs)
    assert may_hold(rows >= 512, ivs) and not may_hold(rows >= 513, ivs)
    assert not may_hold(tdsl.ir.expr.EQ(s, tdsl.const(1, "int32")), ivs)
    assert may_hold(tdsl.ir.expr.EQ(b, tdsl.const(1, "int32")), ivs)
    assert not may_hold(rows < 2, ivs) and may_hold(rows < 3, ivs)
    assert may_hold(tdsl.ir.expr.Or(rows >= 1000, s < 3), ivs)
    assert not may_hold(tdsl.ir.expr.And(b >= 8, s < 2), ivs)
    # unbounded above: anything large may hold
    assert may_hold(rows >= 10 ** 9, size_intervals({"b": sympy.Symbol("b")}, None))


@pytest.mark.parametrize("bounds, classes", [
    (None, ["small"]),
    ({"batch": (1, 8), "sequence": (1, 4)}, ["small"]),
    # at least 8 rows: never fewer than a register tile
    ({"batch": (1, 8), "sequence": (8, 64)}, []),
])
def test_variants_the_bounds_rule_out_are_not_compiled(bounds, classes):
    m = _dense_model()
    exe = G.build(G.optimize(G.from_onnx(m, dims=bounds)))
    assert _classes(exe) == classes
    rng = np.random.default_rng(1)
    lo = {n: (bounds or {}).get(n, (1, None))[0] for n in ("batch", "sequence")}
    hi = {n: (bounds or {}).get(n, (1, 40))[1] for n in ("batch", "sequence")}
    for b, s in {(lo["batch"], lo["sequence"]), (hi["batch"], hi["sequence"]),
                 (lo["batch"], hi["sequence"]), (hi["batch"], lo["sequence"])}:
        v = rng.standard_normal((b, s, 64)).astype(np.float32)
        ref = models.onnxruntime_run(m, {"x": v})[0]
        np.testing.assert_allclose(exe.run(v)[0], ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max())


def _heads_model():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "sequence", 256])
    shp = helper.make_tensor("shp", TensorProto.INT64, [4], [0, 0, 4, 64])
    nodes = [helper.make_node("Reshape", ["x", "shp"], ["r"]),
             helper.make_node("Transpose", ["r"], ["y"], perm=[0, 2, 3, 1])]
    g = helper.make_graph(nodes, "heads", [x], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          initializer=[shp])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_a_kernel_built_under_bounds_is_not_reused_without_them():
    """The heads' transpose has classes for a single token and a short sequence; a
    sequence bounded to 64 and more takes neither, and the same group in a network
    without bounds still gets both, and is right at a single token."""
    m = _heads_model()
    bounded = G.build(G.optimize(G.from_onnx(m, dims={"sequence": (64, 512)})))
    assert _classes(bounded) == []
    free = G.build(G.optimize(G.from_onnx(m)))
    # (the short class runs the kernel itself: its schedule is the kernel's)
    assert len(free.steps[0][0].variants) == 2
    rng = np.random.default_rng(2)
    for exe, shapes in ((bounded, [(1, 64), (2, 77)]), (free, [(1, 1), (3, 5), (2, 77)])):
        for shape in shapes:
            v = rng.standard_normal(shape + (256,)).astype(np.float32)
            np.testing.assert_array_equal(exe.run(v)[0], v.reshape(shape + (4, 64)).transpose(0, 2, 3, 1))
