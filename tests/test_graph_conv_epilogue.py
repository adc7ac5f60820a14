"""A conv alone with an exact GELU (Whisper's stem at d_model 256/384/512, as a graph of its
own: nothing blocked after it, so its output is plain NCHW): the epilogue runs on vectors
of channels before the transposing store (strategy/cpu/conv_epilogue.py), and the result
is onnxruntime's; a cheap epilogue, channels that are not whole blocks and a run-time
frame count keep the per-pixel epilogue and match too."""
import math

import numpy as np
import pytest

import tdsl.graph as G
from tdsl.graph.strategy.cpu import conv_epilogue

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402


def _conv_act(ci, co, stride, frames, act="gelu", seed=0):
    """Conv1d(ci -> co, k=3, pad 1, `stride`) + bias, then the exact GELU as the torch
    exporter writes it (x * 0.5 * (1 + erf(x / sqrt 2))), or a ReLU; `frames` a number
    or a symbol."""
    rng = np.random.default_rng(seed)
    w = (rng.standard_normal((co, ci, 3)) / math.sqrt(3 * ci)).astype(np.float32)
    b = (0.1 * rng.standard_normal(co)).astype(np.float32)
    inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["y"], kernel_shape=[3], pads=[1, 1], strides=[stride])]
    if act == "gelu":
        for name, v in (("sq2", math.sqrt(2)), ("one", 1.0), ("half", 0.5)):
            inits.append(numpy_helper.from_array(np.array(v, np.float32), name))
        nodes += [helper.make_node("Div", ["y", "sq2"], ["t"]), helper.make_node("Erf", ["t"], ["e"]),
                  helper.make_node("Add", ["e", "one"], ["e1"]), helper.make_node("Mul", ["y", "e1"], ["m"]),
                  helper.make_node("Mul", ["m", "half"], ["z"])]
    else:
        nodes.append(helper.make_node("Relu", ["y"], ["z"]))
    graph = helper.make_graph(nodes, "conv_act", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, ci, frames])],
                              [helper.make_tensor_value_info("z", TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _check(model, xs, monkeypatch, target="llvm"):
    """Builds `model` (compile cache off, so the schedule runs) and compares it with
    onnxruntime at each input of `xs`, 1e-5 relative to the output's largest element;
    returns how many conv tiles took the channel-vector epilogue."""
    monkeypatch.setenv("TDSL_CACHE", "0")
    G.executor.clear_kernel_cache()
    made = []
    real = conv_epilogue.on_vectors

    def spy(*args):
        made.append(real(*args))
        return made[-1]
    monkeypatch.setattr(conv_epilogue, "on_vectors", spy)
    exe = G.build(G.optimize(G.from_onnx(model), target=target), target=target)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for x in xs:
        ref = sess.run(None, {"x": x})[0]
        out = exe.run(x)[0]
        assert out.shape == ref.shape
        np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5 * float(np.abs(ref).max()))
    return sum(t is not None for t in made)


def _x(ci, frames, seed=1):
    return np.random.default_rng(seed).standard_normal((1, ci, frames)).astype(np.float32)


@pytest.mark.parametrize("ci,co,stride", [(80, 384, 1), (384, 384, 2), (80, 512, 1), (512, 512, 2), (80, 256, 1)])
def test_lone_conv_gelu_on_channel_vectors(ci, co, stride, monkeypatch):
    """Whisper-tiny's and -base's stem convs (80 mel bins, 3000 frames) and their strided
    second convs, each alone with its GELU: the epilogue on channel vectors, onnxruntime's
    result."""
    assert _check(_conv_act(ci, co, stride, 3000), [_x(ci, 3000)], monkeypatch) == 1


def test_avx2_blocks(monkeypatch):
    """AVX2's 8-channel blocks take it too."""
    assert _check(_conv_act(80, 384, 1, 3000), [_x(80, 3000)], monkeypatch, "llvm -mcpu=haswell") == 1
    assert _check(_conv_act(384, 384, 2, 3000), [_x(384, 3000)], monkeypatch, "llvm -mcpu=haswell") == 1


@pytest.mark.parametrize("target", ["llvm", "llvm -mcpu=haswell"])
def test_prime_width(target, monkeypatch):
    """A prime frame count: a lone conv there is the row conv's (conv_choice.conv_path),
    which vectorizes along the row, pixels in the lanes, and needs no relaid tile."""
    assert _check(_conv_act(80, 384, 1, 997), [_x(80, 997)], monkeypatch, target) == 0
    _check(_conv_act(384, 384, 2, 997), [_x(384, 997)], monkeypatch, target)


@pytest.mark.parametrize("act,co", [("relu", 384), ("gelu", 100)])
def test_cheap_or_ragged_keeps_pixel_epilogue(act, co, monkeypatch):
    """A ReLU is no dearer per pixel than the transposing store, and 100 channels are not
    whole blocks of 16 (AVX2: 8) channels: both keep the epilogue on the output's rows."""
    assert _check(_conv_act(80, co, 1, 3000, act), [_x(80, 3000)], monkeypatch) == 0


def test_symbolic_frames(monkeypatch):
    """A frame count exported symbolic: the per-pixel epilogue (the tile's relayout needs
    constant extents), onnxruntime's result at several lengths."""
    xs = [_x(80, n, seed=n) for n in (3000, 997, 17, 1)]
    assert _check(_conv_act(80, 384, 1, "frames"), xs, monkeypatch) == 0
