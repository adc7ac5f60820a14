"""A transformer layer's elementwise work joins its projections' kernels: the residual add
after a projection of a (1, S, D) hidden state (ONNX MatMul imported as reshape -> dense ->
reshape; passes/simplify.py `sink_reshapes`), and the tanh GELU of ALBERT and GPT-2, whose
chains read x first in 0.5 * x and last in x + c * x^3 (passes/fuse.py `_diamond`). Each
case runs against onnxruntime, at a static and at symbolic sequence lengths, and counts
the kernels."""
import math

import numpy as np
import pytest

import tdsl.graph as G

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

D, F = 32, 64


class Layer:
    """An ONNX graph over x: (1, S, D), built node by node with random weights."""

    def __init__(self, seed=0):
        self.rng = np.random.default_rng(seed)
        self.nodes, self.inits, self.k = [], [], 0

    def name(self, base):
        self.k += 1
        return f"{base}{self.k}"

    def const(self, arr):
        n = self.name("w")
        self.inits.append(numpy_helper.from_array(np.asarray(arr, np.float32), n))
        return n

    def node(self, op, ins, **attrs):
        out = self.name(op.lower())
        self.nodes.append(helper.make_node(op, ins, [out], **attrs))
        return out

    def linear(self, x, ci, co):
        w = self.const(self.rng.standard_normal((ci, co)) / np.sqrt(ci))
        return self.node("Add", [self.const(self.rng.standard_normal(co) * 0.1), self.node("MatMul", [x, w])])

    def gelu_tanh(self, x):
        # HF NewGELUActivation, in the order torch exports it
        half = self.node("Mul", [self.const(0.5), x])
        cube = self.node("Pow", [x, self.const(3.0)])
        inner = self.node("Add", [x, self.node("Mul", [self.const(0.044715), cube])])
        t = self.node("Tanh", [self.node("Mul", [self.const(math.sqrt(2 / math.pi)), inner])])
        return self.node("Mul", [half, self.node("Add", [self.const(1.0), t])])

    def model(self, out, seq):
        x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, seq, D])
        g = helper.make_graph(self.nodes, "t", [x], [helper.make_tensor_value_info(out, TensorProto.FLOAT, None)],
                              self.inits)
        return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _ffn_block():
    """x + fc2(gelu_tanh(fc1(x))), then x2 + proj(x2): two residual adds, one GELU."""
    net = Layer()
    h = net.gelu_tanh(net.linear("x", D, F))
    x2 = net.node("Add", ["x", net.linear(h, F, D)])
    return net, net.node("Add", [net.linear(x2, D, D), x2])


def _ref(model, x):
    so = ort.SessionOptions()
    so.log_severity_level = 3
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


def _kernels(mod):
    return [n.op.name for n in mod.main.nodes() if isinstance(n.op, G.Function)]


def test_residual_adds_and_tanh_gelu_join_the_projections():
    net, out = _ffn_block()
    model = net.model(out, 24)
    mod = G.optimize(G.from_onnx(model), target="llvm")
    names = [k for k in _kernels(mod) if not k.startswith("fused_reshape")]
    # three projections, each with its bias, GELU or residual add: no pass of its own
    assert len(names) == 3 and all(k.startswith("fused_dense") for k in names), names
    x = net.rng.standard_normal((1, 24, D)).astype(np.float32)
    exe = G.build(mod)
    ref = _ref(model, x)
    np.testing.assert_allclose(exe.run(x)[0], ref, rtol=2e-5, atol=2e-5 * float(np.abs(ref).max()))
    # the reshapes left between kernels are views: three kernels run
    assert len(exe.steps) == 3


def test_residual_adds_join_the_projections_at_symbolic_lengths():
    net, out = _ffn_block()
    model = net.model(out, "sequence")
    mod = G.optimize(G.from_onnx(model), target="llvm")
    names = [k for k in _kernels(mod) if not k.startswith("fused_reshape")]
    assert len(names) == 3 and all(k.startswith("fused_dense") for k in names), names
    exe = G.build(mod)
    for s in (1, 7, 40):
        x = net.rng.standard_normal((1, s, D)).astype(np.float32)
        ref = _ref(model, x)
        np.testing.assert_allclose(exe.run(x)[0], ref, rtol=2e-5, atol=2e-5 * float(np.abs(ref).max()))


def test_residual_of_another_shape_is_not_moved():
    # the residual broadcasts over the sequence: reshaping it would not be a view of the
    # same elements, so the add stays outside the projection (and still matches)
    net = Layer()
    y = net.node("Add", [net.linear("x", D, D), net.const(np.ones((1, 1, D)))])
    y = net.node("Add", [y, net.node("ReduceMean", ["x"], axes=[1], keepdims=1)])
    model = net.model(y, 9)
    x = net.rng.standard_normal((1, 9, D)).astype(np.float32)
    got = G.build(G.optimize(G.from_onnx(model), target="llvm")).run(x)[0]
    ref = _ref(model, x)
    np.testing.assert_allclose(got, ref, rtol=2e-5, atol=2e-5 * float(np.abs(ref).max()))
