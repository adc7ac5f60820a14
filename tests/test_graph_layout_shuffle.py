"""ShuffleNetV2's branches channel-blocked (passes/layout.py): a depthwise conv that reads a
conv keeps its chain although the chain ends in the NCHW concatenation and channel shuffle;
the network against onnxruntime with 58/116/232-channel branches (no whole number of
vectors), stride 2 and padding, at batch 1 and 2; with AVX2's 8-lane vectors the network
stays NCHW (DEPTHWISE_LANES)."""
import numpy as np
import pytest

import tdsl.graph as G
from tdsl.graph import models
from tdsl.graph.ir import Function
from tdsl.graph.passes.layout import DEPTHWISE_LANES
from tdsl.target import Target

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")


def _groups(mod):
    return [[m for m in n.op.nodes()] for n in mod.main.nodes() if isinstance(n.op, Function)]


def _run(model, shape, target):
    x = np.random.default_rng(2).standard_normal(shape).astype(np.float32)
    mod = G.optimize(G.from_onnx(model), target=target)
    out = G.build(mod, target=target).run(x)[0]
    ref = models.onnxruntime_run(model, {"input": x})[0]
    assert out.shape == ref.shape
    assert float(np.abs(out - ref).max()) <= 1e-4 * float(np.abs(ref).max())
    return mod


@pytest.mark.parametrize("target,batch", [("llvm", 1), ("llvm", 2), ("llvm -mcpu=haswell", 1),
                                          ("llvm -mcpu=haswell", 2)])
def test_shufflenet_branches_run_blocked(target, batch):
    model = models.shufflenet_v2(batch=batch, size=64)
    mod = _run(model, (batch, 3, 64, 64), target)
    convs = [m for g in _groups(mod) for m in g if m.op in ("nn.conv2d", "nn.conv2d_blocked")]
    blocked = [m for m in convs if m.op == "nn.conv2d_blocked"]
    ops = [m.op for g in _groups(mod) for m in g]
    # the last 1x1 conv, alone, writes blocked for the ReduceMean after it to sum vectors
    # of channels; the mean is relaid out as a view
    last = [m for m in blocked if m.args[1].type.shape[0] == 1024]
    assert len(last) == 1 and not last[0].attrs["in_blocked"], [m.attrs for m in blocked]
    assert [g[0].type.shape[2:4] for g in _groups(mod) if g[0].op == "mean"] == [(1, 1)]
    assert "layout.from_blocked" not in [m.op for g in _groups(mod) if g[0].op == "mean" for m in g]
    if Target(target).vector_lanes("float32") < DEPTHWISE_LANES:
        assert len(convs) == 26 and len(blocked) == 1, [m.op for m in convs]
        return
    depthwise = [m for m in blocked if m.attrs["groups"] != 1]
    # every branch's depthwise conv but those of the second and third stages' first units
    # that read the shuffled image (and their 1x1)
    assert len(convs) == 26 and len(blocked) == 22, [m.op for m in convs]
    assert sorted(m.args[1].type.shape[0] for m in depthwise) == [24, 58, 58, 116, 116, 232, 232], \
        [m.args[1].type.shape for m in depthwise]
    plain = [m for m in convs if m.op == "nn.conv2d"]
    assert sorted(m.attrs["groups"] for m in plain) == [1, 1, 116, 232]
    # the stem and the max pool after it are in the first stage's chain; no image is
    # relaid out by a copy of its own: each branch's last 1x1 stores NCHW in its epilogue
    assert ops.count("nn.max_pool3d") == 1 and "nn.max_pool2d" not in ops, ops
    assert "layout.to_blocked" not in ops, ops
    for g in _groups(mod):
        if any(m.op == "layout.from_blocked" for m in g):
            assert g[0].op == "nn.conv2d_blocked" and g[0].attrs["groups"] == 1, [m.op for m in g]


def test_a_depthwise_conv_reading_a_shuffle_stays_nchw():
    """A depthwise conv fed by the channel shuffle, not by a conv, and its 1x1 keep NCHW:
    blocking their input would be a transposing copy of the shuffled image."""
    model = models.shufflenet_v2(size=32, widths=(116, 232), repeats=(1, 1))
    mod = _run(model, (1, 3, 32, 32), "llvm")
    plain = [m for g in _groups(mod) for m in g if m.op == "nn.conv2d"]
    if Target("llvm").vector_lanes("float32") < DEPTHWISE_LANES:     # an AVX2 host: the last conv alone
        assert len(plain) == 11, [m.attrs for m in plain]
        return
    assert sorted((m.attrs["groups"], m.args[0].type.shape[1]) for m in plain) == [(1, 116), (116, 116)]


def test_depthwise_rows_of_two_vectors_stay_nchw():
    """Rows of two vectors or more (a 256-pixel image's first stage: 32 wide) vectorize in
    NCHW: the chain is trimmed as before, every conv NCHW but the last (a ReduceMean reads it)."""
    model = models.shufflenet_v2(size=256, widths=(116,), repeats=(1,))
    mod = _run(model, (1, 3, 256, 256), "llvm")
    convs = [m for g in _groups(mod) for m in g if m.op in ("nn.conv2d", "nn.conv2d_blocked")]
    assert [m.args[1].type.shape[0] for m in convs if m.op == "nn.conv2d_blocked"] == [1024], \
        [m.op for m in convs]


def test_shufflenet_with_a_symbolic_batch():
    """The batch symbolic, as an exporter's dynamic axes write it: one build, right at
    batches 1 and 3."""
    model = models.shufflenet_v2(size=32, widths=(116, 232), repeats=(2, 1))
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "batch"
    for v in model.graph.output:
        v.type.tensor_type.ClearField("shape")
    mod = G.optimize(G.from_onnx(model), target="llvm")
    exe = G.build(mod, target="llvm")
    for batch in (1, 3):
        x = np.random.default_rng(batch).standard_normal((batch, 3, 32, 32)).astype(np.float32)
        ref = models.onnxruntime_run(model, {"input": x})[0]
        out = exe.run(x)[0]
        assert out.shape == ref.shape
        assert float(np.abs(out - ref).max()) <= 1e-4 * float(np.abs(ref).max())
    if Target("llvm").vector_lanes("float32") >= DEPTHWISE_LANES:
        # of 15: all but the second stage's first unit's depthwise conv and its 1x1
        assert sum(m.op == "nn.conv2d_blocked" for g in _groups(mod) for m in g) == 13
