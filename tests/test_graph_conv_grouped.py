"""Grouped and depthwise convolutions through tdsl.graph (tdsl/graph/strategy/cpu/conv_grouped.py):
ONNX Conv nodes with fused epilogues at every group count, stride, dilation, kernel size,
odd plane size and asymmetric padding, against onnxruntime. The CI runs this file again
with TDSL_HOST_CPU=haswell (8-lane vectors, 16 registers)."""
import numpy as np
import pytest

import tdsl.graph as G

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402


def _model(cin, hw, cout, groups, k, strides=(1, 1), dil=(1, 1), pads=None, act=None, residual=False,
           bn=False, weight_input=False, seed=0, batch=1):
    rng = np.random.default_rng(seed)
    kh, kw = (k, k) if isinstance(k, int) else k
    h, w = (hw, hw) if isinstance(hw, int) else hw
    if pads is None:
        pads = [dil[0] * (kh // 2), dil[1] * (kw // 2)] * 2
    wt = (rng.standard_normal((cout, cin // groups, kh, kw)) / np.sqrt(kh * kw * cin / groups)).astype(np.float32)
    b = rng.standard_normal(cout).astype(np.float32)
    inits = [numpy_helper.from_array(b, "b")]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, cin, h, w])]
    if weight_input:
        inputs.append(helper.make_tensor_value_info("w", TensorProto.FLOAT, list(wt.shape)))
    else:
        inits.append(numpy_helper.from_array(wt, "w"))
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], group=groups, kernel_shape=[kh, kw],
                              strides=list(strides), dilations=list(dil), pads=list(pads))]
    cur = "c"
    oh = (h + pads[0] + pads[2] - dil[0] * (kh - 1) - 1) // strides[0] + 1
    ow = (w + pads[1] + pads[3] - dil[1] * (kw - 1) - 1) // strides[1] + 1
    if bn:
        for nm, v in (("g", rng.uniform(0.5, 1.5, cout)), ("be", rng.standard_normal(cout)),
                      ("m", rng.standard_normal(cout)), ("v", rng.uniform(0.5, 2, cout))):
            inits.append(numpy_helper.from_array(v.astype(np.float32), nm))
        nodes.append(helper.make_node("BatchNormalization", [cur, "g", "be", "m", "v"], ["bn"]))
        cur = "bn"
    if act == "relu":
        nodes.append(helper.make_node("Relu", [cur], ["a"]))
    elif act == "relu6":
        inits += [numpy_helper.from_array(np.array(0, np.float32), "lo"),
                  numpy_helper.from_array(np.array(6, np.float32), "hi")]
        nodes.append(helper.make_node("Clip", [cur, "lo", "hi"], ["a"]))
    elif act == "silu":
        nodes += [helper.make_node("Sigmoid", [cur], ["s"]), helper.make_node("Mul", [cur, "s"], ["a"])]
    elif act == "hardswish":
        nodes.append(helper.make_node("HardSwish", [cur], ["a"]))
    if act:
        cur = "a"
    if residual:
        inputs.append(helper.make_tensor_value_info("r", TensorProto.FLOAT, [batch, cout, oh, ow]))
        nodes.append(helper.make_node("Add", [cur, "r"], ["y"]))
    else:
        nodes.append(helper.make_node("Identity", [cur], ["y"]))
    g = helper.make_graph(nodes, "conv", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), wt


def _check(model, wt, rtol=1e-4, atol=1e-5):
    rng = np.random.default_rng(1)
    feeds = {}
    for i in model.graph.input:
        shape = [d.dim_value for d in i.type.tensor_type.shape.dim]
        feeds[i.name] = wt if i.name == "w" else rng.standard_normal(shape).astype(np.float32)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    ref = sess.run(None, feeds)[0]
    exe = G.build(G.optimize(G.from_onnx(model)))
    got = exe.run(**feeds)[0]
    assert got.shape == ref.shape
    np.testing.assert_allclose(got, ref, rtol=rtol, atol=atol)
    return exe


CASES = {
    # depthwise: (cin, hw, cout, groups, k, strides, dilation, pads, act)
    "dw3_s1_7_relu6": (32, 7, 32, 32, 3, (1, 1), (1, 1), None, "relu6"),
    "dw3_s1_14_silu": (24, 14, 24, 24, 3, (1, 1), (1, 1), None, "silu"),
    "dw3_s2_112": (16, 112, 16, 16, 3, (2, 2), (1, 1), None, "relu6"),
    "dw5_s2_13_silu": (40, 13, 40, 40, 5, (2, 2), (1, 1), None, "silu"),
    "dw5_s1_14_plane": (64, 14, 64, 64, 5, (1, 1), (1, 1), None, "silu"),   # padded once per plane
    "dw5_s1_28_hardswish": (20, 28, 20, 20, 5, (1, 1), (1, 1), None, "hardswish"),
    "dw3_d2_14_asym": (16, 14, 16, 16, 3, (1, 1), (2, 2), [0, 1, 2, 3], "relu"),
    "dw3_s2_d2_13": (8, 13, 8, 8, 3, (2, 2), (2, 2), None, None),
    "dw3_16_no_epilogue": (8, 16, 8, 8, 3, (1, 1), (1, 1), None, None),
    "dw_multiplier2": (6, 13, 12, 6, 3, (1, 1), (1, 1), None, "relu"),
    "dw3_s3_17": (12, 17, 12, 12, 3, (3, 3), (1, 1), [1, 0, 0, 1], "relu"),
    "dw_3x5_s12": (16, (15, 21), 16, 16, (3, 5), (1, 2), (1, 1), [1, 2, 1, 2], "relu6"),
    # grouped
    "g8_w8_s2_28": (64, 28, 64, 8, 3, (2, 2), (1, 1), None, "relu"),
    "g6_w8_s2_56": (48, 56, 48, 6, 3, (2, 2), (1, 1), None, "relu"),
    "g55_w8_7": (440, 7, 440, 55, 3, (1, 1), (1, 1), None, "relu"),
    "g2_14": (8, 14, 6, 2, 3, (1, 1), (1, 1), None, "silu"),
    "g3_5x5_s2_d2_13": (9, 13, 12, 3, 5, (2, 2), (2, 2), None, "relu"),
    "g4_cog3_asym": (8, 11, 12, 4, 3, (1, 2), (1, 1), [2, 0, 1, 1], None),
    "g2_1x1_s2": (16, 14, 32, 2, 1, (2, 2), (1, 1), [0, 0, 0, 0], "relu"),
    "g2_cog32_blocks": (16, 28, 64, 2, 3, (1, 1), (1, 1), None, "relu"),
}


@pytest.mark.parametrize("name", list(CASES))
def test_grouped_conv_matches_onnxruntime(name):
    cin, hw, cout, groups, k, s, d, pads, act = CASES[name]
    model, wt = _model(cin, hw, cout, groups, k, s, d, pads, act)
    exe = _check(model, wt)
    # the kernel uses the grouped strategy (its packed weights), not the generic conv
    (k0, _, _), = [st for st in exe.steps if "conv2d" in st[0].name]
    assert k0.transforms, f"{name}: the grouped strategy did not pack the weights"


def test_grouped_conv_for_the_c_target():
    # the "c" target takes the definition with the auto-scheduler's plain schedule
    model, wt = _model(12, 9, 12, 4, 3, strides=(2, 2), act="relu")
    rng = np.random.default_rng(1)
    x = rng.standard_normal((1, 12, 9, 9)).astype(np.float32)
    ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    got = G.build(G.optimize(G.from_onnx(model)), target="c").run(x)[0]
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-5)


def test_grouped_conv_residual_add_and_batch_norm():
    model, wt = _model(32, 14, 32, 4, 3, act="relu6", residual=True, bn=True)
    exe = _check(model, wt)
    assert len(exe.steps) == 1       # conv, folded BN, clip and the add: one kernel


@pytest.mark.parametrize("groups", [4, 16])
def test_grouped_conv_batch_of_three(groups):
    model, wt = _model(16, 13, 16, groups, 3, strides=(2, 2), act="relu6", residual=True, batch=3)
    _check(model, wt)


def test_depthwise_conv_with_weights_as_input_uses_generic_definition():
    model, wt = _model(16, 13, 16, 16, 3, strides=(2, 2), act="relu", weight_input=True)
    exe = _check(model, wt)
    assert not any(k.transforms for k, _, _ in exe.steps)


def test_silu_fuses_into_the_conv_kernel():
    # x * sigmoid(x) reads the conv's output twice; the diamond stays inside one kernel
    model, wt = _model(24, 14, 24, 24, 3, act="silu")
    exe = _check(model, wt)
    assert len(exe.steps) == 1, [k.name for k, _, _ in exe.steps]


def test_silu_of_a_graph_output_is_not_fused_away():
    # the conv's output is also a graph output: it must stay a kernel output
    model, wt = _model(8, 7, 8, 8, 3, act="silu")
    model.graph.output.append(helper.make_tensor_value_info("c", TensorProto.FLOAT, None))
    rng = np.random.default_rng(1)
    x = rng.standard_normal((1, 8, 7, 7)).astype(np.float32)
    ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    got = G.build(G.optimize(G.from_onnx(model))).run(x)
    for g_, r_ in zip(got, ref):
        np.testing.assert_allclose(g_, r_, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("c,hw,parallel", [(116, 14, True), (8, 7, False)])
def test_depthwise_conv_of_a_small_plane_is_split_between_the_cores(c, hw, parallel):
    """0.2M multiply-adds (shufflenet's 14x14 depthwise convs) are worth a fork-join: on
    one core such a conv also reads what the other core's kernel just wrote."""
    model, wt = _model(c, hw, c, c, 3, act="relu")
    exe = _check(model, wt)
    src = exe.steps[0][0].module.get_source()
    assert ("tdsl_parallel_for" in src or "pthread_create" in src) == parallel
