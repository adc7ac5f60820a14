"""Chains of convolutions kept channel-blocked (NCHW[x]c) between layers
(passes/layout.py, ir/ops_layout.py, strategy/cpu/conv_blocked.py): networks against
onnxruntime, the transforms only at the chains' ends, and the blocked operators' numpy
references."""
import numpy as np
import pytest

import tdsl
import tdsl.graph as G
from tdsl.graph import models
from tdsl.graph.ir import Function
from tdsl.graph.ir.ops_layout import conv_blocked_ref, from_blocked_ref, to_blocked_ref
from tdsl.graph.ir.ops_nn import conv_ref
from tdsl.graph.strategy.cpu import conv_blocked

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")


def _ops(mod):
    return [m.op for n in mod.main.nodes() if isinstance(n.op, Function) for m in n.op.nodes()]


def _check(model, shape, target="llvm", seed=1):
    x = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    mod = G.optimize(G.from_onnx(model), target=target)
    out = G.build(mod, target=target).run(x)[0]
    ref = models.onnxruntime_run(model, {model.graph.input[0].name: x})[0]
    assert out.shape == ref.shape
    assert float(np.abs(out - ref).max()) <= 1e-4 * float(np.abs(ref).max())
    return _ops(mod)


def _mobile(c_mid, size, se=False, k=3, dil=1, stride=2, cout=None):
    """stem -> 1x1 expand -> depthwise (k, dilation, stride) [-> squeeze-excite] -> 1x1
    project [+ residual] -> global pool: one chain from the stem to the pool."""
    b = models._B(3)
    x = b.conv_bn("input", 3, 24, 3, stride=2, act="relu6")
    y = b.conv_bn(x, 24, c_mid, 1, act="relu6")
    y = b.conv_bn(y, c_mid, c_mid, k, stride, groups=c_mid, act="relu", dilation=dil)
    if se:
        s = b.node("GlobalAveragePool", [y])
        s = b.node("Conv", [s, b.weight((8, c_mid, 1, 1), c_mid)])
        s = b.node("Relu", [s])
        s = b.node("Conv", [s, b.weight((c_mid, 8, 1, 1), 8)])
        s = b.node("HardSigmoid", [s], alpha=1 / 6, beta=0.5)
        y = b.node("Mul", [y, s])
    cout = cout or 24
    y = b.conv_bn(y, c_mid, cout, 1, act=None)
    if stride == 1 and cout == 24:
        y = b.node("Add", [x, y])
    y = b.node("GlobalAveragePool", [y])
    return b.model([("input", [1, 3, size, size])], [y], "mobile")


@pytest.mark.parametrize("c_mid,size,se,k,dil,stride,cout", [
    (96, 32, False, 3, 1, 2, None),
    (72, 30, True, 3, 1, 1, None),       # channels not a whole number of vectors, residual
    (64, 28, True, 5, 1, 2, 40),         # a 5x5 stride-2 depthwise, gates of whole vectors
    (40, 26, False, 3, 2, 1, 20),        # dilated depthwise
    (48, 14, True, 5, 2, 1, 24),
    (80, 112, True, 5, 1, 2, 40),        # a 28-wide row: a tile of one row (tiling.depthwise_tile)
])
def test_mobile_chain_is_blocked_end_to_end(c_mid, size, se, k, dil, stride, cout):
    ops = _check(_mobile(c_mid, size, se, k, dil, stride, cout), (1, 3, size, size))
    assert ops.count("nn.conv2d_blocked") == 4, ops
    assert ops.count("nn.conv2d") == (2 if se else 0), ops      # the gate's mat-vecs
    # the stem reads the NCHW input itself; the pool's mean reads the blocked image: no
    # transform of an image anywhere in the chain
    from tdsl.target import Target
    bn = Target("llvm").vector_lanes("float32")      # 16 with AVX-512, 8 with AVX2
    # the gate's squeeze and excite relaid out by a view where C is whole vectors
    gate = 1 if se and c_mid % bn else 0
    assert ops.count("layout.to_blocked") == gate, ops
    assert ops.count("layout.from_blocked") == gate + (1 if (cout or 24) % bn else 0), ops


def test_resnet_chains_match_onnxruntime():
    """Residual adds of two blocked tensors, strided 1x1 shortcuts, and the max pool
    between the stem and the first residual block pooling the blocked image (a 3-D pool
    whose last window is one element), so the stem is in the chain too."""
    ops = _check(models.resnet18(1, 64, num_classes=10, width=16), (1, 3, 64, 64))
    assert ops.count("nn.conv2d_blocked") == 20 and "nn.conv2d" not in ops, ops
    assert ops.count("nn.max_pool3d") == 1 and "nn.max_pool2d" not in ops, ops
    assert "layout.to_blocked" not in ops, ops


def test_mobilenetv2_blocks_for_avx2():
    """Blocked by 8 channels for an AVX2 target (run on this host)."""
    model = models.mobilenetv2_blocks(1, 56)
    mod = G.optimize(G.from_onnx(model), target="llvm -mcpu=haswell")
    assert {n.attrs["bn"] for n in mod.main.nodes() if isinstance(n.op, Function)
            for n in n.op.nodes() if n.op == "nn.conv2d_blocked"} == {8}
    _check(model, (1, 3, 56, 56), target="llvm -mcpu=haswell")


def test_a_conv_alone_and_no_target_stay_nchw():
    b = models._B(0)
    y = b.conv_bn("input", 8, 32, 3)
    y = b.node("MaxPool", [y], kernel_shape=[2, 2], strides=[2, 2])
    model = b.model([("input", [1, 8, 20, 20])], [y], "alone")
    assert "nn.conv2d_blocked" not in _check(model, (1, 8, 20, 20))
    model = models.mobilenetv2_blocks(1, 56)
    assert "nn.conv2d_blocked" not in _ops(G.optimize(G.from_onnx(model)))


@pytest.mark.parametrize("target,blocked", [("llvm", True), ("llvm -mcpu=haswell", True),
                                            ("c", False)])
def test_build_makes_a_module_optimized_without_a_target_for_its_target(target, blocked):
    """`optimize(mod)` knows no target: `build(mod, target)` then blocks the chains as
    `optimize(mod, target=...)` would have (the same kernels), and keeps NCHW for
    targets without that choice; the outputs match onnxruntime either way."""
    model = models.mobilenetv2_blocks(1, 28)
    neutral = G.optimize(G.from_onnx(model))
    assert "nn.conv2d_blocked" not in _ops(neutral)
    exe = G.build(neutral, target=target)
    assert ("nn.conv2d_blocked" in _ops(exe.mod)) == blocked
    if blocked:
        made = G.optimize(G.from_onnx(model), target=target)
        assert _ops(exe.mod) == _ops(made)
    x = np.random.default_rng(3).standard_normal((1, 3, 28, 28)).astype(np.float32)
    ref = models.onnxruntime_run(model, {model.graph.input[0].name: x})[0]
    out = exe.run(x)[0]
    assert float(np.abs(out - ref).max()) <= 1e-4 * float(np.abs(ref).max())


def test_convs_that_share_an_input_are_not_a_chain():
    """Fire modules whose concatenation no conv reads: two expand convs read the squeeze's
    output and only the network's output reads theirs, so they are a tail and stay in
    NCHW, and so does the squeeze before them (fed by a pool, or by a concatenation of
    8-channel images, not whole 16-lane vectors; for 8-lane AVX2 they are, and that one
    reads the stem's copy of the input)."""
    b = models._B(1)
    x = b.node("Concat", ["input", "input"], axis=1)
    x = b.node("MaxPool", [x], kernel_shape=[1, 1])
    s = b.conv_bn(x, 16, 8, 1)
    x = b.node("Concat", [b.conv_bn(s, 8, 8, 1), b.conv_bn(s, 8, 8, 3)], axis=1)
    s = b.conv_bn(x, 16, 8, 1)
    e1 = b.conv_bn(s, 8, 16, 1)
    e3 = b.conv_bn(s, 8, 16, 3)
    y = b.node("Concat", [e1, e3], axis=1)
    model = b.model([("input", [1, 8, 13, 13])], [y], "fire")
    ops = _check(model, (1, 8, 13, 13))
    assert "nn.conv2d_blocked" not in ops and ops.count("nn.conv2d") == 6, ops


def _fires(channels, pool_input=False):
    """A stem and two fire modules (squeeze 1x1, expand 1x1 and 3x3, concatenated), then a
    1x1 conv and a global pool; `pool_input`: the first concatenation also takes the
    stem's max-pooled output, as a DenseNet block takes its input."""
    e = channels
    b = models._B(2)
    x, c = b.conv_bn("input", 3, 2 * e, 3, stride=2), 2 * e
    for k in range(2):
        s = b.conv_bn(x, c, e // 2, 1)
        parts = [b.conv_bn(s, e // 2, e, 1), b.conv_bn(s, e // 2, e, 3)]
        if pool_input and k == 0:
            parts.append(b.node("MaxPool", [x], kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1]))
        x, c = b.node("Concat", parts, axis=1), 2 * e + (c if pool_input and k == 0 else 0)
    y = b.conv_bn(x, c, e, 1)
    y = b.node("GlobalAveragePool", [y])
    return b.model([("input", [1, 3, 30, 30])], [y], "fires")


def test_fire_modules_concatenate_blocked_images():
    """Concatenations along the channels of conv outputs whose channels are whole vectors
    (squeezenet's fire modules): the blocked images concatenate along their block axis and
    the next squeeze conv reads the result, so the whole network is one chain from the
    stem to the pool: no relayout of an image anywhere."""
    ops = _check(_fires(32), (1, 3, 30, 30))
    assert ops.count("nn.conv2d_blocked") == 8 and "nn.conv2d" not in ops, ops
    assert "layout.to_blocked" not in ops and "layout.from_blocked" not in ops, ops
    assert ops.count("concatenate") == 2, ops


def test_concatenations_of_other_images_stay_nchw():
    """A concatenation that takes an image no conv made (DenseNet's block input, here a
    pooled image) stays in NCHW, and so do the convs around it: the stem, the first fire
    and the squeeze conv reading it. The second fire's expand convs and the last conv are
    a chain again."""
    ops = _check(_fires(32, pool_input=True), (1, 3, 30, 30))
    assert ops.count("nn.conv2d") == 5 and ops.count("nn.conv2d_blocked") == 3, ops
    assert ops.index("concatenate") < ops.index("nn.conv2d_blocked"), ops


@pytest.mark.parametrize("target", ["llvm", "llvm -mcpu=haswell"])
@pytest.mark.parametrize("size,cmid", [(64, 32), (30, 28)])
def test_a_plain_reader_of_a_chain_unblocks_it_in_a_kernel_of_its_own(target, size, cmid):
    """regnet's pattern: the stem's image is read by 1x1 convs, which chain with the stem,
    and by a grouped conv, which runs in NCHW; so the blocked image is unpacked by a kernel
    of its own (layout.from_blocked: square tiles transposed in registers, partial channel
    blocks and ragged rows too)."""
    b = models._B(5)
    x = b.conv_bn("input", 3, cmid, 3, stride=2)
    y = b.conv_bn(b.conv_bn(x, cmid, cmid, 1), cmid, cmid, 1)
    g = b.conv_bn(x, cmid, cmid, 3, groups=4)
    out = b.node("Add", [b.node("GlobalAveragePool", [y]), b.node("GlobalAveragePool", [g])])
    model = b.model([("input", [1, 3, size, size])], [out], "unblock")
    ops = _check(model, (1, 3, size, size), target=target)
    assert ops.count("nn.conv2d_blocked") == 3 and ops.count("nn.conv2d") == 1, ops
    mod = G.optimize(G.from_onnx(model), target=target)
    groups = [[m.op for m in n.op.nodes()] for n in mod.main.nodes() if isinstance(n.op, Function)]
    assert ["layout.from_blocked"] in groups, groups


@pytest.mark.parametrize("pool", [
    dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1),                 # squeezenet's
    dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),            # resnet's
    dict(kernel_shape=[2, 3], strides=[1, 2], pads=[0, 1, 1, 0], dilations=[2, 1]),
])
def test_max_pools_in_a_chain_pool_the_blocked_image(pool):
    """A max pool between two convs pools the blocked image (a 3-D pool whose last window
    is one element): ceil mode, asymmetric padding and dilation as onnxruntime has them."""
    b = models._B(3)
    x = b.conv_bn("input", 3, 32, 3)
    x = b.node("MaxPool", [x], **pool)
    y = b.conv_bn(x, 32, 48, 3)
    y = b.node("GlobalAveragePool", [y])
    model = b.model([("input", [1, 3, 23, 23])], [y], "pooled")
    ops = _check(model, (1, 3, 23, 23))
    assert ops.count("nn.conv2d_blocked") == 2 and ops.count("nn.max_pool3d") == 1, ops
    assert "nn.max_pool2d" not in ops and "layout.from_blocked" not in ops, ops


@pytest.mark.parametrize("C,bn", [(24, 16), (32, 8), (5, 4)])
def test_blocked_references(C, bn):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, C, 5, 7)).astype(np.float32)
    xb = to_blocked_ref(x, {"bn": bn})
    assert xb.shape == (2, -(-C // bn), 5, 7, bn)
    assert np.array_equal(xb[:, 1, :, :, 0], x[:, bn]) if C > bn else True
    assert np.array_equal(from_blocked_ref(xb, {"bn": bn, "channels": C}), x)
    w = rng.standard_normal((6, C, 3, 3)).astype(np.float32)
    a = {"strides": [2, 1], "padding": [1, 0, 1, 2], "dilation": [1, 2], "groups": 1, "bn": bn}
    want = to_blocked_ref(conv_ref(x, w, a), {"bn": bn})
    np.testing.assert_allclose(conv_blocked_ref(xb, w, dict(a, in_blocked=True)), want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(conv_blocked_ref(x, w, dict(a, in_blocked=False)), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("target,batch", [("llvm", 1), ("llvm -mcpu=haswell", 1), ("llvm", 2)])
def test_conv3d_net_is_one_blocked_chain(target, batch):
    """A 3-D CNN (stem, residual 3x3x3 stages with strided 1x1x1 shortcuts, global pool):
    every conv an nn.conv3d_blocked, the only relayout the pool's tiny output, and the
    result onnxruntime's on AVX-512's 16-channel and AVX2's 8-channel blocks."""
    model = models.conv3d_net(batch=batch, frames=4, size=12)
    ops = _check(model, (batch, 3, 4, 12, 12), target=target)
    assert ops.count("nn.conv3d_blocked") == 9 and "nn.conv3d" not in ops, ops
    assert "layout.to_blocked" not in ops and "layout.from_blocked" not in ops, ops


@pytest.mark.parametrize("target,batch", [("llvm", 1), ("llvm -mcpu=haswell", 1), ("llvm", 3)])
def test_conv1d_net_is_one_blocked_chain(target, batch):
    """A 1-D CNN (a one-channel stem, a max pool, residual stages with strided 1x1
    shortcuts and a dilated conv, a depthwise conv, global pool): its pools become 2-D
    pools of the row (passes/conv_forms.row_pools_as_2d), so every conv is one
    nn.conv2d_blocked chain with no relayout but the pool's tiny output, and the result is
    onnxruntime's."""
    model = models.conv1d_net(batch=batch, length=1200)
    ops = _check(model, (batch, 1, 1200), target=target)
    assert ops.count("nn.conv2d_blocked") == 12 and "nn.conv2d" not in ops, ops
    assert "layout.to_blocked" not in ops and "layout.from_blocked" not in ops, ops


@pytest.mark.parametrize("pool,attrs", [("MaxPool", dict(kernel_shape=[3], strides=[2], pads=[1, 0])),
                                        ("MaxPool", dict(kernel_shape=[2], strides=[2], ceil_mode=1)),
                                        ("AveragePool", dict(kernel_shape=[3], strides=[1], pads=[1, 1])),
                                        ("AveragePool", dict(kernel_shape=[3], strides=[2], pads=[1, 1],
                                                             count_include_pad=1))])
def test_conv1d_pools_keep_the_chain(pool, attrs):
    """A 1-D max pool between two 1-D convs is the 2-D pool of the row on the blocked
    image; an average pool, which has no blocked form, ends the chain before it. Both
    match onnxruntime on 16- and 8-channel blocks."""
    b = models._B(6)
    x = b.conv_bn("input", 8, 24, 3, nd=1)
    x = b.conv_bn(x, 24, 24, 3, nd=1)
    x = b.node(pool, [x], **attrs)
    y = b.conv_bn(x, 24, 32, 3, stride=2, nd=1)
    y = b.conv_bn(y, 32, 32, 1, nd=1)
    model = b.model([("input", [1, 8, 37])], [b.node("GlobalAveragePool", [y])], "conv1d_pool")
    for target in ("llvm", "llvm -mcpu=haswell"):
        ops = _check(model, (1, 8, 37), target=target)
        assert ops.count("nn.conv2d_blocked") == (4 if pool == "MaxPool" else 2), ops


@pytest.mark.parametrize("cin,cout,k,stride,dil,pads,size", [
    (20, 12, 3, 1, 1, [1] * 6, (5, 9, 11)),                     # channels not whole vectors
    (16, 24, 3, 2, 1, [1, 0, 1, 1, 1, 0], (5, 9, 11)),          # strided, asymmetric padding
    (8, 16, (1, 3, 3), 1, 2, [0, 2, 2, 0, 2, 2], (5, 9, 11)),   # a (2+1)-D spatial kernel, dilated
    (12, 32, (3, 1, 1), 1, 1, [1, 0, 0, 1, 0, 0], (5, 9, 11)),  # and its temporal one
    (32, 64, 3, 1, 1, [1] * 6, (2, 7, 7)),                      # AVX2: the flattened plane per depth
    (16, 64, 3, 1, 1, [1] * 6, (8, 9, 11)),                     # tasks of planes, not rows
    (16, 24, 3, 2, 1, [2, 1, 1, 0, 1, 1], (5, 9, 11)),          # depth padding skipped, strided
    (16, 16, 3, 1, 1, [3, 1, 1, 3, 1, 1], (2, 6, 7)),           # depths whose taps are all padding
])
def test_conv3d_chain_shapes(cin, cout, k, stride, dil, pads, size):
    """Two blocked 3-D convs in a chain over kernel shapes, strides, dilations and
    paddings, the second reading the first's blocked output, match onnxruntime (host and
    AVX2)."""
    k = (k,) * 3 if isinstance(k, int) else k
    b = models._B(4)
    x = b.node("Conv", ["input", b.weight((cin, cin, 3, 3, 3), cin * 27)], pads=[1] * 6)
    x = b.node("Relu", [x])
    y = b.node("Conv", [x, b.weight((cout, cin) + k, cin * int(np.prod(k)))], kernel_shape=list(k),
               strides=[stride] * 3, dilations=[dil] * 3, pads=pads)
    y = b.node("GlobalAveragePool", [b.node("Relu", [y])])
    model = b.model([("input", [1, cin, *size])], [y], "conv3d_chain")
    for target in ("llvm", "llvm -mcpu=haswell -num-cores=2"):
        assert _check(model, (1, cin, *size), target=target).count("nn.conv3d_blocked") == 2


@pytest.mark.parametrize("kernel,strides,pads,ceil,chained", [
    ([1, 2, 2], [1, 2, 2], [0] * 6, 0, 4),                  # C3D's first pool
    ([1, 3, 3], [1, 2, 2], [0, 1, 1, 0, 1, 1], 0, 4),       # I3D's, padded
    ([1, 3, 3], [1, 2, 2], [0] * 6, 1, 4),                  # ceil mode on odd rows
    ([2, 2, 2], [2, 2, 2], [0] * 6, 0, 2),                  # pools depth too: stays plain
])
def test_conv3d_chain_through_a_planar_max_pool(kernel, strides, pads, ceil, chained):
    """A 3-D max pool over each depth slice alone keeps the convs around it one blocked
    chain (the depth slices folded into the block axis: the 2-D pool's blocked form); one
    that pools along the depth ends the chain before it. Both match onnxruntime."""
    b = models._B(5)
    x = b.conv_bn("input", 3, 16, 3, nd=3)
    x = b.conv_bn(x, 16, 16, 3, nd=3)
    x = b.node("MaxPool", [x], kernel_shape=kernel, strides=strides, pads=pads, ceil_mode=ceil)
    y = b.conv_bn(x, 16, 24, 3, nd=3)
    y = b.conv_bn(y, 24, 24, 3, nd=3)
    model = b.model([("input", [1, 3, 4, 15, 16])], [b.node("GlobalAveragePool", [y])], "c3d")
    for target in ("llvm", "llvm -mcpu=haswell"):
        ops = _check(model, (1, 3, 4, 15, 16), target=target)
        assert ops.count("nn.conv3d_blocked") == chained and "layout.to_blocked" not in ops, ops


def test_conv3d_flat_plane_is_per_depth():
    """AVX2's 7-wide rows take a (7, 1) register tile; the flattened 7x7 plane a bigger
    one. A 3-D conv's depth slices are parallel tasks beside its channel blocks, so eight
    channel blocks over two depths are enough tasks for two cores where one plane's would
    not be."""
    t = tdsl.target.Target("llvm -mcpu=haswell -num-cores=2")
    plane = conv_blocked._flat_plane(t, (7, 7), 64, 27, 4, 8, depths=2)
    assert plane is not None and plane[0] * plane[1] > 7, plane
    assert conv_blocked._flat_plane(t, (7, 7), 64, 27, 4, 8) is None


@pytest.mark.parametrize("groups,in_blocked,nd", [(1, True, 2), (1, False, 2), (12, True, 2), (1, True, 3),
                                                 (1, False, 3)])
def test_plain_definitions_match_references(groups, in_blocked, nd):
    """The layout operators' plain tensor expressions (what targets without a blocked
    strategy build) against their numpy references."""
    import tdsl
    from tdsl.graph.ir import TensorType
    from tdsl.graph.strategy import topi
    rng = np.random.default_rng(2)
    bn, C, CO = 8, 12, (12 if groups > 1 else 20)
    x = rng.standard_normal((1, C) + (5,) * (nd - 2) + (9, 7)).astype(np.float32)
    w = rng.standard_normal((CO, C // groups) + (3,) * nd).astype(np.float32)
    a = {"strides": [1] * (nd - 2) + [2, 1], "padding": [1] * (2 * nd), "dilation": [2] * (nd - 2) + [1, 2],
         "groups": groups, "bn": bn, "in_blocked": in_blocked}
    xin = to_blocked_ref(x, {"bn": bn}) if in_blocked else x
    want = conv_blocked_ref(xin, w, a)
    X = tdsl.placeholder(xin.shape, "float32", name="x")
    W = tdsl.placeholder(w.shape, "float32", name="w")
    Y = topi.TE[f"nn.conv{nd}d_blocked"]([X, W], a, TensorType(want.shape, "float32"))
    U = topi.TE["layout.from_blocked"]([Y], {"bn": bn, "channels": CO},
                                       TensorType((1, CO) + want.shape[2:-1], "float32"))
    B = topi.TE["layout.to_blocked"]([U], {"bn": bn}, TensorType(want.shape, "float32"))
    f = tdsl.build(tdsl.create_schedule(B.op), [X, W, B])
    out = np.zeros(want.shape, np.float32)
    f(xin, w, out)
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("cpu", ["znver4", "haswell"])
def test_depthwise_tile_follows_the_target(cpu):
    """The blocked depthwise tile: one row of pixels that divide it, at most half the
    target's registers: the fewest that make twice its FMA chains of accumulators, else
    the most; the integer conv's may span rows, and then takes as many accumulators
    where the rows allow."""
    from tdsl import tiling
    from tdsl.target import Target
    t = Target(f"llvm -mcpu={cpu}")
    cap = min(2 * t.fma_chains, t.vector_registers // 2)
    for h, w in [(112, 112), (56, 56), (28, 28), (14, 14), (7, 7), (13, 13)]:
        xb, rb = tiling.depthwise_tile(t, h, w)
        fits = [d for d in range(1, t.vector_registers // 2 + 1) if w % d == 0]
        enough = [d for d in fits if d >= 2 * t.fma_chains]
        assert rb == 1 and xb == (min(enough) if enough else max(fits)), (h, w, xb)
        xb, rb = tiling.depthwise_tile(t, h, w, max_rows=4)
        assert w % xb == 0 and h % rb == 0 and xb * rb <= t.vector_registers // 2
        if w % 8 == 0:
            assert xb * rb >= cap


@pytest.mark.parametrize("cin,mid,size,stride", [
    (256, 256, 14, 1),      # several rows a pass, 32 input planes of 8 channels
    (512, 256, 7, 1),       # the whole image one pass
    (256, 128, 28, 2),      # a strided 1x1 shortcut beside the bottleneck
    (264, 96, 10, 1),       # 33 planes: passes of 3
])
def test_wide_1x1_chains_accumulate_rows_in_passes_for_avx2(cin, mid, size, stride):
    """AVX2's 8-channel blocks: 1x1 convs of 32 or more input planes accumulate whole rows
    (or images) in memory a few planes a pass (conv_blocked._row_passes) and match
    onnxruntime."""
    b = models._B(2)
    x = b.conv_bn("input", cin, cin, 1, act="relu")
    y = b.conv_bn(x, cin, mid, 1, act="relu")
    y = b.conv_bn(y, mid, cin, 1, stride=stride, act=None)
    if stride == 1:
        y = b.node("Add", [x, y])
    y = b.node("GlobalAveragePool", [y])
    model = b.model([("input", [1, cin, size, size])], [y], "bottleneck")
    assert "nn.conv2d_blocked" in _check(model, (1, cin, size, size), target="llvm -mcpu=haswell")
    cio = tdsl.reduce_axis((0, -(-cin // 8)), "cio")
    xb, _ = tdsl.tiling.register_tile("llvm -mcpu=haswell", size, 8 * mid // 8, whole_rows=True,
                                      whole_vecs=True)
    chunk, rows = conv_blocked._row_passes(xb, 1, 8, cio, {"taps": 1, "in_blocked": True}, size, size)
    assert chunk and cin // 8 % chunk == 0 and size % rows == 0 and rows * size // xb >= 2


@pytest.mark.parametrize("c,size,k,stride", [
    (128, 7, 3, 1),         # 49 pixels: tiles of 6 and a peeled last pixel
    (136, 13, 3, 1),        # a prime width, 17 channel blocks
    (256, 7, 1, 1),         # a 1x1 conv whose whole image is one pass
    (128, 14, 3, 2),        # a strided conv onto a 7x7 plane
])
def test_short_rows_tile_the_flattened_plane_for_avx2(c, size, k, stride):
    """On 16 registers a 7- or 13-wide row only takes (7, 1) or (1, 4) register tiles;
    the blocked conv then tiles the flattened output plane (conv_blocked._flat_plane) and
    still matches onnxruntime. Two cores, so that the channel blocks alone make enough
    parallel tasks."""
    target = "llvm -mcpu=haswell -num-cores=2"
    b = models._B(3)
    x = b.conv_bn("input", c, c, k, act="relu")
    y = b.conv_bn(x, c, c, k, stride=stride, act="relu")
    y = b.conv_bn(y, c, c, k, act=None)
    y = b.node("GlobalAveragePool", [y])
    model = b.model([("input", [1, c, size, size])], [y], "short_rows")
    assert "nn.conv2d_blocked" in _check(model, (1, c, size, size), target=target)
    out = -(-size // stride)
    t = tdsl.target.Target(target)
    plane = conv_blocked._flat_plane(t, (out, out), -(-c // 8) * 8, k * k, -(-c // 8), 8)
    assert plane is not None and plane[0] * plane[1] > 8 and (out * out) % plane[0], plane
    # rows wider than FLAT_MAX_WIDTH keep their tiles; so do too few channel blocks
    assert conv_blocked._flat_plane(t, (28, 28), 128, 9, 16, 8) is None
    assert conv_blocked._flat_plane(t, (7, 7), 64, 9, 8, 8) is None


@pytest.mark.parametrize("cin,cout", [(512, 1000), (64, 256)])
def test_prime_rows_tile_the_flattened_plane_for_avx512(cin, cout):
    """SqueezeNet's last stage: 13-wide rows, whose only AVX-512 row tile is 13 pixels by
    one vector, 13 FMAs for 14 loads. The flattened plane's tile issues more FMAs than
    loads, even with fewer accumulators (the 1000-class classifier's 4 x 3), or with fewer
    vectors than its best, so that the channel blocks still make a task per quarter of a
    core (64 -> 256: 8 x 2, not 4 x 4). The net matches onnxruntime; 7- and 14-wide rows,
    whose row tiles are not load-bound, keep their choice."""
    target = "llvm -mcpu=znver4 -num-cores=2"
    t = tdsl.target.Target(target)
    row = tdsl.tiling.register_tile(t, 13, cout, whole_rows=True, whole_vecs=True)
    assert row[1] == 1 and row[0] * row[1] < row[0] + row[1], row
    plane = conv_blocked._flat_plane(t, (13, 13), -(-cout // 16) * 16, 1, cin // 16, 16)
    assert plane is not None and plane[0] * plane[1] >= plane[0] + plane[1], plane
    assert -(-cout // 16) // plane[1] >= tdsl.tiling.parallel_chunks(t), plane
    for size in (7, 14):
        assert conv_blocked._flat_plane(t, (size, size), 512, 1, 32, 16) is None
    b = models._B(3)
    x = b.conv_bn("input", 32, cin, 3, act="relu")
    y = b.conv_bn(x, cin, cout, 1, act="relu")
    y = b.node("GlobalAveragePool", [y])
    model = b.model([("input", [2, 32, 13, 13])], [y], "prime_rows")
    # on a host without AVX-512 (or one told it is a Haswell) the net runs as built for it
    assert "nn.conv2d_blocked" in _check(model, (2, 32, 13, 13), target=target if t.runs_here else "llvm")


def _gelu(b, x):
    """onnx's export of torch's exact GELU: x * (1 + erf(x / sqrt 2)) * 0.5."""
    d = b.node("Div", [x, b.const(np.float32(np.sqrt(2)), "sqrt2")])
    a = b.node("Add", [b.node("Erf", [d]), b.const(np.float32(1), "one")])
    return b.node("Mul", [b.node("Mul", [x, a]), b.const(np.float32(0.5), "half")])


@pytest.mark.parametrize("target", ["llvm", "llvm -mcpu=haswell"])
@pytest.mark.parametrize("cin,c,length,batch", [(80, 64, 60, 1), (12, 40, 37, 2), (16, 32, 20, "N")])
def test_whisper_stem_is_one_blocked_chain(target, cin, c, length, batch):
    """Whisper's encoder stem (a 1-D conv k3, GELU, a strided one, GELU, the transpose to
    the transformer's (N, W, C) and the positional embedding): both convs blocked, and
    the transpose reads their blocks as they are (a copy of whole vectors, the padding
    channels cut off when C is not a whole number of them) instead of a conversion to NCW
    first; the result is onnxruntime's on 16- and 8-channel blocks, a symbolic batch
    ("N", run with 2) too."""
    b = models._B(7)
    x = b.node("Conv", ["input", b.weight((c, cin, 3), cin * 3), b.const(np.full(c, 0.1, np.float32))],
               kernel_shape=[3], pads=[1, 1])
    x = b.node("Conv", [_gelu(b, x), b.weight((c, c, 3), c * 3), b.const(np.full(c, -0.1, np.float32))],
               kernel_shape=[3], pads=[1, 1], strides=[2])
    y = b.node("Transpose", [_gelu(b, x)], perm=[0, 2, 1])
    y = b.node("Add", [y, b.weight(((length + 1) // 2, c), 1)])
    model = b.model([("input", [batch, cin, length])], [y], "whisper_stem")
    ops = _check(model, (2 if batch == "N" else batch, cin, length), target=target)
    assert ops.count("nn.conv2d_blocked") == 2 and "nn.conv2d" not in ops, ops
    assert "layout.from_blocked" not in ops and "layout.to_blocked" not in ops, ops


@pytest.mark.parametrize("flatten", [True, False])
def test_conv_chain_into_channels_last(flatten):
    """A 2-D conv chain read channels-last, flattened to a sequence (a hybrid ViT's
    (N, HW, C) tokens) or as an NHWC image: one blocked chain into the transpose, matching
    onnxruntime; a transpose that moves the channels elsewhere converts to NCHW first."""
    b = models._B(8)
    x = b.conv_bn("input", 3, 24, 3, stride=2)
    x = b.conv_bn(x, 24, 32, 3)
    if flatten:
        x = b.node("Reshape", [x, b.const(np.array([1, 32, -1], np.int64), "shape")])
        outs = [b.node("Transpose", [x], perm=[0, 2, 1])]
    else:
        outs = [b.node("Transpose", [x], perm=[0, 2, 3, 1]), b.node("Transpose", [x], perm=[0, 3, 2, 1])]
    model = b.model([("input", [1, 3, 18, 22])], outs, "conv_tokens")
    mod = G.optimize(G.from_onnx(model), target="llvm")
    xs = np.random.default_rng(1).standard_normal((1, 3, 18, 22)).astype(np.float32)
    got = G.build(mod, target="llvm").run(xs)
    for o, r in zip(got, models.onnxruntime_run(model, {"input": xs})):
        np.testing.assert_allclose(o, r, rtol=1e-4, atol=1e-4 * float(np.abs(r).max()))
    ops = _ops(mod)
    assert ops.count("nn.conv2d_blocked") == 2 and "nn.conv2d" not in ops, ops
    assert ops.count("layout.from_blocked") == (0 if flatten else 1), ops
