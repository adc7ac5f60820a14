"""An elementwise chain is computed inside the reduction that reads it, and the reduction's
elementwise epilogue joins the same kernel (passes/fuse.py `ROW_REDUCTIONS`): T5's RMS norm
(x * x -> mean -> + eps -> sqrt -> 1 / . -> x * . -> * weight) is one kernel, and so is a
layer norm written out of Sub, Pow and ReduceMean (x - mean(x) read by the second mean and
the division: a diamond through a reduction). A producer read by anything else stays a
kernel of its own. Each case runs against onnxruntime, at a static and at symbolic sequence
lengths, and counts the kernels."""
import numpy as np
import pytest

import tdsl.graph as G
from tdsl.graph.passes import fuse

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

D = 48


class Graph:
    """An ONNX graph over x: (1, S, D), x0 = x + x standing for a residual stream (a value
    read by the norm and by what follows it), built node by node."""

    def __init__(self):
        self.rng = np.random.default_rng(0)
        self.nodes, self.inits, self.k = [], [], 0
        self.outs = []

    def const(self, arr, dtype=np.float32):
        self.k += 1
        n = f"c{self.k}"
        self.inits.append(numpy_helper.from_array(np.asarray(arr, dtype), n))
        return n

    def node(self, op, ins, **attrs):
        self.k += 1
        out = f"{op.lower()}{self.k}"
        self.nodes.append(helper.make_node(op, ins, [out], **attrs))
        return out

    def reduce(self, op, x):
        return self.node(op, [x, self.const([-1], np.int64)])

    def model(self, seq):
        x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, seq, D])
        outs = [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in self.outs]
        g = helper.make_graph(self.nodes, "t", [x], outs, self.inits)
        return helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])


def _rms_norm():
    """HF T5LayerNorm as torch exports it."""
    net = Graph()
    x = net.node("Add", ["x", "x"])
    var = net.reduce("ReduceMean", net.node("Pow", [x, net.const(2.0)]))
    inv = net.node("Div", [net.const(1.0), net.node("Sqrt", [net.node("Add", [var, net.const(1e-6)])])])
    net.outs = [net.node("Mul", [net.const(net.rng.standard_normal(D)), net.node("Mul", [x, inv])])]
    return net


def _layer_norm():
    """A layer norm out of its parts (exporters that do not write LayerNormalization)."""
    net = Graph()
    x = net.node("Add", ["x", "x"])
    d = net.node("Sub", [x, net.reduce("ReduceMean", x)])
    var = net.reduce("ReduceMean", net.node("Pow", [d, net.const(2.0)]))
    y = net.node("Div", [d, net.node("Sqrt", [net.node("Add", [var, net.const(1e-5)])])])
    net.outs = [net.node("Add", [net.node("Mul", [y, net.const(net.rng.standard_normal(D))]),
                                 net.const(net.rng.standard_normal(D))])]
    return net


def _shared_square():
    """x * x read by the reduction and by an output of its own: it is computed once, in a
    kernel of its own, and the reduction reads it."""
    net = Graph()
    sq = net.node("Mul", ["x", "x"])
    inv = net.node("Reciprocal", [net.node("Sqrt", [net.node("Add", [net.reduce("ReduceSum", sq),
                                                                      net.const(1.0)])])])
    net.outs = [net.node("Mul", ["x", inv]), sq]
    return net


def _max_and_logsumexp():
    """ReduceMax of |x| and a log-sum-exp: the other reducers take their chains too."""
    net = Graph()
    m = net.reduce("ReduceMax", net.node("Abs", [net.node("Add", ["x", net.const(0.5)])]))
    lse = net.node("Log", [net.reduce("ReduceSum", net.node("Exp", [net.node("Mul", ["x", net.const(0.25)])]))])
    net.outs = [net.node("Sub", ["x", net.node("Add", [m, lse])])]
    return net


def _kernels(mod):
    return [n.op for n in mod.main.nodes() if isinstance(n.op, G.Function)]


def _ref(model, x):
    so = ort.SessionOptions()
    so.log_severity_level = 3
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return sess.run(None, {"x": x})


def _check(net, seq, lengths):
    model = net.model(seq)
    mod = G.optimize(G.from_onnx(model), target="llvm")
    exe = G.build(mod, target="llvm")
    rng = np.random.default_rng(3)
    for s in lengths:
        x = rng.standard_normal((1, s, D)).astype(np.float32)
        outs = exe.run(x)
        for o, r in zip(outs, _ref(model, x)):
            assert o.shape == r.shape
            np.testing.assert_allclose(o, r, rtol=1e-4, atol=1e-5)
    return _kernels(mod)


def _reducing(kernels):
    """The ops of each kernel that computes a reduction."""
    return [[n.op for n in f.nodes()] for f in kernels if any(n.op in fuse.ROW_REDUCTIONS for n in f.nodes())]


CASES = [("static", 40, [40]), ("symbolic", "S", [1, 7, 40])]


@pytest.mark.parametrize("label,seq,lengths", CASES)
def test_rms_norm_is_one_kernel(label, seq, lengths):
    kernels = _check(_rms_norm(), seq, lengths)
    # the residual stream's add, then the whole norm
    assert len(kernels) == 2
    (ops,) = _reducing(kernels)
    assert ops.index("mean") > ops.index("multiply")        # x * x computed inside the mean
    assert {"sqrt", "divide"} <= set(ops) and ops.count("multiply") >= 2


@pytest.mark.parametrize("label,seq,lengths", CASES)
def test_layer_norm_from_parts_is_one_kernel(label, seq, lengths):
    kernels = _check(_layer_norm(), seq, lengths)
    # x - mean(x) is read by the second mean and by the division: a diamond through a
    # reduction, inside the first mean's kernel
    assert len(kernels) == 2
    (ops,) = _reducing(kernels)
    assert ops.count("mean") == 2 and ops.index("subtract") < ops.index("mean", 1)


@pytest.mark.parametrize("label,seq,lengths", CASES)
def test_centred_value_read_outside_stays_its_kernels_output(label, seq, lengths):
    """x - mean(x) is also a graph output: the norm after it is a kernel of its own."""
    net = _layer_norm()
    net.outs.append(next(n.output[0] for n in net.nodes if n.op_type == "Sub"))
    kernels = _check(net, seq, lengths)
    assert [ops.count("mean") for ops in _reducing(kernels)] == [1, 1]


@pytest.mark.parametrize("label,seq,lengths", CASES)
def test_producer_read_twice_stays_its_own_kernel(label, seq, lengths):
    kernels = _check(_shared_square(), seq, lengths)
    (ops,) = _reducing(kernels)
    assert ops[0] == "sum" and "multiply" in ops[1:]     # reads x * x, scales x after it
    assert ["multiply"] in [[n.op for n in f.nodes()] for f in kernels]


@pytest.mark.parametrize("label,seq,lengths", CASES)
def test_max_and_sum_take_their_chains(label, seq, lengths):
    kernels = _check(_max_and_logsumexp(), seq, lengths)
    reducing = _reducing(kernels)
    assert len(reducing) == 2
    assert any(ops.index("max") > ops.index("abs") for ops in reducing if "max" in ops)
    assert any(ops.index("sum") > ops.index("exp") for ops in reducing if "sum" in ops)


def test_t5_encoder_norms_are_one_kernel_each():
    """The exported T5 encoder (static 1x128) against onnxruntime; each of its nine RMS
    norms is one kernel that computes x * x, the mean and the scaling."""
    pytest.importorskip("transformers")
    pytest.importorskip("torch")
    from tdsl.graph import models, zoo
    model = zoo.export("t5_encoder")
    mod = G.optimize(G.from_onnx(model), target="llvm")
    kernels = _kernels(mod)
    reducing = _reducing(kernels)
    assert len(reducing) == 9
    assert all({"multiply", "mean", "sqrt"} <= set(ops) for ops in reducing)
    x = zoo.example_input("t5_encoder")
    out = G.build(mod, target="llvm").run(x)[0]
    ref = models.onnxruntime_run(model, {"input": x})[0]
    assert float(np.abs(out - ref).max()) <= 1e-3 * float(np.abs(ref).max())
