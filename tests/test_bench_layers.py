"""bench/layers.py: which family an ONNX node's time counts for."""
import os
import sys

import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402
import numpy as np  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "bench"))
layers = pytest.importorskip("layers")


def _model():
    """A ConvNeXt-style Linear on NHWC (MatMul with a weight, then Add(bias, x)) feeding
    attention-style products of two activations with a softmax between them."""
    w = helper.make_tensor("w", TensorProto.FLOAT, [8, 8], np.ones(64, np.float32))
    b = helper.make_tensor("b", TensorProto.FLOAT, [8], np.ones(8, np.float32))
    nodes = [helper.make_node("MatMul", ["x", "w"], ["lin"], name="linear"),
             helper.make_node("Add", ["b", "lin"], ["biased"], name="bias"),
             helper.make_node("Transpose", ["biased"], ["kt"], name="kt", perm=[0, 1, 3, 2]),
             helper.make_node("MatMul", ["biased", "kt"], ["scores"], name="qk"),
             helper.make_node("Softmax", ["scores"], ["p"], name="softmax", axis=-1),
             helper.make_node("MatMul", ["p", "biased"], ["y"], name="pv")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 8, 8])], [w, b])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_a_4d_product_with_a_weight_is_dense_not_attention():
    fams, back = layers.onnx_families(_model())
    assert fams["linear"] == layers.DENSE
    assert fams["qk"] == fams["softmax"] == fams["pv"] == layers.ATTENTION
    # the bias add walks back to the product that makes its activation, not to the weight
    assert back["bias"] == "linear"
    assert layers.layer_family(["bias"], "Add", fams, back) == layers.DENSE
