"""An image stem (a conv of a plain image of 1-4 channels) at the head of a blocked chain:
its register tile unrolls the taps where it broadcasts more pixels than it loads weight
vectors (conv_blocked._stem_taps); the networks match onnxruntime either way."""
import numpy as np
import pytest

import tdsl
import tdsl.graph as G
from tdsl.graph import models
from tdsl.graph.strategy.cpu import conv_blocked

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")


def _stem_net(cin, c, size, k, stride):
    """stem (k x k, `stride`, ReLU6) -> depthwise 3x3 -> 1x1 -> global pool: MobileNet's head."""
    b = models._B(5)
    x = b.conv_bn("input", cin, c, k, stride=stride, act="relu6")
    y = b.conv_bn(x, c, c, 3, groups=c, act="relu6")
    y = b.conv_bn(y, c, 16, 1, act=None)
    y = b.node("GlobalAveragePool", [y])
    return b.model([("input", [1, cin, size, size])], [y], "stem")


@pytest.mark.parametrize("target", ["llvm", "llvm -mcpu=haswell"])
@pytest.mark.parametrize("cin,c,size,k,stride", [
    (3, 32, 64, 3, 2),      # MobileNetV2's stem: (8, 2) on AVX-512, its taps unrolled
    (3, 16, 50, 3, 2),      # MobileNetV3's: one vector of channels
    (1, 24, 48, 3, 1),      # a grey image, channels not a whole number of vectors
    (3, 64, 221, 3, 2),     # SqueezeNet's 111-wide rows of 64 channels: (3, 4) keeps its loops
    (3, 32, 40, 7, 2),      # a 7x7 stem: 49 taps keep their loops
])
def test_stem_matches_onnxruntime(monkeypatch, target, cin, c, size, k, stride):
    seen = []
    real = conv_blocked._stem_taps

    def spy(t, info, first, rest, xb, cbb):
        axes = real(t, info, first, rest, xb, cbb)
        seen.append((info.get("in_blocked"), xb, cbb, len(axes)))
        return axes
    monkeypatch.setattr(conv_blocked, "_stem_taps", spy)
    model = _stem_net(cin, c, size, k, stride)
    x = np.random.default_rng(2).standard_normal((1, cin, size, size)).astype(np.float32)
    mod = G.optimize(G.from_onnx(model), target=target)
    out = G.build(mod, target=target).run(x)[0]
    ref = models.onnxruntime_run(model, {"input": x})[0]
    assert float(np.abs(out - ref).max()) <= 1e-4 * float(np.abs(ref).max())
    stems = [s for s in seen if not s[0]]
    assert len(stems) == 1 and not any(s[3] for s in seen if s[0]), seen
    _, xb, cbb, unrolled = stems[0]
    broadcast_bound = k * k <= conv_blocked.STEM_MAX_TAPS and xb >= 2 * cbb \
        and tdsl.target.Target(target).vector_registers >= 32
    assert unrolled == (2 if broadcast_bound else 0), seen


def _axes(*extents):
    return [tdsl.reduce_axis((0, e)) for e in extents]


def test_stem_taps_rule():
    """Only a plain input of a few planes, a kernel of at most STEM_MAX_TAPS taps and a
    broadcast-bound tile of 32 registers (AVX-512) unroll the taps."""
    ci, *taps = _axes(3, 3, 3)
    plain = {"in_blocked": False}
    t = tdsl.target.Target("llvm -mcpu=znver4")
    assert conv_blocked._stem_taps(tdsl.target.Target("llvm -mcpu=haswell"), plain, ci, taps, 8, 2) == []
    assert conv_blocked._stem_taps(t, plain, ci, taps, 8, 2) == taps
    assert conv_blocked._stem_taps(t, plain, ci, taps, 16, 1) == taps
    assert conv_blocked._stem_taps(t, plain, ci, taps, 3, 4) == []           # SqueezeNet's tile
    assert conv_blocked._stem_taps(t, {"in_blocked": True}, ci, taps, 8, 2) == []
    assert conv_blocked._stem_taps(t, plain, *_axes(16, 3, 3)[:1], taps, 8, 2) == []
    ci7, *taps7 = _axes(3, 7, 7)
    assert conv_blocked._stem_taps(t, plain, ci7, taps7, 8, 2) == []
    n = tdsl.var("n")
    assert conv_blocked._stem_taps(t, plain, tdsl.reduce_axis((0, n)), taps, 8, 2) == []
