"""Convs whose weights are graph inputs (a gradient module's forward, weight-gradient and
data-gradient convs) on the CPU's blocked conv with the weights packed per call
(tdsl/graph/strategy/cpu/conv_runtime.py), against torch; each case checks that the group
took that implementation, so a silent fallback to topi's conv fails here, and that new
weights need no rebuild."""
import numpy as np
import pytest

import tdsl.graph as G
from tdsl.graph.ir import Const, Function
from tdsl.graph.strategy.groupdef import GroupDef

onnx = pytest.importorskip("onnx")
torch = pytest.importorskip("torch")
from onnx import TensorProto, helper  # noqa: E402

F = torch.nn.functional


def _model(op, x_shape, w_shape, y_shape, **attrs):
    g = helper.make_graph([helper.make_node(op, ["x", "w"], ["y"], **attrs)], "t",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape)),
                           helper.make_tensor_value_info("w", TensorProto.FLOAT, list(w_shape))],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(y_shape))])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def _implementations(mod):
    names = []
    for n in mod.main.nodes():
        if isinstance(n.op, Function):
            consts = {i: a.data for i, a in enumerate(n.args) if isinstance(a, Const)}
            g = GroupDef(n.op, consts, "llvm")
            g.build()
            names.append(g.anchor.impl.name if g.anchor else None)
    return names


def _run(model, ref_fn, x, w_shape, rng):
    mod = G.optimize(G.from_onnx(model))
    assert "conv_runtime_weights" in _implementations(mod)
    exe = G.build(mod)
    for _ in range(2):      # new weights, the same executable
        w = rng.standard_normal(w_shape).astype(np.float32)
        got = exe.run(x=x, w=w)[0]
        ref = ref_fn(torch.from_numpy(x), torch.from_numpy(w)).numpy()
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4 * float(np.abs(ref).max()))


@pytest.mark.parametrize("n,ci,co,hw,k,s,p,d", [
    (2, 16, 32, 12, 3, 1, 1, 1),      # whole channel blocks
    (1, 5, 20, 11, 3, 2, 1, 1),       # ragged output channels, stride 2
    (2, 8, 16, 9, 1, 2, 0, 1),        # 1x1 downsample
    (3, 4, 16, 10, 3, 1, 2, 2),       # dilated
    (8, 3, 16, 20, 9, 1, 0, 2),       # a weight gradient's shape: large kernel, dilation
])
def test_conv_with_runtime_weights(n, ci, co, hw, k, s, p, d):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, ci, hw, hw)).astype(np.float32)
    ref = F.conv2d(torch.from_numpy(x), torch.zeros(co, ci, k, k), stride=s, padding=p, dilation=d)
    model = _model("Conv", x.shape, (co, ci, k, k), ref.shape, kernel_shape=[k, k], strides=[s, s],
                   pads=[p] * 4, dilations=[d, d])
    _run(model, lambda a, b: F.conv2d(a, b, stride=s, padding=p, dilation=d), x, (co, ci, k, k), rng)


@pytest.mark.parametrize("n,ci,co,hw,k,s,p,op", [
    (2, 32, 16, 8, 3, 1, 1, 0),       # the data gradient of a 3x3 conv
    (1, 16, 20, 6, 3, 2, 1, 1),       # stride 2 with output padding, ragged channels
    (2, 16, 8, 7, 1, 2, 0, 1),        # of a 1x1 downsample
])
def test_conv_transpose_with_runtime_weights(n, ci, co, hw, k, s, p, op):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((n, ci, hw, hw)).astype(np.float32)
    ref = F.conv_transpose2d(torch.from_numpy(x), torch.zeros(ci, co, k, k), stride=s, padding=p,
                             output_padding=op)
    model = _model("ConvTranspose", x.shape, (ci, co, k, k), ref.shape, kernel_shape=[k, k],
                   strides=[s, s], pads=[p] * 4, output_padding=[op, op])
    _run(model, lambda a, b: F.conv_transpose2d(a, b, stride=s, padding=p, output_padding=op),
         x, (ci, co, k, k), rng)


@pytest.mark.parametrize("x_shape,co,k,attrs", [
    ((2, 16, 9, 8), 32, (3, 3), dict(strides=[1, 1], padding=[1, 1, 1, 1], dilation=[1, 1])),
    ((2, 32, 11, 10), 16, (3, 2), dict(strides=[2, 3], padding=[1, 0, 2, 1], dilation=[2, 1])),
    ((2, 3, 20, 20), 16, (7, 7), dict(strides=[2, 2], padding=[3, 3, 3, 3], dilation=[1, 1])),
    ((2, 48, 7, 7), 32, (1, 1), dict(strides=[2, 2], padding=[0, 0, 0, 0], dilation=[1, 1])),
], ids=["3x3", "strided_dilated", "first_layer", "1x1_stride2"])
@pytest.mark.parametrize("target", ["llvm", "llvm -mcpu=haswell"])
def test_weight_gradient_is_a_gemm_per_tap(x_shape, co, k, attrs, target):
    """nn.conv_weight_grad (the weight adjoint of a gradient module's conv) on
    cpu/conv_wgrad.py, against torch's conv2d weight gradient; the first-layer case (3
    input channels) puts its vectors along the output channels."""
    from tdsl.graph import Call, Module, TensorType, Var
    rng = np.random.default_rng(4)
    xv = rng.standard_normal(x_shape).astype(np.float32)
    w = torch.zeros((co, x_shape[1]) + k, requires_grad=True)
    p = attrs["padding"]
    xp = F.pad(torch.from_numpy(xv), (p[1], p[3], p[0], p[2]))
    y = F.conv2d(xp, w, stride=attrs["strides"], dilation=attrs["dilation"])
    dyv = rng.standard_normal(tuple(y.shape)).astype(np.float32)
    y.backward(torch.from_numpy(dyv))
    x, dy = Var("x", TensorType(x_shape, "float32")), Var("dy", TensorType(dyv.shape, "float32"))
    call = Call("nn.conv_weight_grad", [x, dy], dict(attrs, kernel_size=list(k)))
    mod = G.optimize(Module(Function("main", [x, dy], [call])))
    assert _implementations(mod) == ["conv_weight_grad"]
    (got,) = G.build(mod, target=target).run(x=xv, dy=dyv)
    want = w.grad.numpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


@pytest.mark.parametrize("target", ["llvm", "llvm -mcpu=haswell"])
def test_first_layer_weight_gradient_in_chunks(target):
    """A first conv's weight adjoint (3 input channels, 7x7 stride 2) over an adjoint of
    more than conv_wgrad.CHUNK_MIN_BYTES takes the chunked product (every tap over chunks
    of a few rows), against torch."""
    from tdsl.graph import Call, Module, TensorType, Var
    from tdsl.graph.strategy.cpu import conv_wgrad
    rng = np.random.default_rng(8)
    x_shape, co = (2, 3, 192, 190), 64
    xv = rng.standard_normal(x_shape).astype(np.float32)
    w = torch.zeros((co, 3, 7, 7), requires_grad=True)
    y = F.conv2d(torch.from_numpy(xv), w, stride=2, padding=3)
    assert y.numel() * 4 >= conv_wgrad.CHUNK_MIN_BYTES
    dyv = rng.standard_normal(tuple(y.shape)).astype(np.float32)
    y.backward(torch.from_numpy(dyv))
    x, dy = Var("x", TensorType(x_shape, "float32")), Var("dy", TensorType(dyv.shape, "float32"))
    attrs = dict(strides=[2, 2], padding=[3, 3, 3, 3], dilation=[1, 1], kernel_size=[7, 7])
    mod = G.optimize(Module(Function("main", [x, dy], [Call("nn.conv_weight_grad", [x, dy], attrs)])))
    (group,) = [n.op for n in mod.main.nodes() if isinstance(n.op, Function)]
    g = GroupDef(group, {}, target)
    g.build()
    assert g.anchor.impl.name == "conv_weight_grad" and g.anchor.tensor.op.attrs["chunks"] is not None
    (got,) = G.build(mod, target=target).run(x=xv, dy=dyv)
    want = w.grad.numpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


@pytest.mark.parametrize("x_shape,s,p,d", [
    ((2, 24, 17, 19), 1, 1, 1),       # a ragged last vector of columns
    ((2, 16, 20, 20), 2, 1, 1),       # stride 2
    ((1, 8, 9, 9), 1, 2, 2),          # dilated
    ((2, 32, 7, 7), 1, 1, 1),         # one partial vector per row
])
@pytest.mark.parametrize("target", ["llvm", "llvm -mcpu=haswell"])
def test_depthwise_weight_gradient(x_shape, s, p, d, target):
    """A depthwise conv's weight adjoint on cpu/conv_wgrad_depthwise.py against torch; a
    channel multiplier of 2 keeps topi's definition."""
    from tdsl.graph import Call, Module, TensorType, Var
    rng = np.random.default_rng(9)
    C = x_shape[1]
    for mult in (1, 2):
        xv = rng.standard_normal(x_shape).astype(np.float32)
        w = torch.zeros((C * mult, 1, 3, 3), requires_grad=True)
        y = F.conv2d(torch.from_numpy(xv), w, stride=s, padding=p, dilation=d, groups=C)
        dyv = rng.standard_normal(tuple(y.shape)).astype(np.float32)
        y.backward(torch.from_numpy(dyv))
        x, dy = Var("x", TensorType(x_shape, "float32")), Var("dy", TensorType(dyv.shape, "float32"))
        attrs = dict(strides=[s, s], padding=[p] * 4, dilation=[d, d], groups=C, kernel_size=[3, 3])
        mod = G.optimize(Module(Function("main", [x, dy], [Call("nn.conv_weight_grad", [x, dy], attrs)])))
        took = _implementations(mod) == ["depthwise_weight_grad"]
        assert took == (mult == 1)
        (got,) = G.build(mod, target=target).run(x=xv, dy=dyv)
        want = w.grad.numpy()
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
