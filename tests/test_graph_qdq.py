"""Quantized networks: a small ResNet quantized by onnxruntime's quantizer (QDQ form) runs
as integer convolutions (passes/qdq.py, strategy/cpu/conv_int8.py) and agrees with
onnxruntime's int8 session to one quantization step, on the VNNI kernel and the int32 one."""
import numpy as np
import pytest

pytest.importorskip("onnxruntime.quantization")

import tdsl  # noqa: E402
import tdsl.graph as G  # noqa: E402
from tdsl.graph import models  # noqa: E402
from tdsl.graph.ir import Const, Function  # noqa: E402
from tdsl.graph.strategy.groupdef import GroupDef  # noqa: E402


@pytest.fixture(scope="module")
def qdq_resnet():
    return models.quantize_qdq(models.resnet18(size=32, width=16, num_classes=10))


def _kinds(mod, target):
    kinds = []
    for n in mod.main.nodes():
        if isinstance(n.op, Function):
            g = GroupDef(n.op, {i: a.data for i, a in enumerate(n.args) if isinstance(a, Const)}, target)
            g.build()
            kinds.append(g.anchor.tensor.op.tag if g.anchor else None)
    return kinds


def _output_step(model):
    """The scale of the DequantizeLinear that makes the network's output."""
    from onnx import numpy_helper
    out = model.graph.output[0].name
    node = next(n for n in model.graph.node if out in n.output)
    inits = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    return float(inits[node.input[1]])


@pytest.mark.parametrize("target", ["llvm", "llvm -mcpu=znver3"])
@pytest.mark.parametrize("layout", [False, True])
def test_qdq_resnet_matches_onnxruntime(qdq_resnet, target, layout):
    """With the target given to optimize, a VNNI target keeps the quantized convs blocked
    (NCHW[16c]) from the stem to the last block (passes/layout.py), the max pool between
    them pooling the blocked image; a target without VNNI computes the integer convs with
    float multiply-adds (passes/int8_float.py), blocked like a float network's. Without
    the target, the integer convs stay NCHW (the VNNI kernel, or int32 arithmetic)."""
    t = tdsl.target.as_target(target)
    if not t.runs_here:
        pytest.skip(f"{target} does not run here")
    mod = G.optimize(G.from_onnx(qdq_resnet), target=target if layout else None)
    kinds = _kinds(mod, target)
    ops = [n.op for f in mod.main.nodes() if isinstance(f.op, Function) for n in f.op.nodes()]
    if layout and not t.has_vnni:
        # every conv in float; blocked but those of 1x1 images (the float chains' rule)
        assert ops.count("nn.conv2d_blocked") + ops.count("nn.conv2d") == 20, ops
        assert ops.count("nn.conv2d_blocked") >= 16 and "qnn.conv2d" not in ops, ops
        assert "nn.max_pool3d" in ops and "nn.max_pool2d" not in ops, ops
    else:
        kind = "qconv2d_vnni" if t.has_vnni else "qconv2d_int32"
        assert kinds.count(kind) == 20, kinds           # every conv of the network
        assert "nn.conv2d" not in ops
        blocked = layout and t.has_vnni
        assert ops.count("qnn.conv2d_blocked") == (20 if blocked else 0), ops
        assert ("nn.max_pool3d" in ops) == blocked and ("nn.max_pool2d" in ops) != blocked, ops
    x = np.random.default_rng(3).standard_normal((1, 3, 32, 32)).astype(np.float32)
    ref = models.onnxruntime_run(qdq_resnet, {"input": x})[0]
    got = G.build(mod, target=target).run(x)[0]
    steps = np.rint(np.abs(got - ref) / _output_step(qdq_resnet))
    assert steps.max() <= 1 and np.mean(steps == 0) >= 0.95, (steps.max(), np.mean(steps == 0))


@pytest.mark.parametrize("target", ["llvm", "llvm -mcpu=znver3"])
def test_qdq_mobilenet_blocks_run_blocked_through_depthwise_convs(target):
    """A quantized MobileNetV2 block stack on a VNNI target: all 24 convs blocked, the
    depthwise ones in the float depthwise conv's schedule on int32 vectors, the 24-channel
    ones with a ragged last block (lanes of no meaning meeting zero weights); onnxruntime's
    int8 outputs to one step. Without VNNI the integer convs compute in float32
    (passes/int8_float.py)."""
    t = tdsl.target.as_target(target)
    if not t.runs_here:
        pytest.skip(f"{target} does not run here")
    q = models.quantize_qdq(models.mobilenetv2_blocks(size=24))
    mod = G.optimize(G.from_onnx(q), target=target)
    ops = [n.op for f in mod.main.nodes() if isinstance(f.op, Function) for n in f.op.nodes()]
    kinds = _kinds(mod, target)
    if t.has_vnni:
        assert ops.count("qnn.conv2d_blocked") == 24 and "qnn.conv2d" not in ops, ops
        assert kinds.count("depthwise_blocked") == 8 and kinds.count("qconv2d_vnni") == 16, kinds
    else:
        assert "qnn.conv2d" not in ops and "qnn.conv2d_blocked" not in ops, ops
        assert ops.count("nn.conv2d") + ops.count("nn.conv2d_blocked") == 24, ops
    x = np.random.default_rng(4).standard_normal((1, 3, 24, 24)).astype(np.float32)
    ref = models.onnxruntime_run(q, {"input": x})[0]
    got = G.build(mod, target=target).run(x)[0]
    steps = np.rint(np.abs(got - ref) / _output_step(q))
    assert steps.max() <= 1 and np.mean(steps == 0) >= 0.95, (steps.max(), np.mean(steps == 0))


_CASES = [(True, 16, 1, "llvm"), (False, 16, 1, "llvm"), (True, 16, 0, "llvm"), (True, 8, 1, "llvm"),
          (True, 16, 1, "llvm -mcpu=znver3"), (False, 16, 0, "llvm -mcpu=znver3")]


# a depthwise conv reads blocked data (passes/layout.py)
@pytest.mark.parametrize("in_blocked,bn,pad,target,ci,co,groups", [
    c + s for c in _CASES for s in [(32, 32, 1), (24, 40, 1), (40, 40, 40)] if c[0] or s[2] == 1])
def test_blocked_qconv_matches_its_reference(in_blocked, bn, pad, target, ci, co, groups):
    """qnn.conv2d_blocked in one group: the VNNI kernel (or the int32 one, on targets
    without VNNI) where the blocks are its 16 lanes, the plain definition
    (strategy/topi_layout.py) for other blocks; the depthwise one; zero points in the data
    and its padding; channel counts that leave ragged last blocks, in and out."""
    from tdsl.graph.ir import Call, Module, TensorType, Var
    from tdsl.graph.ir.ops_layout import from_blocked_ref, qconv_blocked_ref, to_blocked_ref
    rng = np.random.default_rng(5)
    x = rng.integers(0, 256, (1, ci, 9, 11)).astype(np.uint8)
    xin = to_blocked_ref(x, {"bn": bn}) if in_blocked else x
    w = rng.integers(-100, 100, (co, ci // groups, 3, 3)).astype(np.int8)
    xz, wz = np.uint8(113), np.zeros((co, 1, 1, 1), np.int8)
    a = {"strides": [1, 2], "padding": [pad] * 4, "dilation": [1, 1], "groups": groups, "bn": bn,
         "in_blocked": in_blocked}
    want = qconv_blocked_ref(xin, w, xz, wz, a)
    v = Var("x", TensorType(xin.shape, "uint8"))
    y = Call("qnn.conv2d_blocked", [v, Const(w), Const(xz), Const(wz)], a)
    mod = G.optimize(Module(Function("main", [v], [y], {})))
    kinds = _kinds(mod, target)
    if bn != 16:
        assert kinds == [None], kinds
    elif groups > 1:
        assert kinds == ["depthwise_blocked"], kinds
    else:
        assert kinds == ["qconv2d_vnni" if tdsl.target.as_target(target).has_vnni else "qconv2d_int32"], kinds
    got = G.build(mod, target=target).run(xin)[0]
    assert got.shape == want.shape
    # the lanes past the last real channel are of no meaning (ir/ops_layout.py)
    real = {"bn": bn, "channels": co}
    assert np.array_equal(from_blocked_ref(got, real), from_blocked_ref(want, real))


@pytest.mark.parametrize("op", ["qnn.conv2d", "qnn.matmul"])
def test_integer_products_in_float_are_exact(op):
    """Without VNNI the integer conv and matmul compute in float32 (passes/int8_float.py):
    the same int32 sums as the integer reference, bit for bit, with zero points in the data
    (and the conv's padding) and per-channel ones in the weights, at K = 9 * 64 = 576."""
    from tdsl.graph.ir import Call, Module, TensorType, Var
    from tdsl.graph.ir.registry import get_op
    from tdsl.graph.passes.int8_float import integer_products_in_float
    rng = np.random.default_rng(6)
    if op == "qnn.conv2d":
        x = rng.integers(0, 256, (1, 64, 9, 11)).astype(np.uint8)
        w = rng.integers(-128, 128, (24, 64, 3, 3)).astype(np.int8)
        xz, wz = np.uint8(113), rng.integers(-3, 4, (24, 1, 1, 1)).astype(np.int8)
        attrs = {"strides": [1, 2], "padding": [1, 1, 1, 1], "dilation": [1, 1], "groups": 1}
    else:
        x = rng.integers(0, 256, (2, 7, 576)).astype(np.uint8)
        w = rng.integers(-128, 128, (576, 40)).astype(np.int8)
        xz, wz, attrs = np.uint8(3), np.int8(0), {}
    v = Var("x", TensorType(x.shape, "uint8"))
    y = Call(op, [v, Const(w), Const(xz), Const(wz)], attrs)
    want = get_op(op).ref(x, w, xz, wz, y.attrs)
    mod = integer_products_in_float(Module(Function("main", [v], [y], {})))
    assert op not in [n.op for n in mod.main.nodes()]
    got = G.build(G.optimize(mod), target="llvm -mcpu=znver3").run(x)[0]
    assert got.dtype == np.int32 and np.array_equal(got, want)


@pytest.mark.parametrize("target", ["llvm", "llvm -mcpu=znver3"])
def test_one_channel_integer_conv_runs_in_float(target):
    """A 1-D signal's stem (1 input channel, 11 taps, stride 4) would hold 1 product of 4
    in each vpdpbusd lane: given the target, optimize computes it with float multiply-adds
    on VNNI targets too, and the sums are the integer ones."""
    from tdsl.graph.ir import Call, Module, TensorType, Var
    from tdsl.graph.ir.registry import get_op
    t = tdsl.target.as_target(target)
    if not t.runs_here:
        pytest.skip(f"{target} does not run here")
    rng = np.random.default_rng(7)
    x = rng.integers(0, 256, (1, 1, 1, 999)).astype(np.uint8)
    w = rng.integers(-128, 128, (32, 1, 1, 11)).astype(np.int8)
    attrs = {"strides": [1, 4], "padding": [0, 5, 0, 5], "dilation": [1, 1], "groups": 1}
    v = Var("x", TensorType(x.shape, "uint8"))
    y = Call("qnn.conv2d", [v, Const(w), Const(np.uint8(9)), Const(np.int8(0))], attrs)
    want = get_op("qnn.conv2d").ref(x, w, np.uint8(9), np.int8(0), y.attrs)
    mod = G.optimize(Module(Function("main", [v], [y], {})), target=t)
    ops = [n.op for f in mod.main.nodes() if isinstance(f.op, Function) for n in f.op.nodes()]
    assert "qnn.conv2d" not in ops and "nn.conv2d" in ops, ops
    assert np.array_equal(G.build(mod, target=t).run(x)[0], want)


def test_unmatched_qdq_stays_float():
    """A bias that is not the int32 one of scale s_x * s_w keeps the float conv."""
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(v, n) for n, v in (
        ("s", np.float32(0.05)), ("z", np.uint8(128)), ("w", rng.integers(-5, 5, (16, 8, 3, 3)).astype(np.int8)),
        ("sw", np.float32(0.01)), ("zw", np.int8(0)), ("b", rng.standard_normal(16).astype(np.float32)),
        ("sy", np.float32(0.1)), ("zy", np.uint8(100)))]
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["xd"]),
             helper.make_node("DequantizeLinear", ["w", "sw", "zw"], ["wd"]),
             helper.make_node("Conv", ["xd", "wd", "b"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("QuantizeLinear", ["c", "sy", "zy"], ["y"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 6, 6])],
                          [helper.make_tensor_value_info("y", TensorProto.UINT8, None)], inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    mod = G.optimize(G.from_onnx(model), fuse=False)
    assert {n.op for n in mod.main.nodes()} >= {"nn.conv2d", "qnn.quantize"}
    x = rng.standard_normal((1, 8, 6, 6)).astype(np.float32)
    ref = models.onnxruntime_run(model, {"x": x})[0]
    got = G.build(G.optimize(G.from_onnx(model))).run(x)[0]
    assert np.abs(got.astype(int) - ref.astype(int)).max() <= 1


def _model(nodes, inits, inputs, out_type):
    from onnx import TensorProto, helper, numpy_helper
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
                          [helper.make_tensor_value_info("y", out_type, None)],
                          [numpy_helper.from_array(v, n) for n, v in inits])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _qdq_inputs(names):
    from onnx import helper
    return [n for x in names for n in (helper.make_node("QuantizeLinear", [x, f"s_{x}", f"z_{x}"], [f"{x}q"]),
                                       helper.make_node("DequantizeLinear", [f"{x}q", f"s_{x}", f"z_{x}"], [f"{x}d"]))]


def _steps(model, feeds):
    ref = models.onnxruntime_run(model, feeds)[0]
    mod = G.optimize(G.from_onnx(model))
    got = G.build(mod).run(*feeds.values())[0]
    assert got.dtype == ref.dtype and got.shape == ref.shape
    return mod, np.abs(got.astype(int) - ref.astype(int))


def _ops(mod):
    return {m.op for n in mod.main.nodes() for m in ([n] if not isinstance(n.op, Function) else n.op.nodes())
            if isinstance(m.op, str)}


@pytest.mark.parametrize("lead,K,N", [((1, 37), 40, 50), ((5, 1), 64, 32), ((8,), 64, 48)])
def test_quantized_matmul_rows_and_columns(lead, K, N):
    """QDQ MatMul with constant int8 weights (per-column scales): on a VNNI
    target the packed-weight micro-kernel, the leading axes flattened into rows (ViT's
    sequence-first (197, 1, 768)); rows and columns the register tile does not divide
    (37 rows, 50 columns) go through a root stage of whole tiles. One step from
    onnxruntime at most."""
    from onnx import TensorProto, helper
    rng = np.random.default_rng(11)
    sw = (0.002 + 0.002 * rng.random(N)).astype(np.float32)
    inits = [("s_x", np.float32(0.03)), ("z_x", np.uint8(128)), ("w", rng.integers(-100, 100, (K, N)).astype(np.int8)),
             ("sw", sw), ("zw", np.zeros(N, np.int8)), ("sy", np.float32(0.3)), ("zy", np.uint8(100))]
    nodes = _qdq_inputs(["x"]) + [
        helper.make_node("DequantizeLinear", ["w", "sw", "zw"], ["wd"], axis=1),
        helper.make_node("MatMul", ["xd", "wd"], ["c"]), helper.make_node("QuantizeLinear", ["c", "sy", "zy"], ["y"])]
    model = _model(nodes, inits, [("x", list(lead) + [K])], TensorProto.UINT8)
    mod, d = _steps(model, {"x": rng.standard_normal(tuple(lead) + (K,)).astype(np.float32)})
    assert "qnn.matmul" in _ops(mod)
    if tdsl.target.as_target("llvm").has_vnni:
        assert "qmatmul_vnni" in _kinds(mod, "llvm")
    assert d.max() <= 1 and np.mean(d == 0) >= 0.99, (d.max(), np.mean(d == 0))


@pytest.mark.parametrize("groups,stride,layout", [(4, 1, False), (4, 2, True), (2, 1, True)])
def test_quantized_grouped_conv_takes_the_grouped_strategy(groups, stride, layout):
    """A QDQ conv of 4 or 2 groups (RegNet's group width 8 and more) takes the grouped
    conv's register tile (strategy/cpu/conv_grouped.py) on int32 products, the padding
    reading the data's zero point, whether or not the target also keeps chains blocked;
    one step from onnxruntime at most."""
    from onnx import TensorProto, helper
    rng = np.random.default_rng(12)
    c, hw = 32, 19
    sw = (0.003 + 0.002 * rng.random(c)).astype(np.float32)
    inits = [("s_x", np.float32(0.02)), ("z_x", np.uint8(77)),
             ("w", rng.integers(-90, 90, (c, c // groups, 3, 3)).astype(np.int8)), ("sw", sw), ("zw", np.zeros(c, np.int8)),
             ("b", rng.integers(-2000, 2000, c).astype(np.int32)), ("sb", (0.02 * sw).astype(np.float32)),
             ("zb", np.zeros(c, np.int32)), ("sy", np.float32(0.05)), ("zy", np.uint8(60))]
    nodes = _qdq_inputs(["x"]) + [
        helper.make_node("DequantizeLinear", ["w", "sw", "zw"], ["wd"], axis=0),
        helper.make_node("DequantizeLinear", ["b", "sb", "zb"], ["bd"], axis=0),
        helper.make_node("Conv", ["xd", "wd", "bd"], ["cv"], pads=[1] * 4, strides=[stride] * 2, group=groups),
        helper.make_node("QuantizeLinear", ["cv", "sy", "zy"], ["y"])]
    model = _model(nodes, inits, [("x", [1, c, hw, hw])], TensorProto.UINT8)
    x = rng.standard_normal((1, c, hw, hw)).astype(np.float32)
    ref = models.onnxruntime_run(model, {"x": x})[0]
    mod = G.optimize(G.from_onnx(model), target="llvm" if layout else None)
    assert "conv_grouped" in _kinds(mod, "llvm")      # beside the input's quantize
    got = G.build(mod, target="llvm").run(x)[0]
    d = np.abs(got.astype(int) - ref.astype(int))
    assert d.max() <= 1 and np.mean(d == 0) >= 0.99, (d.max(), np.mean(d == 0))


def test_quantized_depthwise_conv1d_of_symbolic_length():
    """A QDQ strided depthwise Conv1d whose signal length is symbolic: the grouped conv's
    int32 register tile over a run-time row (cpu/width.py), built once, exact against
    onnxruntime at lengths that end in ragged tiles."""
    from onnx import TensorProto, helper
    rng = np.random.default_rng(14)
    c = 32
    sw = (0.003 + 0.002 * rng.random(c)).astype(np.float32)
    inits = [("s_x", np.float32(0.02)), ("z_x", np.uint8(77)), ("w", rng.integers(-90, 90, (c, 1, 3)).astype(np.int8)),
             ("sw", sw), ("zw", np.zeros(c, np.int8)), ("sy", np.float32(0.05)), ("zy", np.uint8(60))]
    nodes = _qdq_inputs(["x"]) + [
        helper.make_node("DequantizeLinear", ["w", "sw", "zw"], ["wd"], axis=0),
        helper.make_node("Conv", ["xd", "wd"], ["cv"], pads=[1, 1], strides=[2], group=c),
        helper.make_node("QuantizeLinear", ["cv", "sy", "zy"], ["y"])]
    model = _model(nodes, inits, [("x", [1, c, "signal"])], TensorProto.UINT8)
    exe = G.build(G.optimize(G.from_onnx(model), target="llvm"), target="llvm")
    for n in (50, 77, 5):
        x = rng.standard_normal((1, c, n)).astype(np.float32)
        d = np.abs(exe.run(x)[0].astype(int) - models.onnxruntime_run(model, {"x": x})[0].astype(int))
        assert d.max() <= 1 and np.mean(d == 0) >= 0.99, (n, d.max(), np.mean(d == 0))
    assert "conv2d_grouped" in {k.scheduled_by for k, _, _ in exe.steps}


def test_quantized_dilated_conv_drops_the_taps_that_read_padding():
    """DeepLab's ASPP on a small image: a 3x3 conv of dilation 6 on a 5x5 image reads the
    image with its centre tap only; the quantized conv keeps that tap alone (the padding
    is the zero point, whose products the conv subtracts) and matches onnxruntime."""
    from onnx import TensorProto, helper
    rng = np.random.default_rng(13)
    c = 16
    inits = [("s_x", np.float32(0.02)), ("z_x", np.uint8(140)), ("w", rng.integers(-90, 90, (c, c, 3, 3)).astype(np.int8)),
             ("sw", np.float32(0.004)), ("zw", np.int8(0)), ("sy", np.float32(0.05)), ("zy", np.uint8(60))]
    nodes = _qdq_inputs(["x"]) + [
        helper.make_node("DequantizeLinear", ["w", "sw", "zw"], ["wd"]),
        helper.make_node("Conv", ["xd", "wd"], ["cv"], pads=[6] * 4, dilations=[6, 6]),
        helper.make_node("QuantizeLinear", ["cv", "sy", "zy"], ["y"])]
    model = _model(nodes, inits, [("x", [1, c, 5, 5])], TensorProto.UINT8)
    mod, d = _steps(model, {"x": rng.standard_normal((1, c, 5, 5)).astype(np.float32)})
    convs = [n for f in mod.main.nodes() if isinstance(f.op, Function) for n in f.op.nodes() if n.op == "qnn.conv2d"]
    assert [tuple(n.args[1].type.shape) for n in convs] == [(c, c, 1, 1)]
    assert d.max() <= 1 and np.mean(d == 0) >= 0.99, (d.max(), np.mean(d == 0))


@pytest.mark.parametrize("k,stride,pad,dil", [(11, 1, 5, 1), (3, 2, 2, 2)])
def test_quantized_conv1d_is_an_integer_conv_of_one_row(k, stride, pad, dil):
    """A QDQ Conv1d stack (a speech front end's: conv, max pool, conv) runs as qnn.conv2d
    over one row, not as a float conv of dequantized data; the pool runs on the integers
    (as the 2-D pool of the row, conv_forms.row_pools_as_2d), and the reshapes between the 1-D and the 2-D forms sink past the quantized operators;
    one step from onnxruntime at most."""
    from onnx import TensorProto, helper
    rng = np.random.default_rng(9)
    ci, co, L = 6, 24, 61
    inits = [("s_x", np.float32(0.02)), ("z_x", np.uint8(101)), ("sy", np.float32(0.05)), ("zy", np.uint8(64)),
             ("s2", np.float32(0.08)), ("z2", np.uint8(90))]
    nodes = _qdq_inputs(["x"])
    for i, (cin, src, s_in, out, s_out) in enumerate([(ci, "xd", "s_x", "y1", "sy"), (co, "pd", "sy", "y", "s2")]):
        sw = (0.003 + 0.001 * rng.random((co,))).astype(np.float32)
        inits += [(f"w{i}", rng.integers(-90, 90, (co, cin, k)).astype(np.int8)), (f"sw{i}", sw),
                  (f"zw{i}", np.zeros(co, np.int8)), (f"b{i}", rng.integers(-2000, 2000, co).astype(np.int32)),
                  (f"sb{i}", (dict(inits)[s_in] * sw).astype(np.float32)), (f"zb{i}", np.zeros(co, np.int32))]
        nodes += [helper.make_node("DequantizeLinear", [f"w{i}", f"sw{i}", f"zw{i}"], [f"wd{i}"], axis=0),
                  helper.make_node("DequantizeLinear", [f"b{i}", f"sb{i}", f"zb{i}"], [f"bd{i}"], axis=0),
                  helper.make_node("Conv", [src, f"wd{i}", f"bd{i}"], [f"c{i}"], pads=[pad, pad], strides=[stride],
                                   dilations=[dil]),
                  helper.make_node("QuantizeLinear", [f"c{i}", s_out, "zy" if i == 0 else "z2"], [out])]
        if i == 0:
            nodes += [helper.make_node("DequantizeLinear", ["y1", "sy", "zy"], ["y1d"]),
                      helper.make_node("MaxPool", ["y1d"], ["p"], kernel_shape=[3], strides=[2], pads=[1, 1]),
                      helper.make_node("QuantizeLinear", ["p", "sy", "zy"], ["pq"]),
                      helper.make_node("DequantizeLinear", ["pq", "sy", "zy"], ["pd"])]
    model = _model(nodes, inits, [("x", [1, ci, L])], TensorProto.UINT8)
    mod, d = _steps(model, {"x": rng.standard_normal((1, ci, L)).astype(np.float32)})
    ops = _ops(mod)
    assert "qnn.conv2d" in ops and "nn.max_pool2d" in ops, ops
    assert not ops & {"nn.conv1d", "nn.conv2d", "qnn.dequantize"}, ops
    assert d.max() <= 1 and np.mean(d == 0) >= 0.99, (d.max(), np.mean(d == 0))


@pytest.mark.parametrize("act,dtype", [("silu", "uint8"), ("sigmoid", "uint8"), ("hardswish", "uint8"),
                                       ("tanh", "int8"), ("gelu", "int8")])
def test_elementwise_functions_of_one_image_are_tables(act, dtype):
    """DequantizeLinear -> float element-wise operators of that one image -> QuantizeLinear
    is one qnn.lut (a table of the 256 values), SiLU's inner QuantizeLinear/Dequantize pair
    included; one step from onnxruntime at most, on every input value."""
    from onnx import TensorProto, helper
    q = {"uint8": TensorProto.UINT8, "int8": TensorProto.INT8}[dtype]
    zx, zs, zy = (np.array(v, dtype) for v in ((117, 0, 90) if dtype == "uint8" else (-5, -128, 3)))
    inits = [("s_x", np.float32(0.043)), ("z_x", zx), ("s_s", np.float32(1 / 255)), ("z_s", zs),
             ("s_y", np.float32(0.021)), ("z_y", zy), ("c3", np.float32(3)), ("c6", np.float32(1 / 6)),
             ("half", np.float32(0.5)), ("one", np.float32(1)), ("rt2", np.float32(1 / np.sqrt(2)))]
    n = helper.make_node
    body = {"sigmoid": [n("Sigmoid", ["xd"], ["f"])],
            "silu": [n("Sigmoid", ["xd"], ["sg"]), n("QuantizeLinear", ["sg", "s_s", "z_s"], ["sq"]),
                     n("DequantizeLinear", ["sq", "s_s", "z_s"], ["sd"]), n("Mul", ["xd", "sd"], ["f"])],
            "hardswish": [n("HardSwish", ["xd"], ["f"])],
            "tanh": [n("Tanh", ["xd"], ["f"])],
            "gelu": [n("Mul", ["xd", "rt2"], ["u"]), n("Erf", ["u"], ["e"]), n("Add", ["e", "one"], ["e1"]),
                     n("Mul", ["xd", "e1"], ["g"]), n("Mul", ["g", "half"], ["f"])]}[act]
    nodes = [n("QuantizeLinear", ["x", "s_x", "z_x"], ["xq"]), n("DequantizeLinear", ["xq", "s_x", "z_x"], ["xd"])]
    nodes += body + [n("QuantizeLinear", ["f", "s_y", "z_y"], ["y"])]
    model = _model(nodes, inits, [("x", [1, 2, 16, 16])], q)
    # every 8-bit input value, twice
    x = ((np.arange(512) % 256 - 128 - (zx.astype(np.float32) if dtype == "uint8" else 0)) * 0.043 +
         (128 * 0.043 if dtype == "uint8" else 0)).astype(np.float32).reshape(1, 2, 16, 16)
    mod, d = _steps(model, {"x": x})
    ops = _ops(mod)
    assert "qnn.lut" in ops and not ops & {"sigmoid", "tanh", "erf", "nn.hard_swish", "multiply", "qnn.dequantize"}, ops
    assert d.max() <= 1 and np.mean(d == 0) >= 0.97, (d.max(), np.mean(d == 0))


@pytest.mark.parametrize("zy", [0, 37])
def test_qlinear_add_integer(zy):
    """DequantizeLinear x2 -> Add -> QuantizeLinear is qnn.add (QLinearAdd: float ratios,
    no division), one step from onnxruntime at most."""
    from onnx import TensorProto, helper
    rng = np.random.default_rng(5)
    inits = [("s_a", np.float32(0.031)), ("z_a", np.uint8(120)), ("s_b", np.float32(0.047)), ("z_b", np.uint8(3)),
             ("s_y", np.float32(0.052)), ("z_y", np.uint8(zy))]
    nodes = _qdq_inputs(["a", "b"]) + [helper.make_node("Add", ["ad", "bd"], ["c"]),
                                       helper.make_node("QuantizeLinear", ["c", "s_y", "z_y"], ["y"])]
    shape = [1, 16, 9, 13]
    model = _model(nodes, inits, [("a", shape), ("b", shape)], TensorProto.UINT8)
    feeds = {"a": rng.standard_normal(shape).astype(np.float32) * 3,
             "b": rng.standard_normal(shape).astype(np.float32) * 4}
    mod, d = _steps(model, feeds)
    ops = _ops(mod)
    assert "qnn.add" in ops and "add" not in ops and "qnn.dequantize" not in ops, ops
    assert d.max() <= 1 and np.mean(d == 0) >= 0.99, (d.max(), np.mean(d == 0))


def test_qlinear_global_avg_pool_integer():
    from onnx import TensorProto, helper
    rng = np.random.default_rng(6)
    inits = [("s_a", np.float32(0.021)), ("z_a", np.uint8(7)), ("s_y", np.float32(0.013)), ("z_y", np.uint8(20))]
    nodes = _qdq_inputs(["a"]) + [helper.make_node("GlobalAveragePool", ["ad"], ["c"]),
                                  helper.make_node("QuantizeLinear", ["c", "s_y", "z_y"], ["y"])]
    shape = [1, 32, 7, 7]
    model = _model(nodes, inits, [("a", shape)], TensorProto.UINT8)
    mod, d = _steps(model, {"a": np.abs(rng.standard_normal(shape)).astype(np.float32) * 2})
    ops = _ops(mod)
    assert "qnn.global_avg_pool" in ops and "nn.global_avg_pool" not in ops, ops
    assert d.max() <= 1, d.max()


def test_qconv_zero_points_read_at_run_time():
    """Two convs alike but for the data's zero point share a kernel: the zero point (and
    its share, z * the packed sums of the weights) must come from each group's own
    constants."""
    from onnx import TensorProto, helper
    rng = np.random.default_rng(7)
    w = rng.integers(-60, 60, (16, 8, 3, 3)).astype(np.int8)
    b = rng.integers(-500, 500, 16).astype(np.int32)
    inits = [("w", w), ("sw", np.float32(0.01)), ("zw", np.int8(0)), ("sy", np.float32(0.2)), ("zy", np.uint8(90))]
    nodes = [helper.make_node("DequantizeLinear", ["w", "sw", "zw"], ["wd"])]
    for x, zx in (("a", 0), ("c", 131)):
        inits += [(f"s_{x}", np.float32(0.05)), (f"z_{x}", np.uint8(zx)), (f"b{x}", b), (f"sb{x}", np.float32(0.05 * 0.01)),
                  (f"zb{x}", np.int32(0))]
        nodes += _qdq_inputs([x]) + [
            helper.make_node("DequantizeLinear", [f"b{x}", f"sb{x}", f"zb{x}"], [f"b{x}d"]),
            helper.make_node("Conv", [f"{x}d", "wd", f"b{x}d"], [f"{x}c"], pads=[1, 1, 1, 1]),
            helper.make_node("QuantizeLinear", [f"{x}c", "sy", "zy"], [f"{x}y"])]
    nodes.append(helper.make_node("Concat", ["ay", "cy"], ["y"], axis=1))
    shape = [1, 8, 6, 6]
    model = _model(nodes, inits, [("a", shape), ("c", shape)], TensorProto.UINT8)
    x = rng.standard_normal(shape).astype(np.float32)
    feeds = {"a": np.abs(x), "c": x}
    mod, d = _steps(model, feeds)
    assert sum(n.op == "qnn.conv2d" for f in mod.main.nodes() if isinstance(f.op, Function)
               for n in f.op.nodes()) == 2
    assert d.max() <= 1, d.max()


@pytest.mark.parametrize("ci,k,stride,pad,dil,co", [(3, 7, 2, 3, 1, 32), (1, 3, 1, 1, 1, 32), (2, 5, 2, 1, 2, 32),
                                                (3, 1, 1, 0, 1, 40)])
def test_qconv_few_channels(ci, k, stride, pad, dil, co):
    """Convs of fewer than 4 input channels (the stem), NCHW[4c] with padded channels, match
    onnxruntime, zero points included; 40 output channels (a ragged last block) go through
    a blocked stage that the NCHW output relays out."""
    from onnx import TensorProto, helper
    rng = np.random.default_rng(8)
    hw = 23
    inits = [("s_x", np.float32(0.02)), ("z_x", np.uint8(117)), ("w", rng.integers(-90, 90, (co, ci, k, k)).astype(np.int8)),
             ("sw", np.float32(0.004)), ("zw", np.int8(0)), ("b", rng.integers(-2000, 2000, co).astype(np.int32)),
             ("sb", np.float32(0.02 * 0.004)), ("zb", np.int32(0)), ("sy", np.float32(0.06)), ("zy", np.uint8(70))]
    nodes = _qdq_inputs(["x"]) + [
        helper.make_node("DequantizeLinear", ["w", "sw", "zw"], ["wd"]),
        helper.make_node("DequantizeLinear", ["b", "sb", "zb"], ["bd"]),
        helper.make_node("Conv", ["xd", "wd", "bd"], ["c"], pads=[pad] * 4, strides=[stride] * 2, dilations=[dil] * 2),
        helper.make_node("QuantizeLinear", ["c", "sy", "zy"], ["y"])]
    model = _model(nodes, inits, [("x", [1, ci, hw, hw])], TensorProto.UINT8)
    mod, d = _steps(model, {"x": rng.standard_normal((1, ci, hw, hw)).astype(np.float32)})
    assert "qnn.conv2d" in _ops(mod)
    assert d.max() <= 1 and np.mean(d == 0) >= 0.99, (d.max(), np.mean(d == 0))
    if tdsl.target.as_target("llvm").has_vnni:
        assert "qconv2d_vnni" in _kinds(mod, "llvm")
