"""Weights a host build re-lays out at build time (a dense layer's packed panels) start on
a cache line (host_buffer.aligned), static and with a symbolic token count alike: numpy
puts a large array 16 bytes past a page, where most vector loads of the weights straddle
two lines. Each build runs against onnxruntime at 1, 2 and 7 tokens."""
import numpy as np
import pytest

import tdsl.graph as G
from tdsl.graph.host_buffer import aligned
from tdsl.graph.passes.memory import ALIGN

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

K, N, F = 96, 80, 256       # N and F: not a multiple of a tile, so packing pads the panels


def _mlp(tokens):
    """x (tokens, K) -> relu(x W1 + b1) W2 + x W3: three dense layers with residual work."""
    rng = np.random.default_rng(3)
    inits = [numpy_helper.from_array((rng.standard_normal(s) / np.sqrt(s[0])).astype(np.float32), n)
             for n, s in (("w1", (K, F)), ("w2", (F, N)), ("w3", (K, N)))]
    inits.append(numpy_helper.from_array(rng.standard_normal(F).astype(np.float32), "b1"))
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"]),
             helper.make_node("Add", ["h", "b1"], ["hb"]),
             helper.make_node("Relu", ["hb"], ["r"]),
             helper.make_node("MatMul", ["r", "w2"], ["y2"]),
             helper.make_node("MatMul", ["x", "w3"], ["y3"]),
             helper.make_node("Add", ["y2", "y3"], ["y"])]
    g = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [tokens, K])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _packed(exe):
    """The constant arrays the kernels take that a transform made (not the model's own)."""
    out = []
    for k, args, _ in exe.steps:
        for i, a in zip(k.param_order, args):
            if isinstance(a, np.ndarray) and i in k.transforms:
                out.append(a)
    return out


@pytest.mark.parametrize("tokens", [None, 1, 2, 7])
def test_packed_weights_start_on_a_line_and_compute_right(tokens):
    model = _mlp("tokens")
    exe = G.build(G.optimize(G.from_onnx(model, dims=None if tokens is None else {"tokens": tokens})))
    packed = _packed(exe)
    assert len(packed) >= 3, [k.name for k, _, _ in exe.steps]
    assert all(a.ctypes.data % ALIGN == 0 for a in packed), [a.ctypes.data % ALIGN for a in packed]
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for m in ([1, 2, 7] if tokens is None else [tokens]):
        x = np.random.default_rng(m).standard_normal((m, K)).astype(np.float32)
        ref = sess.run(None, {"x": x})[0]
        np.testing.assert_allclose(exe.run(x)[0], ref, rtol=2e-5, atol=2e-5)


def test_aligned_copies_only_what_is_off_a_line():
    raw = np.zeros(4 * 37 * 3 + 64, np.uint8)
    start = (-raw.ctypes.data % 64) + 16         # 16 bytes past a line, as numpy's large arrays
    off = raw[start:start + 4 * 37 * 3].view(np.float32).reshape(37, 3)
    off[...] = np.arange(111, dtype=np.float32).reshape(37, 3)
    got = aligned(off, 64)
    assert got.ctypes.data % 64 == 0 and got.shape == (37, 3) and got.dtype == np.float32
    np.testing.assert_array_equal(got, off)
    assert aligned(got, 64) is got
    strided = aligned(got[:, ::2], 64)           # a view that is not C-contiguous: copied
    assert strided.flags.c_contiguous and strided.ctypes.data % 64 == 0
    np.testing.assert_array_equal(strided, got[:, ::2])
