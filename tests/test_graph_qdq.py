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
            kinds.append(g.anchor[1]["kind"] if g.anchor else None)
    return kinds


def _output_step(model):
    """The scale of the DequantizeLinear that makes the network's output."""
    from onnx import numpy_helper
    out = model.graph.output[0].name
    node = next(n for n in model.graph.node if out in n.output)
    inits = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    return float(inits[node.input[1]])


@pytest.mark.parametrize("target,kind", [("llvm", "qconv2d_vnni"), ("llvm -mcpu=znver3", "qconv2d_int32")])
def test_qdq_resnet_matches_onnxruntime(qdq_resnet, target, kind):
    if kind == "qconv2d_vnni" and not tdsl.target.as_target(target).has_vnni:
        pytest.skip("no AVX512-VNNI on this machine")
    mod = G.optimize(G.from_onnx(qdq_resnet))
    kinds = _kinds(mod, target)
    assert kinds.count(kind) == 20, kinds           # every conv of the network
    assert not any(n.op == "nn.conv2d" for f in mod.main.nodes() if isinstance(f.op, Function)
                   for n in f.op.nodes())
    x = np.random.default_rng(3).standard_normal((1, 3, 32, 32)).astype(np.float32)
    ref = models.onnxruntime_run(qdq_resnet, {"input": x})[0]
    got = G.build(mod, target=target).run(x)[0]
    steps = np.rint(np.abs(got - ref) / _output_step(qdq_resnet))
    assert steps.max() <= 1 and np.mean(steps == 0) >= 0.9, (steps.max(), np.mean(steps == 0))


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
