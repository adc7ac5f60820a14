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
    assert back["bias"] == ("linear",)
    assert layers.layer_family(["bias"], "Add", fams, back) == layers.DENSE


def test_an_openvino_reorder_counts_with_the_layer_it_feeds():
    # the image's NCHW -> NHWC reorder before the stem (tdsl's stem does it in its padding
    # pass), a chain of two reorders before a depthwise conv, and the output's reorder back
    # to NCHW after a pool (tdsl's last kernel writes NCHW itself)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 4, 4])
    w1 = helper.make_tensor("w1", TensorProto.FLOAT, [8, 3, 3, 3], np.ones(216, np.float32))
    w2 = helper.make_tensor("w2", TensorProto.FLOAT, [8, 1, 3, 3], np.ones(72, np.float32))
    nodes = [helper.make_node("Conv", ["x", "w1"], ["s"], name="stem", strides=[2, 2], pads=[1] * 4),
             helper.make_node("Relu", ["s"], ["r"], name="relu"),
             helper.make_node("Conv", ["r", "w2"], ["d"], name="dw", group=8, pads=[1] * 4),
             helper.make_node("MaxPool", ["d"], ["y"], name="pool", kernel_shape=[2, 2], strides=[2, 2])]
    model = helper.make_model(helper.make_graph(nodes, "g", [x], [y], [w1, w2]),
                              opset_imports=[helper.make_opsetid("", 17)])
    fams, back = layers.onnx_families(model)
    rows = [("x", "Input", [], ["x_abcd_acdb_stem"], []),
            ("x_abcd_acdb_stem", "Reorder", [], ["stem"], ["x"]),
            ("stem", "Convolution", ["stem", "relu"], ["re1"], ["x_abcd_acdb_stem"]),
            ("re1", "Reorder", [], ["re2"], ["stem"]),
            ("re2", "Reorder", [], ["dw"], ["re1"]),
            ("dw", "Convolution", ["dw"], ["pool"], ["re2"]),
            ("pool", "Pooling", ["pool"], ["pool_acdb_abcd_y"], ["dw"]),
            ("pool_acdb_abcd_y", "Reorder", [], ["y"], ["pool"]),
            ("y", "Output", [], [], ["pool_acdb_abcd_y"])]
    got = layers.ov_families(rows, fams, back)
    assert got["stem"] == got["x_abcd_acdb_stem"] == "3x3/s2"
    assert got["dw"] == got["re1"] == got["re2"] == "depthwise 3x3"
    assert got["pool"] == got["pool_acdb_abcd_y"] == "pooling"
    # a reorder with neither a layer to feed nor one feeding it stays a reorder
    assert layers.ov_families([("lone", "Reorder", [], [], [])], fams, back)["lone"] == layers.ELEMENTWISE


def test_conv_layers_anchor_walks_back_through_epilogues_only():
    """bench/conv_layers.py: a layer counts for the conv its epilogue (batch norm, GELU's
    element-wise operators) follows; a transpose after the conv ends the walk, so an add
    behind it (Whisper's positional embedding) is no conv's."""
    conv_layers = pytest.importorskip("conv_layers")
    w = helper.make_tensor("w", TensorProto.FLOAT, [4, 2, 3], np.ones(24, np.float32))
    half = helper.make_tensor("half", TensorProto.FLOAT, [], [0.5])
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", kernel_shape=[3], pads=[1, 1]),
             helper.make_node("Erf", ["c"], ["e"], name="erf"),
             helper.make_node("Mul", ["c", "e"], ["g"], name="gelu"),
             helper.make_node("Mul", ["g", "half"], ["g2"], name="gelu_half"),
             helper.make_node("Transpose", ["g2"], ["t"], name="t", perm=[0, 2, 1]),
             helper.make_node("Add", ["t", "t"], ["y"], name="pos")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 5])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 5, 4])], [w, half])
    rows, ops, back = conv_layers.conv_rows(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))
    assert rows == {"conv": "2->4 k3 -> 5"}
    assert conv_layers.anchor(["gelu_half"], rows, ops, back) == "conv"
    assert conv_layers.anchor(["erf", "gelu"], rows, ops, back) == "conv"
    assert conv_layers.anchor(["pos"], rows, ops, back) is None
    assert conv_layers.anchor(["t"], rows, ops, back) is None


def _transformer_bits():
    """A projection, its residual add and a transpose after it, a layer norm, and a
    ReduceMean over the hidden axis (an RMS norm's)."""
    w = helper.make_tensor("w", TensorProto.FLOAT, [8, 8], np.ones(64, np.float32))
    nodes = [helper.make_node("MatMul", ["x", "w"], ["lin"], name="proj"),
             helper.make_node("Add", ["lin", "x"], ["res"], name="residual"),
             helper.make_node("Transpose", ["res"], ["t"], name="reorder", perm=[0, 2, 1]),
             helper.make_node("ReduceMean", ["t"], ["m"], name="rms_mean", axes=[-1]),
             helper.make_node("LayerNormalization", ["t", "g", "b"], ["y"], name="ln", axis=-1)]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 8]),
                           helper.make_tensor_value_info("m", TensorProto.FLOAT, [1, 8, 1])],
                          [w, helper.make_tensor("g", TensorProto.FLOAT, [8], np.ones(8, np.float32)),
                           helper.make_tensor("b", TensorProto.FLOAT, [8], np.ones(8, np.float32))])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_a_hidden_axis_mean_is_a_norm_and_a_fused_norm_layer_counts_as_one():
    fams, back = layers.onnx_families(_transformer_bits())
    assert fams["rms_mean"] == fams["ln"] == "softmax/norm"
    # onnxruntime's SkipLayerNormalization is named after the residual add it takes in
    assert layers.layer_family(["residual"], "SkipLayerNormalization", fams, back) == "softmax/norm"
    # a residual add and a transpose run alone count with the product before them
    assert layers.layer_family(["reorder"], "Transpose", fams, back) == layers.DENSE
    # a softmax inside attention stays attention
    fams2, back2 = layers.onnx_families(_model())
    assert layers.layer_family(["softmax"], "Softmax", fams2, back2) == layers.ATTENTION


def test_tdsl_kernels_without_an_anchor_walk_back_as_the_runtimes_layers_do():
    import tdsl.graph as G
    model = _transformer_bits()
    fams, back = layers.onnx_families(model)
    mod = G.optimize(G.from_onnx(model), target="llvm")
    got = {}
    for n in mod.main.nodes():
        if isinstance(n.op, G.Function):
            got[n.span] = layers.tdsl_kernel_family(n, fams, back)
    # every kernel is found by its last ONNX node; none is left in the elementwise row
    assert got and set(got) <= set(fams)
    assert layers.ELEMENTWISE not in got.values(), got
    assert got.get("ln") == "softmax/norm" and got.get("rms_mean") == "softmax/norm", got


def test_a_residual_add_counts_with_its_projection_not_the_norm_before():
    # LayerNorm(h) feeds a projection and the residual add after it; the add run alone
    # counts with the projection (a product wins over a norm as near), whichever input
    # comes first
    w = helper.make_tensor("w", TensorProto.FLOAT, [8, 8], np.ones(64, np.float32))
    g8 = helper.make_tensor("g", TensorProto.FLOAT, [8], np.ones(8, np.float32))
    nodes = [helper.make_node("LayerNormalization", ["x", "g", "g"], ["h"], name="ln", axis=-1),
             helper.make_node("MatMul", ["h", "w"], ["p"], name="proj"),
             helper.make_node("Add", ["h", "p"], ["y"], name="residual")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 8])], [w, g8])
    fams, back = layers.onnx_families(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))
    assert back["residual"] == ("ln", "proj")
    assert layers.layer_family(["residual"], "Add", fams, back) == layers.DENSE
    # onnxruntime's fused GELU layer is named after no node: it counts with the product
    assert layers.layer_family([], "FastGelu", fams, back) == layers.DENSE


def _residual_stream():
    """A blocked residual stream (stem conv, a conv with its residual add, a global pool)
    read also by a 1x1 conv whose output only the network's output reads: that tail runs
    in NCHW, and the stream's image reaches it through a layout kernel of its own."""
    rng = np.random.default_rng(0)

    def w(name, *shape):
        return helper.make_tensor(name, TensorProto.FLOAT, list(shape), rng.standard_normal(shape).astype(np.float32))
    nodes = [helper.make_node("Conv", ["x", "w1"], ["s"], name="stem", pads=[1] * 4),
             helper.make_node("Relu", ["s"], ["r"], name="stem_relu"),
             helper.make_node("Conv", ["r", "w2"], ["c"], name="conv", pads=[1] * 4),
             helper.make_node("Add", ["c", "r"], ["a"], name="residual"),
             helper.make_node("Relu", ["a"], ["y2"], name="relu"),
             helper.make_node("Conv", ["y2", "w3"], ["c3"], name="conv3", pads=[1] * 4),
             helper.make_node("Add", ["c3", "y2"], ["a3"], name="residual3"),
             helper.make_node("GlobalAveragePool", ["a3"], ["y"], name="pool"),
             helper.make_node("Conv", ["y2", "w4"], ["t"], name="tail")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 12, 12])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 32, 1, 1]),
                           helper.make_tensor_value_info("t", TensorProto.FLOAT, [1, 64, 12, 12])],
                          [w("w1", 32, 16, 3, 3), w("w2", 32, 32, 3, 3), w("w3", 32, 32, 3, 3),
                           w("w4", 64, 32, 1, 1)])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_a_tdsl_layout_kernel_counts_with_the_kernel_it_feeds():
    import tdsl.graph as G
    model = _residual_stream()
    fams, back = layers.onnx_families(model)
    mod = G.optimize(G.from_onnx(model), target="llvm -mcpu=znver4")
    calls = [n for n in mod.main.nodes() if isinstance(n.op, G.Function)]
    reorders = [c for c in calls if layers.is_reorder(c)]
    assert reorders, "the tail conv no longer reads the stream through a layout kernel"
    got = layers.tdsl_families(calls, fams, back)
    # the tail conv's input, and the pooled output's reshape back to NCHW (made by the pool)
    assert {got[c] for c in reorders} == {"1x1", "pooling"}
    assert layers.tdsl_kernel_family(reorders[0], fams, back) == layers.ELEMENTWISE
    assert layers.ELEMENTWISE not in got.values(), got


def test_an_onnxruntime_reorder_counts_with_the_node_it_feeds():
    # the graph onnxruntime runs: the image reordered into NCHWc for the stem, the
    # stream reordered back to NCHW for the tail conv (which it runs in NCHW) and for
    # the network's output
    model = _residual_stream()
    fams, back = layers.onnx_families(model)
    nchwc = "com.microsoft.nchwc"
    nodes = [helper.make_node("ReorderInput", ["x"], ["xb"], name="ReorderInput", domain=nchwc),
             helper.make_node("Conv", ["xb", "w1"], ["s"], name="stem_relu_nchwc", domain=nchwc),
             helper.make_node("ReorderOutput", ["s"], ["y2"], name="ReorderOutput_token_1", domain=nchwc),
             helper.make_node("Conv", ["y2", "w4"], ["t"], name="tail"),
             helper.make_node("ReorderOutput", ["s"], ["y"], name="ReorderOutput_token_2", domain=nchwc)]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 12, 12])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
                           helper.make_tensor_value_info("t", TensorProto.FLOAT, None)])
    keys = sorted((k for k in fams if k), key=len, reverse=True)
    got = layers.ort_reorder_families(helper.make_model(g), keys, fams, back)
    assert got == {"ReorderInput": "3x3", "ReorderOutput_token_1": "1x1", "ReorderOutput_token_2": "3x3"}
