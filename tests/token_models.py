"""A small ONNX network over token ids of symbolic batch and sequence (an embedding gather,
a dense layer with bias, a layer norm), for the build benches' tests."""
import numpy as np
from onnx import TensorProto, helper, numpy_helper


def tokens_model():
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(a.astype(np.float32), n) for n, a in (
        ("word", rng.standard_normal((1000, 16))), ("w", rng.standard_normal((16, 16))),
        ("b", rng.standard_normal(16)), ("g", np.ones(16)), ("beta", np.zeros(16)))]
    nodes = [helper.make_node("Gather", ["word", "ids"], ["e"]),
             helper.make_node("MatMul", ["e", "w"], ["h"]),
             helper.make_node("Add", ["h", "b"], ["hb"]),
             helper.make_node("LayerNormalization", ["hb", "g", "beta"], ["y"], axis=-1)]
    g = helper.make_graph(nodes, "tokens",
                          [helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch", "sequence"])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
