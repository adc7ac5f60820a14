"""ReduceMax/ReduceMin over an empty set give the identity of the operation for every
dtype (max: the lowest value, False for bool; min: the highest, True for bool), whether
the input arrives at run time or is folded as a constant; the ONNX backend's own
empty-set cases are in test_graph_onnx_nodes."""
import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402

import tdsl.graph as G  # noqa: E402

DTYPES = {"bool": TensorProto.BOOL, "int8": TensorProto.INT8, "uint8": TensorProto.UINT8,
          "int32": TensorProto.INT32, "int64": TensorProto.INT64, "float32": TensorProto.FLOAT,
          "float64": TensorProto.DOUBLE}


def _identity(op, dtype):
    if dtype == "bool":
        return op == "ReduceMin"
    if dtype.startswith("float"):
        return -np.inf if op == "ReduceMax" else np.inf
    info = np.iinfo(dtype)
    return info.min if op == "ReduceMax" else info.max


def _model(op, dtype, as_constant):
    t = DTYPES[dtype]
    axes = helper.make_tensor("axes", TensorProto.INT64, [1], [1])
    out = helper.make_tensor_value_info("y", t, [2, 1, 3])
    if as_constant:
        data = helper.make_tensor("x", t, [2, 0, 3], [])
        g = helper.make_graph([helper.make_node(op, ["x", "axes"], ["y"], keepdims=1)], "g",
                              [], [out], [data, axes])
    else:
        g = helper.make_graph([helper.make_node(op, ["x", "axes"], ["y"], keepdims=1)], "g",
                              [helper.make_tensor_value_info("x", t, [2, 0, 3])], [out], [axes])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])


@pytest.mark.parametrize("dtype", sorted(DTYPES))
@pytest.mark.parametrize("op", ["ReduceMax", "ReduceMin"])
def test_empty_reduction_gives_the_identity(op, dtype):
    want = np.full((2, 1, 3), _identity(op, dtype), dtype)
    exe = G.build(G.optimize(G.from_onnx(_model(op, dtype, as_constant=False))))
    (got,) = exe.run(np.zeros((2, 0, 3), dtype))
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)
    exe = G.build(G.optimize(G.from_onnx(_model(op, dtype, as_constant=True))))
    (got,) = exe.run()
    np.testing.assert_array_equal(got, want)


def test_bool_reductions_over_real_data():
    x = np.array([[[True, False, False]], [[False, False, False]]]).reshape(2, 1, 3)
    x = np.concatenate([x, ~x], axis=1)           # (2, 2, 3)
    for op, ref in (("ReduceMax", np.any), ("ReduceMin", np.all)):
        t = TensorProto.BOOL
        g = helper.make_graph(
            [helper.make_node(op, ["x", "axes"], ["y"], keepdims=0)], "g",
            [helper.make_tensor_value_info("x", t, [2, 2, 3])],
            [helper.make_tensor_value_info("y", t, [2, 3])],
            [helper.make_tensor("axes", TensorProto.INT64, [1], [1])])
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
        (got,) = G.build(G.optimize(G.from_onnx(m))).run(x)
        np.testing.assert_array_equal(got, ref(x, axis=1))
