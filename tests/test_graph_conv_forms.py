"""Convolutions in every dimensionality and form through the fast CPU strategies, single ONNX
nodes against onnxruntime: Conv1d (a conv2d one row high: passes/conv_forms.py), Conv3d
and ConvTranspose (the blocked conv of strategy/cpu/conv_blocked.py), dilated Conv2d, and
Resize as one fused gather kernel."""
import numpy as np
import pytest

import tdsl.graph as G
from tdsl.graph.ir import Function

pytest.importorskip("onnxruntime")
from test_graph_conv_fast import _kinds  # noqa: E402
from test_graph_onnx_ops import _model, check, f32  # noqa: E402

FAST = {"conv2d_packed", "conv_rows_spatial", "conv1x1_spatial", "conv_grouped", "matvec"}


def _anchors(op, inputs, consts, **attrs):
    """Checks the node against onnxruntime; returns the strategy of each fused group that
    is not a reshape view."""
    check(op, inputs, consts, rtol=1e-4, **attrs)
    mod = G.optimize(G.from_onnx(_model(op, inputs, consts, **attrs)))
    kinds = _kinds(mod)
    ops = [[m.op for m in n.op.nodes()] for n in mod.main.nodes() if isinstance(n.op, Function)]
    return [k for k, o in zip(kinds, ops) if o != ["reshape"]]


@pytest.mark.parametrize("ci,co,L,k,attrs,kind", [
    (16, 32, 50, 3, dict(pads=[1, 1]), None),
    (16, 32, 50, 3, dict(pads=[2, 1], strides=[2], dilations=[2]), None),
    (24, 48, 64, 1, dict(), None),
    (16, 32, 50, 3, dict(pads=[1, 1], group=4), "conv_grouped"),
    (16, 16, 50, 5, dict(pads=[2, 2], group=16), "conv_grouped"),
    (3, 64, 200, 7, dict(pads=[3, 3], strides=[2]), None),
])
def test_conv1d_takes_the_2d_strategies(ci, co, L, k, attrs, kind):
    g = attrs.get("group", 1)
    consts = {"w": f32(co, ci // g, k), "b": f32(co)}
    kinds = _anchors("Conv", {"x": f32(2, ci, L)}, consts, **attrs)
    assert len(kinds) == 1 and kinds[0] in FAST and (kind is None or kinds[0] == kind), kinds


def test_conv1d_with_batch_norm_and_relu_is_one_kernel():
    from onnx import TensorProto, helper, numpy_helper
    c = 16
    inits = [numpy_helper.from_array(a, n) for n, a in [
        ("w", f32(c, 8, 3)), ("s", f32(c)), ("t", f32(c)), ("m", f32(c)),
        ("v", np.abs(f32(c)) + 0.5)]]
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1]),
             helper.make_node("BatchNormalization", ["c", "s", "t", "m", "v"], ["b"]),
             helper.make_node("Relu", ["b"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 40])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    mod = G.optimize(G.from_onnx(model))
    groups = [[m.op for m in n.op.nodes()] for n in mod.main.nodes() if isinstance(n.op, Function)]
    kernels = [g for g in groups if g != ["reshape"]]
    assert len(kernels) == 1 and kernels[0][0] == "nn.conv2d" and kernels[0][-1] == "nn.relu", groups
    x = f32(1, 8, 40)
    import onnxruntime as ort
    ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(G.build(mod).run(x)[0], ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max())


@pytest.mark.parametrize("shape,w,attrs", [
    ((1, 8, 6, 10, 12), (16, 8, 3, 3, 3), dict(pads=[1] * 6)),
    ((2, 4, 5, 9, 7), (20, 4, 3, 1, 3), dict(strides=[2, 1, 2], dilations=[1, 1, 2])),
    ((1, 16, 4, 8, 8), (32, 16, 1, 1, 1), dict()),
])
def test_conv3d_is_blocked(shape, w, attrs):
    kinds = _anchors("Conv", {"x": f32(*shape)}, {"w": f32(*w), "b": f32(w[0])}, **attrs)
    assert kinds == ["conv2d_packed"]


@pytest.mark.parametrize("ci,co,hw,k,d,s", [(16, 32, 20, 3, 2, 1), (32, 64, 28, 3, 4, 1),
                                            (8, 24, 17, 3, 3, 2)])
def test_dilated_conv2d_is_fast(ci, co, hw, k, d, s):
    p = d * (k - 1) // 2
    kinds = _anchors("Conv", {"x": f32(1, ci, hw, hw)}, {"w": f32(co, ci, k, k)},
                     pads=[p] * 4, dilations=[d, d], strides=[s, s])
    assert len(kinds) == 1 and kinds[0] in ("conv2d_packed", "conv_rows_spatial"), kinds


@pytest.mark.parametrize("x,w,attrs,taps", [
    ((1, 16, 14, 14), (24, 16, 3, 3), dict(pads=[36] * 4, dilations=[36, 36]), (1, 1)),
    ((1, 8, 6, 20), (16, 8, 3, 3), dict(pads=[8, 8, 8, 8], dilations=[8, 8]), (1, 3)),
    ((1, 8, 9, 9), (8, 1, 5, 5), dict(pads=[8] * 4, dilations=[4, 4], group=8), (5, 5)),
    ((1, 8, 5, 11), (8, 1, 5, 5), dict(pads=[12, 4, 12, 4], dilations=[6, 2], group=8), (1, 5)),
    ((1, 8, 7, 7), (16, 8, 3, 3), dict(pads=[9] * 4, dilations=[9, 4], strides=[2, 2]), (1, 3)),
    ((1, 4, 30), (8, 4, 3), dict(pads=[40, 40], dilations=[40]), (1,)),
    ((1, 4, 4, 6, 6), (8, 4, 3, 3, 3), dict(pads=[5] * 6, dilations=[5, 2, 5]), (1, 3, 3)),
])
def test_taps_reading_only_padding_are_dropped(x, w, attrs, taps):
    """A dilation past the image leaves taps that read only zeros: the conv keeps the
    others (passes/conv_forms.drop_padding_taps) and matches onnxruntime."""
    inputs, consts = {"x": f32(*x)}, {"w": f32(*w), "b": f32(w[0])}
    kinds = _anchors("Conv", inputs, consts, **attrs)
    assert any(k in FAST for k in kinds), kinds
    mod = G.optimize(G.from_onnx(_model("Conv", inputs, consts, **attrs)))
    convs = [m for n in mod.main.nodes() if isinstance(n.op, Function) for m in n.op.nodes()
             if m.op.startswith("nn.conv")]
    assert len(convs) == 1
    assert tuple(convs[0].args[1].type.shape[2:])[-len(taps):] == taps


@pytest.mark.parametrize("x,w,attrs,bands", [
    ((1, 16, 14, 14), (24, 16, 3, 3), dict(pads=[12] * 4, dilations=[12, 12]), 9),
    ((1, 8, 14, 20), (16, 8, 3, 3), dict(pads=[12, 6, 12, 6], dilations=[12, 6]), 3),   # rows only
    ((1, 8, 15, 15), (8, 1, 3, 3), dict(pads=[10] * 4, dilations=[10, 10], group=8), 1),
    ((1, 8, 9, 9), (8, 8, 5, 5), dict(pads=[8] * 4, dilations=[4, 4]), 1),      # 5 bands: too many
    ((1, 8, 13, 13), (16, 8, 3, 3), dict(pads=[12] * 4, dilations=[12, 12], strides=[2, 2]), 9),
    ((1, 8, 14, 14), (16, 8, 3, 3), dict(pads=[2] * 4, dilations=[2, 2]), 1),
])
def test_dilated_conv_split_into_bands_of_live_taps(x, w, attrs, bands):
    """Outer taps that reach the image only from a few output rows (and columns): one conv
    per band of equal live taps, concatenated (passes/conv_forms.split_padding_bands); an
    ordinary dilation stays one conv."""
    inputs, consts = {"x": f32(*x)}, {"w": f32(*w), "b": f32(w[0])}
    check("Conv", inputs, consts, rtol=1e-4, **attrs)
    mod = G.optimize(G.from_onnx(_model("Conv", inputs, consts, **attrs)))
    convs = [m for n in mod.main.nodes() if isinstance(n.op, Function) for m in n.op.nodes()
             if m.op.startswith("nn.conv")]
    assert len(convs) == bands
    if bands > 1:       # tap-pixels computed: at most half of the whole conv's
        taps = sum(int(np.prod(c.args[1].type.shape[2:])) * int(np.prod(c.type.shape[2:])) for c in convs)
        out = mod.main.outputs[0].type.shape
        assert taps <= 0.5 * int(np.prod(w[2:])) * out[2] * out[3]


@pytest.mark.parametrize("x,w,attrs,phases", [
    ((1, 16, 10, 10), (16, 8, 3, 3), dict(pads=[1] * 4, strides=[2, 2], output_padding=[1, 1]), True),
    ((2, 16, 9, 7), (16, 24, 4, 4), dict(pads=[1] * 4, strides=[2, 2]), True),
    ((1, 8, 7, 6), (8, 5, 5, 3), dict(pads=[2, 0, 1, 1], strides=[3, 2]), True),
    ((1, 8, 5, 5), (8, 4, 2, 2), dict(strides=[2, 2]), True),
    ((1, 8, 12, 12), (8, 16, 3, 3), dict(pads=[1] * 4), False),
    ((1, 8, 6, 6), (8, 4, 3, 3), dict(strides=[3, 3], dilations=[2, 2], pads=[0, 1, 2, 0]), False),
    ((1, 16, 30), (16, 24, 4), dict(pads=[1, 1], strides=[2]), True),
    ((1, 4, 3, 5, 5), (4, 8, 2, 2, 2), dict(strides=[2, 2, 2]), False),
])
def test_conv_transpose_is_fast(x, w, attrs, phases):
    """Strided (2-D, 1-D): one stride-1 conv2d per output phase, as one conv with
    stride^2 x CO channels; otherwise the blocked conv of the input spread on the grid."""
    inputs, consts = {"x": f32(*x)}, {"w": f32(*w), "b": f32(w[1])}
    kinds = _anchors("ConvTranspose", inputs, consts, **attrs)
    mod = G.optimize(G.from_onnx(_model("ConvTranspose", inputs, consts, **attrs)))
    ops = [m.op for n in mod.main.nodes() if isinstance(n.op, Function) for m in n.op.nodes()]
    assert ("nn.conv2d" in ops and not any("transpose" in o for o in ops if o.startswith("nn."))) == phases, ops
    assert any(k in FAST for k in kinds), kinds


@pytest.mark.parametrize("x,w,attrs", [
    ((2, 16, 7, 7), (16, 8, 3, 3), dict(padding=[1] * 4, strides=[2, 2], output_padding=[1, 1])),
    ((1, 8, 7, 6), (8, 5, 5, 3), dict(padding=[2, 0, 1, 1], strides=[3, 2])),
    ((1, 8, 5, 4), (8, 4, 1, 3), dict(strides=[2, 2], output_padding=[1, 1])),   # a phase of no taps
])
def test_conv_transpose_phases_with_runtime_weights(x, w, attrs):
    """Weights that are a module input (a gradient module's data adjoint): one conv per
    phase, its taps sliced from them per call, and the result matches the transposed conv."""
    from tdsl.graph import Call, Module, TensorType, Var
    from tdsl.graph.ir.registry import evaluate
    xv, wv = Var("x", TensorType(x, "float32")), Var("w", TensorType(w, "float32"))
    y = Call("nn.conv2d_transpose", [xv, wv], attrs)
    mod = G.optimize(Module(Function("main", [xv, wv], [y])))
    ops = [m.op for n in mod.main.nodes() if isinstance(n.op, Function) for m in n.op.nodes()]
    assert "nn.conv2d" in ops and "nn.conv2d_transpose" not in ops, ops
    a, b = f32(*x), f32(*w)
    (got,) = G.build(mod, target="llvm").run(x=a, w=b)
    np.testing.assert_allclose(got, evaluate(y.op, y.attrs, [a, b]), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("mode,scales", [("nearest", [1, 1, 2, 2]), ("linear", [1, 1, 2, 2]),
                                         ("linear", [1, 1, 0.5, 1.5]), ("cubic", [1, 1, 2, 2]),
                                         ("linear", [1, 1, 1, 3]), ("linear", [1, 1, 4, 1]),
                                         ("linear", [1, 1, 8, 8])])
def test_resize_is_one_gather_kernel(mode, scales):
    """Linear along both image axes: rows interpolated once, columns gathered from them
    (strategy/cpu/resize.py); along one axis or cubic: the interp inlined."""
    inputs = {"x": f32(1, 8, 10, 12)}
    consts = {"_none_roi": None, "scales": np.array(scales, np.float32)}
    check("Resize", inputs, consts, rtol=1e-4, mode=mode)
    mod = G.optimize(G.from_onnx(_model("Resize", inputs, consts, mode=mode)))
    groups = [[m.op for m in n.op.nodes()] for n in mod.main.nodes() if isinstance(n.op, Function)]
    assert len(groups) == 1 and set(groups[0]) <= {"take", "interp"}, groups


@pytest.mark.parametrize("scales,axes", [([1, 1, 8, 8], [3, 2]), ([1, 1, 2, 1.5], [3, 2]),
                                         ([1, 1, 0.5, 1.5], [2, 3]), ([1, 1, 1, 3], [3])])
def test_resize_upsampling_rows_interpolates_columns_first(scales, axes):
    """Upsampled rows: the columns (taps gathered along each row) are interpolated first,
    on the input's rows, then each output row is two whole rows of that (DeepLabV3's
    logits, 21x28x28 -> 224x224: 0.68 -> 0.13 ms on Zen 4); downsampled rows first."""
    inputs = {"x": f32(1, 8, 10, 12)}
    consts = {"_none_roi": None, "scales": np.array(scales, np.float32)}
    check("Resize", inputs, consts, rtol=1e-4, mode="linear")
    mod = G.optimize(G.from_onnx(_model("Resize", inputs, consts, mode="linear")))
    (group,) = [n.op for n in mod.main.nodes() if isinstance(n.op, Function)]
    assert [m.attrs["axis"] for m in group.nodes() if m.op == "interp"] == axes
