"""Static 1-D convs (conv2d of one row) on rows of any width: a width that no good register
tile divides (a prime one) takes the long-row tile with its last tile shifted inwards
(strategy/cpu/width.shifted_row_tile), and the result is onnxruntime's."""
import numpy as np
import pytest

import tdsl
import tdsl.graph as G
from tdsl.graph import models
from tdsl.graph.strategy.cpu import conv_blocked, width

pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")


@pytest.mark.parametrize("target", ["llvm -mcpu=znver5", "llvm -mcpu=haswell"])
def test_shifted_tile_only_where_no_tile_divides(target):
    """Rows with good divisors (conv1d_net's 4000..250 samples, Whisper's 3000 and 1500)
    keep the tile that divides them; prime rows of 64-256 channels get the long row's
    tile; a row narrower than that tile, or of run-time width, gets none."""
    t = tdsl.target.Target(target)
    for w, cols in [(4000, 32), (2000, 64), (1000, 64), (500, 128), (250, 256), (3000, 256), (1500, 256)]:
        assert width.shifted_row_tile(t, w, cols) is None, (w, cols)
    for w, cols in [(251, 256), (997, 64), (4001, 128), (499, 128)]:
        tile = width.shifted_row_tile(t, w, cols)
        assert tile is not None and tile[0] > 1 and w % tile[0], (w, cols, tile)
        whole = tdsl.tiling.register_tile(t, w, cols, whole_rows=True, whole_vecs=True)
        assert tile[0] * tile[1] > whole[0] * whole[1], (w, cols, tile, whole)
    assert width.shifted_row_tile(t, 5, 64) is None
    assert width.shifted_row_tile(t, tdsl.var("w"), 64) is None


def _net(batch, cin, length, seed):
    """A 1-D chain over rows of odd widths: k=3 (stride 1 and 2, dilated), a strided
    pointwise shortcut, a residual add, a pointwise conv, global pool."""
    b = models._B(seed)
    x = b.conv_bn("input", cin, 64, 3, nd=1)
    y = b.conv_bn(x, 64, 128, 3, stride=2, nd=1)
    y = b.conv_bn(y, 128, 128, 3, act=None, nd=1, dilation=2)
    sc = b.conv_bn(x, 64, 128, 1, stride=2, act=None, nd=1)
    x = b.node("Relu", [b.node("Add", [y, sc])])
    x = b.conv_bn(x, 128, 128, 1, nd=1)
    return b.model([("input", [batch, cin, length])], [b.node("GlobalAveragePool", [x])], "conv1d_rows")


@pytest.mark.parametrize("target", ["llvm", "llvm -mcpu=haswell"])
@pytest.mark.parametrize("length,batch", [(997, 1), (251, 2), (4001, 1), (23, 1), (5, 1), (1000, 1)])
def test_conv1d_chain_odd_widths(target, length, batch, monkeypatch):
    """The chain's convs against onnxruntime at prime widths (997 -> 499, 251 -> 126,
    4001 -> 2001, 23 -> 12), rows narrower than a tile (5 -> 3) and a round one, on
    AVX-512's 16- and AVX2's 8-channel blocks; prime rows do take shifted tiles."""
    taken = []

    def spy(*args):
        taken.append(width.shifted_row_tile(*args))
        return taken[-1]
    monkeypatch.setattr(conv_blocked, "shifted_row_tile", spy)
    model = _net(batch, 8, length, seed=length)
    x = np.random.default_rng(length).standard_normal((batch, 8, length)).astype(np.float32)
    ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"input": x})[0]
    out = G.build(G.optimize(G.from_onnx(model), target=target), target=target).run(x)[0]
    np.testing.assert_allclose(out, ref, rtol=2e-4, atol=2e-4 * float(np.abs(ref).max()))
    shifted = [t for t in taken if t is not None]
    assert (len(shifted) > 0) == (length in (997, 251, 4001, 23)), taken


@pytest.mark.parametrize("target", ["llvm", "llvm -mcpu=haswell"])
@pytest.mark.parametrize("cin,cout,k,stride,length", [(8, 64, 3, 1, 997), (16, 128, 3, 2, 503), (32, 64, 1, 1, 251)])
def test_lone_conv1d_prime_width(target, cin, cout, k, stride, length):
    """A 1-D conv alone on a prime row matches onnxruntime (the row conv and the pixel
    GEMM take these, conv_choice.conv_path: no chain, so no blocked tile to shift)."""
    b = models._B(length)
    y = b.conv_bn("input", cin, cout, k, stride=stride, nd=1)
    model = b.model([("input", [1, cin, length])], [y], "conv1d_lone")
    x = np.random.default_rng(cin).standard_normal((1, cin, length)).astype(np.float32)
    ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"input": x})[0]
    out = G.build(G.optimize(G.from_onnx(model), target=target), target=target).run(x)[0]
    np.testing.assert_allclose(out, ref, rtol=2e-4, atol=2e-4 * float(np.abs(ref).max()))
