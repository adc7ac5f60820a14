"""The CNN strategies of tdsl.graph against onnxruntime: 1x1 convs at odd sizes and strides
with epilogues (tdsl/graph/strategy/cpu/conv1x1.py), stem convs with few input channels
(conv_spatial.py), squeeze-excite blocks and global average pool (squeeze.py), the fusion
of elementwise diamonds (SiLU), fire-module concats. Each case also checks which strategy
the group took, so a silent fallback to the generic path fails here. CI runs the suite
again with TDSL_HOST_CPU=haswell (AVX2 sizes)."""
import numpy as np
import pytest

import tdsl.graph as G
from tdsl.graph.ir import Const, Function
from tdsl.graph.strategy.groupdef import GroupDef

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402


class Net:
    """A small ONNX graph built node by node, with random constant weights."""

    def __init__(self, x_shape, seed=0):
        self.rng = np.random.default_rng(seed)
        self.x_shape = x_shape
        self.nodes, self.inits, self.k = [], [], 0

    def name(self, base):
        self.k += 1
        return f"{base}{self.k}"

    def const(self, arr):
        n = self.name("w")
        self.inits.append(numpy_helper.from_array(np.asarray(arr, np.float32), n))
        return n

    def const_int(self, values):
        n = self.name("s")
        self.inits.append(numpy_helper.from_array(np.asarray(values, np.int64), n))
        return n

    def node(self, op, ins, **attrs):
        out = self.name(op.lower())
        self.nodes.append(helper.make_node(op, ins, [out], **attrs))
        return out

    def conv(self, x, ci, co, k=1, s=1, p=0, bias=True, groups=1):
        w = self.const(self.rng.standard_normal((co, ci // groups, k, k)) / np.sqrt(ci // groups * k * k))
        ins = [x, w] + ([self.const(self.rng.standard_normal(co) * 0.1)] if bias else [])
        return self.node("Conv", ins, kernel_shape=[k, k], strides=[s, s], pads=[p] * 4, group=groups)

    def silu(self, x):
        return self.node("Mul", [x, self.node("Sigmoid", [x])])

    def model(self, out):
        g = helper.make_graph(self.nodes, "t", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(self.x_shape))],
                              [helper.make_tensor_value_info(out, TensorProto.FLOAT, None)], self.inits)
        return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _check(net, out, rtol=2e-4):
    """Runs the graph in tdsl and onnxruntime; returns the optimized module."""
    model = net.model(out)
    mod = G.optimize(G.from_onnx(model))
    exe = G.build(mod)
    x = net.rng.standard_normal(net.x_shape).astype(np.float32)
    got = exe.run(x)[0]
    so = ort.SessionOptions()
    so.log_severity_level = 3
    ref = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    assert got.shape == ref.shape
    np.testing.assert_allclose(got, ref, rtol=rtol, atol=rtol * float(np.abs(ref).max()))
    return mod, exe


def _kinds(mod, target="llvm"):
    """The strategy (anchor kind) of every fused group, in execution order."""
    kinds = []
    for n in mod.main.nodes():
        if isinstance(n.op, Function):
            consts = {i: a.data for i, a in enumerate(n.args) if isinstance(a, Const)}
            g = GroupDef(n.op, consts, target)
            g.build()
            kinds.append(g.anchor.tensor.op.tag if g.anchor else None)
    return kinds


# ---------------------------------------------------------------------------- 1x1 convs

# which of the two 1x1 strategies takes an unaligned or strided conv depends on the target
# (test_conv1x1_choice_follows_the_target); both must be right
EITHER = ("conv1x1_spatial", "conv2d_packed")


@pytest.mark.parametrize("ci,co,hw,s,act,residual,kind", [
    (8, 48, 7, 1, "Relu", False, EITHER),                  # 49 pixels: packed to whole vectors
    (6, 40, 13, 1, None, True, EITHER),                    # 169 pixels, residual add
    (8, 64, 14, 2, "Relu", True, EITHER),                  # strided: every other row and column
    (5, 20, 25, 3, "Sigmoid", False, EITHER),              # stride 3, odd channel counts
    (16, 32, 8, 1, "Relu", False, ("conv1x1_spatial",)),   # 64 pixels: read in place
    (64, 16, 10, 1, "Relu", True, ("conv2d_packed",)),     # reducing: the blocked conv
])
def test_conv1x1_odd_sizes_and_strides(ci, co, hw, s, act, residual, kind):
    net = Net((1, ci, hw, hw))
    y = net.conv("x", ci, co, 1, s)
    if residual:
        oh = (hw - 1) // s + 1
        y = net.node("Add", [y, net.const(net.rng.standard_normal((1, co, oh, oh)))])
    if act:
        y = net.node(act, [y])
    mod, _ = _check(net, y)
    assert _kinds(mod)[0] in kind


@pytest.mark.parametrize("ci,co,hw,s,znver4,haswell", [
    # 7-wide rows: haswell's blocked tile is 7 rows x 1 vector (latency-bound), znver4's 7 x 3
    (24, 48, 7, 1, "conv2d_packed", "conv1x1_spatial"),
    (24, 64, 14, 2, "conv2d_packed", "conv1x1_spatial"),
    # a reduction of one vector or less: the pixel GEMM on znver4 (no transposing unpack),
    # while haswell's 8-lane blocked tile does 16 multiply-adds per store
    (16, 64, 55, 1, "conv1x1_spatial", "conv2d_packed"),
    (8, 48, 7, 1, "conv1x1_spatial", "conv1x1_spatial"),
    # 13-wide rows, 512 -> 1000: one accumulator on haswell's blocked tile
    (512, 1000, 13, 1, "conv2d_packed", "conv1x1_spatial"),
    # 4x expansions: at 14x14 the pixels pack to 224 of 196 (the pixel GEMM is faster
    # on znver4), at 7x7 to 64 of 49 (the blocked conv is faster)
    (64, 384, 14, 1, "conv1x1_spatial", "conv1x1_spatial"),
    (320, 1280, 7, 1, "conv2d_packed", "conv1x1_spatial"),
])
def test_conv1x1_choice_follows_the_target(ci, co, hw, s, znver4, haswell):
    net = Net((1, ci, hw, hw))
    mod = G.optimize(G.from_onnx(net.model(net.conv("x", ci, co, 1, s))))
    assert _kinds(mod, "llvm -mcpu=znver4") == [znver4]
    assert _kinds(mod, "llvm -mcpu=haswell") == [haswell]


def _task_loop(mod, target="llvm"):
    """The name of the conv's task loop (pixel tiles and channel blocks fused; parallel
    when the conv is big enough) in the module's only fused group, as lowered."""
    import tdsl
    from tdsl.graph.strategy.cpu.schedule import schedule_llvm
    (n,) = [n for n in mod.main.nodes() if isinstance(n.op, Function)]
    g = GroupDef(n.op, {i: a.data for i, a in enumerate(n.args) if isinstance(a, Const)}, target)
    out = g.build()
    s = tdsl.create_schedule(out)
    schedule_llvm(s, out, g)
    text = str(tdsl.lower(s, [g.placeholders[i] for i in sorted(g.placeholders)] + [out]))
    return next(w[1] for w in map(str.split, text.split("\n")) if w and w[0] == "for" and "i1.outer" in w[1])


@pytest.mark.parametrize("ci,co,hw,s,outer", [
    (128, 24, 64, 1, True),     # a 2 MB image read in place: tiles of pixels outside
    (96, 20, 67, 1, True),      # 4489 pixels, packed to whole tiles first
    (32, 40, 12, 1, False),     # an image well within L2: blocks of channels outside
])
def test_conv1x1_large_image_reads_each_pixel_tile_once(ci, co, hw, s, outer):
    """Past half of L2, the image is read once, a tile of pixels at a time, for every
    block of output channels (not once per block, from L3)."""
    net = Net((1, ci, hw, hw))
    mod, _ = _check(net, net.node("Relu", [net.conv("x", ci, co, 1, s)]))
    assert _kinds(mod) == ["conv1x1_spatial"]
    name = _task_loop(mod)
    # the fused loop's name lists its axes outer to inner: i1 the output channels'
    assert name.endswith("i1.outer.fused") == outer, name


def test_conv1x1_batch_norm_folds_into_the_fast_path():
    net = Net((2, 8, 11, 11))
    y = net.conv("x", 8, 40, 1, 2, bias=False)
    c = 40
    bn = net.node("BatchNormalization", [y, net.const(net.rng.uniform(0.5, 1.5, c)), net.const(net.rng.standard_normal(c)),
                                         net.const(net.rng.standard_normal(c)), net.const(net.rng.uniform(0.5, 1.5, c))])
    mod, _ = _check(net, net.node("Relu", [bn]))
    assert _kinds(mod)[0] in EITHER and len(_kinds(mod)) == 1


# ---------------------------------------------------------------------------- stems

@pytest.mark.parametrize("co,hw,k,s,p", [
    (16, 33, 3, 2, 1),      # 17 output columns: one ragged tile
    (24, 40, 7, 2, 3),      # resnet's 7x7 s2 stem
    (32, 37, 3, 2, 0),      # squeezenet's unpadded stem, 18 columns
    (8, 20, 3, 1, 1),       # stride 1
])
def test_stem_conv(co, hw, k, s, p):
    net = Net((1, 3, hw, hw))
    mod, _ = _check(net, net.node("Relu", [net.conv("x", 3, co, k, s, p)]))
    assert _kinds(mod) == ["conv_rows_spatial"]


# ---------------------------------------------------------------------------- squeeze-excite

@pytest.mark.parametrize("c,cs,hw,gate,then_conv", [
    (24, 6, 12, "Sigmoid", None),
    (40, 10, 7, "Sigmoid", 16),
    (20, 5, 1, "Sigmoid", None),      # a 1x1 image: the broadcast is no broadcast
])
def test_squeeze_excite_block(c, cs, hw, gate, then_conv):
    net = Net((1, c, hw, hw))
    g = net.node("GlobalAveragePool", ["x"])
    h = net.silu(net.conv(g, c, cs, 1))
    e = net.node(gate, [net.conv(h, cs, c, 1)])
    y = net.node("Mul", ["x", e])
    if then_conv:
        y = net.conv(y, c, then_conv, 1)
    mod, _ = _check(net, y)
    kinds = _kinds(mod)
    assert kinds[:3] == ["global_pool", "matvec", "matvec"]
    # SiLU's sigmoid and multiply joined the conv's kernel: no separate elementwise kernel
    names = [n.op.name for n in mod.main.nodes() if isinstance(n.op, Function)]
    assert not any(nm.startswith("fused_sigmoid") for nm in names), names


def test_global_avg_pool_sizes():
    for shape in [(1, 5, 13, 13), (2, 3, 7, 30), (1, 4, 1, 1)]:
        net = Net(shape)
        mod, _ = _check(net, net.node("GlobalAveragePool", ["x"]))
        assert _kinds(mod) == ["global_pool"]


def test_conv_at_one_pixel_with_ragged_channels():
    net = Net((2, 7, 1, 1))
    mod, _ = _check(net, net.node("Relu", [net.conv("x", 7, 21, 1)]))
    assert _kinds(mod) == ["matvec"]


# ---------------------------------------------------------------------------- fusion of diamonds

def test_silu_after_conv_is_one_kernel():
    net = Net((1, 8, 10, 10))
    mod, exe = _check(net, net.silu(net.conv("x", 8, 16, 3, 1, 1)))
    assert len(exe.steps) == 1


def test_diamond_closing_later_is_one_kernel():
    # conv output read by the SiLU and by an add after it: one diamond, one kernel
    net = Net((1, 4, 6, 6))
    c = net.conv("x", 4, 8, 3, 1, 1)
    y = net.node("Add", [net.node("Relu", [net.silu(c)]), c])
    mod, exe = _check(net, y)
    assert len(exe.steps) == 1


def test_diamond_with_an_outside_use_is_not_fused():
    # the conv output is also pooled: it must be stored, so the SiLU stays a kernel of its own
    net = Net((1, 4, 6, 6))
    c = net.conv("x", 4, 8, 3, 1, 1)
    p = net.node("MaxPool", [c], kernel_shape=[1, 1])
    y = net.node("Add", [net.silu(c), p])
    mod, exe = _check(net, y)
    names = [n.op.name for n in mod.main.nodes() if isinstance(n.op, Function)]
    assert names[0] == "fused_conv2d_bias_add" and len(exe.steps) >= 3, names


def test_square_is_one_kernel():
    net = Net((1, 4, 6, 6))
    c = net.conv("x", 4, 8, 1)
    mod, exe = _check(net, net.node("Mul", [c, c]))
    assert len(exe.steps) == 1


# ---------------------------------------------------------------------------- concat in place

def _fire(net, x, ci, sq, e1, e3):
    s = net.node("Relu", [net.conv(x, ci, sq, 1)])
    a = net.node("Relu", [net.conv(s, sq, e1, 1)])
    b = net.node("Relu", [net.conv(s, sq, e3, 3, 1, 1)])
    return net.node("Concat", [a, b], axis=1)


def test_fire_modules_write_their_concat_in_place():
    net = Net((1, 8, 13, 13))
    y = _fire(net, "x", 8, 4, 8, 8)
    y = net.node("MaxPool", [y], kernel_shape=[3, 3], strides=[2, 2])
    y = _fire(net, y, 16, 6, 12, 12)                  # the second concat is the graph output
    mod, exe = _check(net, y)
    assert len(exe.plan.concat_owners) == 2
    assert not any(n.op.name.startswith("fused_concatenate") for _, _, n in exe.steps)


def test_concat_not_in_place_when_batched_or_shared():
    # batch 2: a channel slice is not contiguous
    net = Net((2, 4, 6, 6))
    y = net.node("Concat", [net.conv("x", 4, 8, 1), net.conv("x", 4, 8, 3, 1, 1)], axis=1)
    _, exe = _check(net, y)
    assert not exe.plan.concat_owners
    # a part that something else reads too, and an input that is a graph input
    net = Net((1, 4, 6, 6))
    a = net.conv("x", 4, 8, 1)
    c = net.node("Concat", [a, net.conv("x", 4, 8, 3, 1, 1), "x"], axis=1)
    y = net.node("Add", [net.node("ReduceMean", [c], axes=[1], keepdims=1), net.node("ReduceMean", [a], axes=[1], keepdims=1)])
    _, exe = _check(net, y)
    assert not exe.plan.concat_owners


def test_nested_concat_and_last_axis():
    net = Net((1, 4, 6, 6))
    inner = net.node("Concat", [net.conv("x", 4, 8, 1), net.conv("x", 4, 4, 3, 1, 1)], axis=1)
    outer = net.node("Concat", [inner, net.node("Relu", [net.conv("x", 4, 4, 1)])], axis=1)
    y = net.node("Concat", [net.node("Sigmoid", [outer]), net.node("Tanh", [outer])], axis=-1)
    _, exe = _check(net, y)
    # fusion chains the two channel concats into one kernel; no buffer is both a slice of a
    # concat and a concat written in place
    assert not set(exe.plan.concat_parts) & exe.plan.concat_owners


# ---------------------------------------------------------------------------- SE scale into the conv

@pytest.mark.parametrize("c,hw,co,k,fused", [
    (24, 12, 8, 1, True),       # 1x1 projection: scaled weights, conv reads x in place
    (8, 14, 16, 3, True),       # a 3x3 conv after the scaling (padded, blocked conv)
    (3, 20, 8, 3, True),        # a stem-like conv (few input channels)
    (40, 4, 32, 1, False),      # more weights than pixels: the multiply stays a kernel
])
def test_channel_scale_moves_into_the_next_conv(c, hw, co, k, fused):
    net = Net((1, c, hw, hw))
    g = net.node("Sigmoid", [net.conv(net.node("GlobalAveragePool", ["x"]), c, c, 1)])
    y = net.conv(net.node("Mul", ["x", g]), c, co, k, 1, k // 2)
    mod, _ = _check(net, net.node("Relu", [y]))
    names = [n.op.name for n in mod.main.nodes() if isinstance(n.op, Function)]
    assert any(nm.startswith("fused_multiply_conv2d") for nm in names) == fused, names


def test_channel_scale_with_batch_two_stays_correct():
    net = Net((2, 6, 9, 9))
    g = net.node("Sigmoid", [net.node("GlobalAveragePool", ["x"])])
    mod, _ = _check(net, net.conv(net.node("Mul", [g, "x"]), 6, 4, 1))
    # the conv kept a fast path (a 6-channel reduction: the pixel GEMM on AVX-512)
    assert {"conv2d_packed", "conv1x1_spatial"} & set(_kinds(mod))


@pytest.mark.parametrize("ci,co,k", [(24, 48, 3), (40, 64, 1)])
def test_prime_width_convs(ci, co, k):
    # 13 columns: on 16 registers (AVX2) the blocked conv's row tile would hold one
    # accumulator; those convs go to the image-vectorized strategies instead
    net = Net((1, ci, 13, 13))
    mod, _ = _check(net, net.node("Relu", [net.conv("x", ci, co, k, 1, k // 2)]))
    assert _kinds(mod)[0] in ("conv2d_packed", "conv_rows_spatial", "conv1x1_spatial")


# ---------------------------------------------------------------------------- reshape sinking

def test_gelu_after_a_linear_on_nhwc_joins_the_dense_kernel():
    # convnext's pointwise MLP: MatMul on (1, H, W, C) imports as reshape -> dense -> reshape
    net = Net((1, 5, 5, 8))
    h = net.node("Add", [net.node("MatMul", ["x", net.const(net.rng.standard_normal((8, 12)))]),
                         net.const(net.rng.standard_normal(12))])
    e = net.node("Erf", [net.node("Div", [h, net.const(np.sqrt(2.0))])])
    gelu = net.node("Mul", [net.node("Mul", [h, net.node("Add", [e, net.const(1.0)])]), net.const(0.5)])
    y = net.node("MatMul", [gelu, net.const(net.rng.standard_normal((12, 8)))])
    mod, _ = _check(net, y)
    names = [n.op.name for n in mod.main.nodes() if isinstance(n.op, Function)]
    assert any("dense" in nm and "erf" in nm for nm in names), names


def test_reshape_stays_above_a_per_row_constant():
    # a constant that varies along a non-last axis does not commute with the reshape
    net = Net((1, 6, 4))
    r = net.node("Reshape", ["x", net.const_int([1, 3, 8])])
    y = net.node("Mul", [r, net.const(net.rng.standard_normal((1, 3, 1)))])
    _check(net, net.node("Sigmoid", [y]))


# ---------------------------------------------------------------------------- pools

@pytest.mark.parametrize("kind,k,s,p,ceil,hw,fast", [
    ("AveragePool", 2, 2, 0, 0, 14, True),      # densenet's transition
    ("AveragePool", 3, 2, 0, 0, 15, True),      # a row pass, then every other column
    ("AveragePool", 3, 1, 0, 0, 9, True),
    ("AveragePool", 3, 2, 1, 0, 14, False),     # padding: the generic definition's divisor
    ("AveragePool", 2, 2, 0, 1, 15, False),     # ceil mode: the last window overhangs
    ("MaxPool", 3, 2, 1, 0, 16, True),          # resnet's
    ("MaxPool", 3, 2, 0, 1, 27, True),          # squeezenet's (ceil mode)
    ("MaxPool", 2, 2, 0, 0, 12, True),
])
def test_pools(kind, k, s, p, ceil, hw, fast):
    net = Net((1, 5, hw, hw))
    y = net.node(kind, ["x"], kernel_shape=[k, k], strides=[s, s], pads=[p] * 4, ceil_mode=ceil)
    mod, _ = _check(net, net.node("Relu", [y]))
    assert (_kinds(mod)[0] == "pool_sep") == fast


def test_two_diamonds_sharing_a_sink():
    # a and c both feed the sink directly and through chains that meet in `greater`: one
    # diamond takes the shared nodes, the other stays out, and every value reaches its reader
    from tdsl.graph import Call, Module, TensorType, Var
    x = Var("x", TensorType((2, 40), "float32"))
    a = Call("nn.relu", [x])
    c = Call("tanh", [x])
    b = Call("greater", [Call("sigmoid", [a]), Call("exp", [c])])
    s = Call("where", [b, a, c])
    mod = Module(Function("main", [x], [s]))
    xv = np.random.default_rng(0).standard_normal((2, 40)).astype(np.float32)
    got = G.build(mod).run(xv)[0]
    av, cv = np.maximum(xv, 0), np.tanh(xv)
    np.testing.assert_allclose(got, np.where(1 / (1 + np.exp(-av)) > np.exp(cv), av, cv), rtol=1e-6)


# ---------------------------------------------------------------------------- dense blocks

def test_dense_block_concats_are_views_of_one_buffer():
    # DenseNet: before each layer, BN+ReLU of the concat of the block's input and every
    # feature so far. Each concat is a prefix of the last one: no concat kernel runs, the
    # convs write into slices of one buffer, and the result still matches onnxruntime
    net = Net((1, 16, 9, 9))
    x0 = net.conv("x", 16, 16, 3, 1, 1)
    feats = [x0]
    for _ in range(3):
        c = net.node("Concat", feats, axis=1)
        ch = 16 + 8 * (len(feats) - 1)
        h = net.node("Relu", [net.node("Add", [net.node("Mul", [c, net.const(net.rng.uniform(0.5, 1.5, (ch, 1, 1)))]),
                                               net.const(net.rng.standard_normal((ch, 1, 1)) * 0.1)])])
        feats.append(net.conv(h, ch, 8, 3, 1, 1))
    out = net.node("Relu", [net.node("Concat", feats, axis=1)])
    mod, exe = _check(net, out)
    plan = exe.plan
    assert len(plan.prefix_views) == 2          # the two shorter concats (the first has one input)
    assert len(plan.concat_owners) == 1
    assert not any("concatenate" in k.name for k, _, _ in exe.steps)
