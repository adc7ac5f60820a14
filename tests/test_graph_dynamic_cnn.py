"""CNNs with a symbolic batch (tdsl/graph/strategy/cpu/batch.py): built once, run at batch 1
and 3 against onnxruntime; every group takes the implementation the same network built
static takes (`Kernel.scheduled_by`; before, every conv and pool took topi's generic
definition with the auto-scheduler), and a concat is written in place at batch 1 only."""
import numpy as np
import pytest

import tdsl.graph as G
from tdsl.graph import models

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

RNG = np.random.default_rng(0)


class Net:
    """An onnx.helper graph under construction: x (batch, C, *S) in."""

    def __init__(self, channels, spatial):
        self.inits, self.nodes, self.k = [], [], 0
        self.x = ("x", channels, spatial)
        self.outs = []
        self.weights = {}       # inputs of static shape: {name: value}

    def const(self, a):
        self.k += 1
        name = f"c{self.k}"
        self.inits.append(numpy_helper.from_array(np.asarray(a, np.float32), name))
        return name

    def op(self, kind, *args, **attrs):
        self.k += 1
        out = f"t{self.k}"
        self.nodes.append(helper.make_node(kind, list(args), [out], **attrs))
        return out

    def conv(self, x, cin, cout, k, groups=1, relu=True, transpose=False, **attrs):
        ks = (k,) * attrs.pop("nd", 2)
        shape = (cin, cout // groups) + ks if transpose else (cout, cin // groups) + ks
        w = self.const(RNG.standard_normal(shape) / np.sqrt(cin / groups * np.prod(ks)))
        b = self.const(RNG.standard_normal(cout) * 0.1)
        y = self.op("ConvTranspose" if transpose else "Conv", x, w, b, group=groups, **attrs)
        return self.op("Relu", y) if relu else y

    def model(self, batch):
        name, c, sp = self.x
        inp = [helper.make_tensor_value_info(name, TensorProto.FLOAT, [batch, c, *sp])]
        inp += [helper.make_tensor_value_info(k, TensorProto.FLOAT, list(v.shape)) for k, v in self.weights.items()]
        outs = [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in self.outs]
        g = helper.make_graph(self.nodes, "net", inp, outs, self.inits)
        return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _cnn():
    """The stem's row conv, a blocked chain (convs, depthwise, a max pool, the blocked global
    pool), a 1x1 conv, a grouped conv, pools in NCHW, a transposed conv and a resize."""
    n = Net(3, (32, 32))
    n.outs.append(n.conv("x", 3, 8, 3, pads=[1] * 4))                # rows
    stem = n.conv("x", 3, 16, 3, pads=[1] * 4)                        # blocked, in the chain
    a = n.conv(stem, 16, 32, 3, pads=[1] * 4)
    a = n.conv(a, 32, 32, 3, groups=32, pads=[1] * 4)                  # depthwise, blocked
    a = n.op("MaxPool", a, kernel_shape=[2, 2], strides=[2, 2])
    a = n.conv(a, 32, 48, 3, pads=[1] * 4, strides=[2, 2])
    n.outs.append(n.op("GlobalAveragePool", a))                       # blocked global pool
    b = n.conv(stem, 16, 64, 1, relu=False)                           # 1x1
    b = n.conv(b, 64, 64, 3, groups=4, pads=[1] * 4)                  # grouped
    n.outs.append(n.op("AveragePool", b, kernel_shape=[2, 2], strides=[2, 2]))
    c = n.op("MaxPool", stem, kernel_shape=[3, 3], strides=[2, 2], pads=[1] * 4)
    n.outs.append(n.op("GlobalAveragePool", c))                       # NCHW global pool
    d = n.conv(stem, 16, 8, 3, transpose=True, pads=[1] * 4)
    scales = n.const([1, 1, 2, 2])
    n.outs.append(n.op("Resize", d, "", scales, mode="linear"))
    return n


def _squeeze_excite():
    """A mat-vec conv (1x1 image) after the NCHW global pool; depthwise convs with a
    column stride, of constant weights and of weights that are an input."""
    n = Net(32, (14, 14))
    g = n.op("GlobalAveragePool", "x")                                # NCHW global pool
    g = n.conv(g, 32, 64, 1)
    n.outs.append(n.conv(g, 64, 32, 1, relu=False))                   # mat-vec
    n.outs.append(n.conv("x", 32, 32, 3, groups=32, strides=[2, 2], pads=[1] * 4))
    n.weights["w"] = RNG.standard_normal((32, 1, 3, 3)).astype(np.float32)
    y = n.op("Conv", "x", "w", group=32, strides=[2, 2], pads=[1] * 4)
    n.outs.append(n.op("Relu", y))                                    # the direct depthwise conv
    return n


def _gated():
    """Efficientnet's squeeze-excite block, in the blocked chain and in NCHW; in NCHW the
    gate's multiply goes into the projecting conv (its weights scaled per image)."""
    n = Net(16, (28, 28))
    for blocked in (True, False):
        e = n.conv("x", 16, 64, 1) if blocked else "x"
        c = 64 if blocked else 16
        d = n.conv(e, c, c, 3, groups=c, pads=[1] * 4)
        g = n.op("GlobalAveragePool", d)
        g = n.conv(g, c, 8, 1)
        g = n.op("Sigmoid", n.conv(g, 8, c, 1, relu=False))
        y = n.conv(n.op("Mul", d, g), c, 24, 1, relu=False)
        n.outs.append(n.conv(y, 24, 24, 3, pads=[1] * 4) if blocked else y)
    return n


def _fire():
    """Squeezenet's fire module: two expand convs concatenated, then a conv of the concat."""
    n = Net(16, (13, 13))
    s = n.conv("x", 16, 16, 1)
    e1 = n.conv(s, 16, 32, 1)
    e3 = n.conv(s, 16, 32, 3, pads=[1] * 4)
    cat = n.op("Concat", e1, e3, axis=1)
    n.outs.append(n.op("MaxPool", cat, kernel_shape=[3, 3], strides=[2, 2]))
    return n


def _symbolic_batch(m):
    """A copy of helper-built model `m` whose input and outputs have a symbolic batch."""
    m2 = onnx.ModelProto()
    m2.CopyFrom(m)
    for v in list(m2.graph.input[:1]) + list(m2.graph.output):
        if v.type.tensor_type.HasField("shape"):
            v.type.tensor_type.shape.dim[0].dim_param = "batch"
    del m2.graph.value_info[:]
    return m2


def _check(m, batches=(1, 3), tol=2e-4, weights=None):
    """Builds `m` (symbolic batch) once and runs it at each batch against onnxruntime
    (`weights`: its other inputs); returns the executor."""
    exe = G.build(G.optimize(G.from_onnx(m)))
    shape = [d.dim_value for d in m.graph.input[0].type.tensor_type.shape.dim][1:]
    for b in batches:
        feeds = dict(weights or {})
        feeds[m.graph.input[0].name] = np.random.default_rng(b).standard_normal([b, *shape]).astype(np.float32)
        got = exe.run(**feeds)
        want = models.onnxruntime_run(m, feeds)
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert g.shape == w.shape
            np.testing.assert_allclose(g, w, rtol=tol, atol=tol * np.abs(w).max())
    return exe


def _implementations(exe):
    """{group: the implementation that scheduled its kernel} of the kernels the last call
    ran (a call at batch 1 writes concats in place: it runs no kernel for them; a kernel
    with size classes ran one of its variants, named after the class). Groups are named
    by fusion; a kernel's name is the first group's that compiled it, in this process,
    and so depends on what was built before."""
    ran = {name.split("#")[0] for name, _, _ in exe.profile(number=1)}
    return {n.op.name: v.scheduled_by for k, _, n in exe.steps
            for v in [k] + [v for _, v in k.variants] if v.name in ran}


def _same_as_static(exe, m, weights=None):
    """Every group of the symbolic build took the implementation that batch 1's static build
    takes (the auto-scheduler's rules only where it does: the blocked max pool, a 3-D
    pool, a 1-D global pool); returns their names."""
    shape = [d.dim_value for d in m.graph.input[0].type.tensor_type.shape.dim][1:]
    feeds = dict(weights or {})
    feeds[m.graph.input[0].name] = np.zeros([1, *shape], np.float32)
    static = G.build(G.optimize(G.from_onnx(m, dims={"batch": 1})))
    static.run(**feeds)
    exe.run(**feeds)
    dyn, st = _implementations(exe), _implementations(static)
    assert sorted(dyn.items()) == sorted(st.items())
    return set(dyn.values())


def test_cnn_paths_take_a_symbolic_batch():
    m = _cnn().model("batch")
    exe = _check(m)
    used = _same_as_static(exe, m)
    assert {"conv2d_rows", "conv2d_blocked", "depthwise2d_blocked", "global_pool_blocked", "conv2d_1x1",
            "conv2d_grouped", "pool2d_separable", "conv_transpose_blocked", "resize"} <= used


def test_squeeze_excite_and_strided_depthwise():
    n = _squeeze_excite()
    m = n.model("batch")
    exe = _check(m, weights=n.weights)
    used = _same_as_static(exe, m, n.weights)
    assert {"global_pool", "conv2d_matvec", "conv2d_grouped", "conv_direct"} <= used


def test_squeeze_excite_scale_into_conv_weights_per_image():
    m = _gated().model("batch")
    exe = _check(m, batches=(1, 3, 2))
    _same_as_static(exe, m)
    scaled = [k.name for k, _, n in exe.steps if [o.op for o in n.op.nodes()][:1] == ["multiply"]
              and any(o.op.startswith("nn.conv2d") for o in n.op.nodes())]
    assert scaled         # the NCHW gate: no kernel of its own writes the scaled image


def test_fire_concat_in_place_at_batch_1_only():
    m = _fire().model("batch")
    exe = _check(m, batches=(1, 3, 1))
    _same_as_static(exe, m)
    concat = {k.name for k, _, n in exe.steps if any(o.op == "concatenate" for o in n.op.nodes())}
    assert concat

    def ran(batch):
        exe.run(np.zeros((batch, 16, 13, 13), np.float32))
        return {name.split("#")[0] for name, _, _ in exe.profile(number=1)}
    assert not concat & ran(1)          # written in place by the expand convs
    assert concat <= ran(2)
    assert not concat & ran(1)


@pytest.mark.parametrize("make", [lambda: models.conv1d_net(length=2000), lambda: models.conv3d_net(size=16)],
                         ids=["conv1d", "conv3d"])
def test_helper_nets(make):
    m = _symbolic_batch(make())
    exe = _check(m)
    assert {"conv_blocked", "conv2d_blocked"} & _same_as_static(exe, m)


def test_symbolic_spatial_size_falls_back():
    """A symbolic image height is not taken by the CPU conv definitions (a symbolic width
    alone is: cpu/width.py): topi's, right."""
    n = Net(8, (16, 16))
    n.outs.append(n.conv("x", 8, 16, 3, pads=[1] * 4))
    m = n.model("batch")
    for d, name in zip(m.graph.input[0].type.tensor_type.shape.dim[2:], ("height", "width")):
        d.dim_param = name
    exe = G.build(G.optimize(G.from_onnx(m)))
    for shape in [(1, 8, 16, 16), (2, 8, 9, 11)]:
        x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
        w = models.onnxruntime_run(m, {"x": x})[0]
        np.testing.assert_allclose(exe.run(x)[0], w, rtol=2e-4, atol=2e-4 * np.abs(w).max())
    assert set(_implementations(exe).values()) == {"auto"}


def test_channel_split_is_a_view_at_batch_1_only():
    """Shufflenet's channel split: a slice of the channels is a contiguous run of the
    image at batch 1 only, where it runs no kernel."""
    n = Net(32, (8, 8))
    y = n.conv("x", 32, 32, 1)
    a, b = "sa", "sb"
    n.inits.append(numpy_helper.from_array(np.array([16, 16], np.int64), "halves"))
    n.nodes.append(helper.make_node("Split", [y, "halves"], [a, b], axis=1))
    n.outs.append(n.op("Concat", a, n.conv(b, 16, 16, 3, pads=[1] * 4), axis=1))
    m = n.model("batch")
    exe = _check(m, batches=(1, 2, 1))
    _same_as_static(exe, m)
    sliced = {k.name for k, _, n in exe.steps if [o.op for o in n.op.nodes()] == ["strided_slice"]}
    assert sliced

    def ran(batch):
        exe.run(np.zeros((batch, 32, 8, 8), np.float32))
        return {name.split("#")[0] for name, _, _ in exe.profile(number=1)}
    assert not sliced & ran(1)
    assert sliced <= ran(2)


def _symbolic_length(m, names=("batch", "signal")):
    """A copy of model `m` whose input's batch and last axis (and its outputs' shapes)
    are symbolic, as an exporter's dynamic_axes write them."""
    m2 = onnx.ModelProto()
    m2.CopyFrom(m)
    dims = m2.graph.input[0].type.tensor_type.shape.dim
    for d, name in zip((dims[0], dims[len(dims) - 1]), names):
        d.dim_param = name
    for v in m2.graph.output:
        v.type.tensor_type.ClearField("shape")
    del m2.graph.value_info[:]
    return m2


def _check_shapes(m, shapes, target="llvm", tol=2e-4):
    """Builds `m` once for `target` and runs it at each input shape against onnxruntime."""
    exe = G.build(G.optimize(G.from_onnx(m), target=target), target=target)
    name = m.graph.input[0].name
    for shape in shapes:
        x = np.random.default_rng(sum(shape)).standard_normal(shape).astype(np.float32)
        got, want = exe.run(x), models.onnxruntime_run(m, {name: x})
        for g, w in zip(got, want):
            assert g.shape == w.shape
            np.testing.assert_allclose(g, w, rtol=tol, atol=tol * np.abs(w).max())
    return exe


@pytest.mark.parametrize("target", ["llvm", "llvm -mcpu=haswell"])
def test_conv1d_net_any_signal_length(target):
    """The 1-D CNN with its batch and signal length symbolic (bench/dynamic.py): built
    once, right at lengths whose rows end in ragged tiles (odd ones, and one whose last
    row is a single pixel), at batch 1 and 2. Like a static build it is one channel-blocked
    chain from the stem to the global pool (passes/layout.py, no NCHW conv), each kernel
    taking the implementation the static build's takes (cpu/width.py)."""
    m0 = models.conv1d_net(length=1000)
    m = _symbolic_length(m0)
    exe = _check_shapes(m, [(1, 1, 1000), (2, 1, 1337), (1, 1, 4001), (2, 1, 999), (1, 1, 203), (1, 1, 64)],
                        target)
    ops = {o.op for _, _, n in exe.steps for o in n.op.nodes()}
    assert "nn.conv2d" not in ops and "nn.conv2d_blocked" in ops
    convs = {k.scheduled_by for k, _, n in exe.steps if any(o.op == "nn.conv2d_blocked" for o in n.op.nodes())}
    assert convs == {"conv2d_blocked", "depthwise2d_blocked"}
    static = G.build(G.optimize(G.from_onnx(m0), target=target), target=target)
    assert sorted(k.scheduled_by for k, _, _ in exe.steps) == sorted(k.scheduled_by for k, _, _ in static.steps)


@pytest.mark.parametrize("cin,cout,k,stride,pads,dil,groups,impl", [
    (1, 16, 11, 4, (5, 5), 1, 1, "conv2d_rows"),        # a stem: rows of the plain image
    (24, 32, 3, 2, (1, 1), 1, 1, "conv_blocked"),       # strided
    (32, 32, 3, 1, (2, 3), 2, 1, "conv_blocked"),       # dilated, asymmetric padding
    (24, 40, 1, 2, (0, 0), 1, 1, "conv_blocked"),       # strided 1x1, a ragged channel block
    (32, 32, 1, 1, (0, 0), 1, 1, "conv_blocked"),       # 1x1 (the pixel GEMM wants a static image)
    (32, 32, 5, 1, (2, 2), 1, 32, "conv2d_grouped"),    # depthwise
    (32, 32, 3, 2, (0, 1), 1, 32, "conv2d_grouped"),    # depthwise, strided, asymmetric padding
    (32, 64, 3, 1, (1, 1), 1, 4, "conv2d_grouped"),     # grouped
])
def test_conv1d_symbolic_length(cin, cout, k, stride, pads, dil, groups, impl):
    """One conv of each kind with a symbolic output length, its relu fused: right at
    lengths shorter than a vector, than a register tile, and ragged by every remainder."""
    n = Net(cin, (64,))
    n.outs.append(n.conv("x", cin, cout, k, groups=groups, nd=1, strides=[stride], pads=list(pads),
                         dilations=[dil]))
    m = _symbolic_length(n.model(1))
    lengths = [L for L in (11, 16, 37, 64, 250, 1001) if (L + sum(pads) - (k - 1) * dil - 1) // stride >= 0]
    exe = _check_shapes(m, [(1, cin, L) for L in lengths] + [(3, cin, 99)])
    assert {k.scheduled_by for k, _, _ in exe.steps} == {impl}
    if impl == "conv_blocked":
        # the row's last tile shifted inwards; a row narrower than a tile (the shortest
        # signal: one pixel) runs the "narrow" variant, a long one the kernel
        (kern, _, _), = exe.steps
        assert [v.name for _, v in kern.variants] == [kern.name + "_narrow"]
        assert kern.at({"batch": 1, "signal": max(1, (k - 1) * dil + 1 - sum(pads))}).name.endswith("_narrow")
        assert kern.at({"batch": 1, "signal": 1001}) is kern


def test_conv2d_symbolic_width():
    """A 2-D conv chain whose image width alone is symbolic (the height a number): the
    blocked conv and the depthwise conv tile the rows as a 1-D signal's; a symbolic
    height stays with topi's definitions (test_symbolic_spatial_size_falls_back)."""
    n = Net(24, (6, 16))
    a = n.conv("x", 24, 16, 3, pads=[1] * 4)
    n.outs.append(n.conv(a, 16, 16, 3, groups=16, pads=[1, 0, 1, 2], strides=[1, 2]))
    m = _symbolic_length(n.model(1), ("batch", "width"))
    exe = _check_shapes(m, [(1, 24, 6, 16), (2, 24, 6, 45), (1, 24, 6, 3)])
    assert {"conv_blocked", "conv2d_grouped"} <= {k.scheduled_by for k, _, _ in exe.steps}


def test_transposed_and_3d_conv_symbolic_last_axis():
    """A 1-D transposed conv (the blocked conv of its input spread onto the stride grid)
    and a 3-D conv, each with its last axis symbolic: the blocked conv, right."""
    n = Net(16, (32,))
    n.outs.append(n.conv("x", 16, 24, 4, nd=1, transpose=True, strides=[2], pads=[1, 1]))
    exe = _check_shapes(_symbolic_length(n.model(1)), [(1, 16, 32), (2, 16, 77), (1, 16, 1)])
    assert {k.scheduled_by for k, _, _ in exe.steps} == {"conv_transpose_blocked"}
    n = Net(16, (4, 6, 20))
    n.outs.append(n.conv("x", 16, 24, 3, nd=3, pads=[1] * 6))
    exe = _check_shapes(_symbolic_length(n.model(1)), [(1, 16, 4, 6, 20), (2, 16, 4, 6, 33)])
    assert {k.scheduled_by for k, _, _ in exe.steps} == {"conv_blocked"}


def _resize_to(sizes_of, **attrs):
    """x (batch, 4, 5, 6) resized (linear) to sizes Concat(Shape(x)[:2], `sizes_of`), as
    torch exports `F.interpolate(x, size=(h, w))`: the batch in the sizes is symbolic."""
    f = TensorProto.FLOAT
    inits = [numpy_helper.from_array(np.array([0], np.int64), "s0"),
             numpy_helper.from_array(np.array([2], np.int64), "s2"),
             numpy_helper.from_array(np.array(sizes_of, np.int64), "hw")]
    nodes = [helper.make_node("Shape", ["x"], ["shp"]),
             helper.make_node("Slice", ["shp", "s0", "s2"], ["bc"]),
             helper.make_node("Concat", ["bc", "hw"], ["sizes"], axis=0),
             helper.make_node("Resize", ["x", "", "", "sizes"], ["y"], mode="linear", **attrs)]
    g = helper.make_graph(nodes, "resize", [helper.make_tensor_value_info("x", f, ["batch", 4, 5, 6])],
                          [helper.make_tensor_value_info("y", f, None)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_resize_to_sizes_that_carry_the_symbolic_batch():
    """DeepLabV3's pooling branch: sizes read from the input's own Shape keep the batch
    symbolic; the image axes are resized, the batch kept, right at every batch."""
    _check(_resize_to([9, 13]), batches=(1, 2, 3))


def test_resize_of_a_symbolic_axis_to_a_fixed_size_is_an_error():
    m = _resize_to([9, 13])
    # the sizes' batch from a constant instead of the input's Shape: a symbolic axis resized
    nodes = m.graph.node
    nodes[2].input[0] = "fixed"
    m.graph.initializer.append(numpy_helper.from_array(np.array([2, 4], np.int64), "fixed"))
    with pytest.raises(G.GraphError, match=r"Resize.*axis 0"):
        G.from_onnx(m)


def test_dilated_conv_bands_with_a_symbolic_batch():
    """DeepLabV3's atrous convs on a 14x14 map (dilation 12: rows 2-11 read only the middle
    row of taps): split into bands of equal live taps as in a static build (the bands are
    of the image; a symbolic batch is sliced whole), right at every batch."""
    n = Net(16, (14, 14))
    n.outs.append(n.conv("x", 16, 24, 3, pads=[12] * 4, dilations=[12, 12]))
    m = n.model("batch")
    ops = G.optimize(G.from_onnx(m)).astext()
    assert "concatenate" in ops and "strided_slice" in ops
    _check(m, batches=(1, 2, 3))


def test_resize_keeping_the_aspect_ratio_over_a_symbolic_batch():
    """keep_aspect_ratio_policy over all four axes (opset 18): the batch's and channels'
    ratios are 1, so "not_larger" scales by 1 (the image kept, right at every batch), and
    "not_smaller" would scale the symbolic batch by 3: a GraphError naming the policy."""
    for policy in ("not_larger", "not_smaller"):
        m = _resize_to([10, 18], keep_aspect_ratio_policy=policy)
        m.opset_import[0].version = 18
        if policy == "not_larger":
            _check(m, batches=(1, 2))
        else:
            with pytest.raises(G.GraphError, match="not_smaller"):
                G.from_onnx(m)
