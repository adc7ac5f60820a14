"""The graph's concatenation (one load from a chosen input: tdsl/codegen/llvm/select_load.py) in a
small network against onnxruntime, static and with a symbolic batch: ragged channel counts
(4, 1, 3, 17, 32), fused into a batch norm and ReLU and read by another kernel."""
import numpy as np
import pytest

RNG = np.random.default_rng(0)

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")


def _net(batch):
    """Convs of 1, 3, 17 and 32 channels concatenated with the input, then a batch norm and
    ReLU (DenseNet's pattern), and the concatenation itself as a second output."""
    from onnx import TensorProto, helper, numpy_helper
    inits, nodes, parts = [], [], ["x"]
    for k, c in enumerate([1, 3, 17, 32]):
        w = numpy_helper.from_array((RNG.standard_normal((c, 4, 1, 1)) * 0.5).astype(np.float32), f"w{k}")
        inits.append(w)
        nodes.append(helper.make_node("Conv", ["x", f"w{k}"], [f"f{k}"]))
        parts.append(f"f{k}")
    total = 4 + 1 + 3 + 17 + 32
    nodes.append(helper.make_node("Concat", parts, ["cat"], axis=1))
    for name in ("g", "b", "m"):
        inits.append(numpy_helper.from_array(RNG.standard_normal(total).astype(np.float32), name))
    inits.append(numpy_helper.from_array(RNG.uniform(0.5, 2, total).astype(np.float32), "v"))
    nodes.append(helper.make_node("BatchNormalization", ["cat", "g", "b", "m", "v"], ["bn"]))
    nodes.append(helper.make_node("Relu", ["bn"], ["y"]))
    nodes.append(helper.make_node("Sigmoid", ["cat"], ["s"]))
    g = helper.make_graph(nodes, "cat", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 4, 5, 7])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
                           helper.make_tensor_value_info("s", TensorProto.FLOAT, None)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("batch", [2, "batch"], ids=["static", "symbolic"])
def test_graph_concat_against_onnxruntime(batch):
    import tdsl.graph as G
    from tdsl.graph import models
    m = _net(batch)
    exe = G.build(G.optimize(G.from_onnx(m)))
    for b in ([2] if batch == 2 else [1, 3, 2]):
        x = np.random.default_rng(b).standard_normal((b, 4, 5, 7)).astype(np.float32)
        got = exe.run(x)
        want = models.onnxruntime_run(m, {"x": x})
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5 * np.abs(w).max())
