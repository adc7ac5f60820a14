"""Kernels generic in the channel count (tdsl/graph/strategy/cpu/generic.py): DenseNet-style
layers whose BatchNorm+ReLU and 1x1 conv groups differ only in C share one kernel each, and still match
onnxruntime, at channel counts that are not whole vectors too. CI runs the suite again with
TDSL_HOST_CPU=haswell (AVX2 sizes)."""
import numpy as np
import pytest

import tdsl.graph as G
from tdsl.graph.ir import Const, Function
from tdsl.graph.strategy.cpu import generic
from tdsl.graph.strategy.cpu.conv_choice import conv_path
from tdsl.graph.strategy.groupdef import GroupDef

from test_graph_conv_fast import Net, _check, ort


def _dense_block(net, x, c0, layers, growth, bottleneck):
    """DenseNet's layers: BN+ReLU of the concatenation so far, a 1x1 conv (BN+ReLU folded
    into its epilogue), a 3x3 conv whose output joins the concatenation."""
    feats, c = [x], c0
    for _ in range(layers):
        cat = feats[0] if len(feats) == 1 else net.node("Concat", feats, axis=1)
        h = net.node("Relu", [_bn(net, cat, c)])
        h = net.node("Relu", [_bn(net, net.conv(h, c, bottleneck, bias=False), bottleneck)])
        feats.append(net.conv(h, bottleneck, growth, k=3, p=1, bias=False))
        c += growth
    return net.node("Concat", feats, axis=1)


def _bn(net, x, c):
    r = net.rng
    return net.node("BatchNormalization", [x, net.const(r.uniform(0.5, 1.5, c)), net.const(r.standard_normal(c) * 0.1),
                                           net.const(r.standard_normal(c) * 0.1), net.const(r.uniform(0.5, 1.5, c))])


def _per_channel_buffers_only(kernel):
    """A generic kernel whose attached stages bounds inference could not narrow to a
    constant size allocates them on the heap, sized by C, on every iteration."""
    src = kernel.module.get_source()
    assert "malloc" not in src and "aligned_alloc" not in src and "scratch_alloc" not in src


def _steps_by_ops(exe):
    out = {}
    for k, _, n in exe.steps:
        ops = tuple(o.op for o in n.op.nodes() if isinstance(o.op, str))
        out.setdefault(ops, []).append((k, n))
    return out


@pytest.mark.parametrize("hw, path", [(28, "1x1"), (14, "blocked")])
def test_dense_block_shares_kernels(hw, path):
    net = Net((1, 24, hw, hw), seed=hw)
    block = _dense_block(net, net.node("Relu", ["x"]), 24, layers=4, growth=12, bottleneck=32)
    mod, exe = _check(net, net.conv(net.node("Relu", [_bn(net, block, 72)]), 72, 16, bias=False))
    steps = _steps_by_ops(exe)
    bn_relu = steps[("multiply", "add", "nn.relu")]
    convs = steps[("nn.conv2d", "nn.bias_add", "nn.relu")]
    # C = 24, 36, 48, 60 and the transition's 72: five groups each, one kernel each
    assert sorted(n.args[0].type.shape[1] for _, n in bn_relu) == [24, 36, 48, 60, 72]
    assert sorted(n.args[0].type.shape[1] for _, n in convs) == [24, 36, 48, 60]
    assert len({id(k) for k, _ in bn_relu}) == 1
    assert len({id(k) for k, _ in convs}) == 1
    _per_channel_buffers_only(bn_relu[0][0])
    _per_channel_buffers_only(convs[0][0])
    g, n = convs[0][1], convs[0][1].op
    conv = next(iter(n.nodes()))
    consts = {i: a.data for i, a in enumerate(g.args) if isinstance(a, Const)}
    assert conv_path(GroupDef(n, consts, "llvm"), conv) == path


def _group(mod, ops):
    for n in mod.main.nodes():
        if isinstance(n.op, Function) and tuple(o.op for o in n.op.nodes() if isinstance(o.op, str)) == ops:
            yield n, {i: a.data for i, a in enumerate(n.args) if isinstance(a, Const)}


def test_key_names_the_size_and_keeps_the_rest():
    net = Net((1, 16, 28, 28))
    a = net.conv(net.node("Relu", ["x"]), 16, 32)
    b = net.conv(net.node("Relu", [a]), 32, 32)
    mod, _ = _check(net, net.conv(net.node("Relu", [b]), 32, 48))
    groups = list(_group(mod, ("nn.conv2d", "nn.bias_add", "nn.relu"))) + \
        list(_group(mod, ("nn.conv2d", "nn.bias_add")))
    keys = []
    for n, consts in groups:
        e = generic.find(n.op, consts, "llvm")
        assert e is not None and e.size == n.args[0].type.shape[1]
        keys.append(generic.key_text(n.op, e))
    assert "(1, C, 28, 28)" in keys[0]
    assert keys[0] == keys[1]              # 16 and 32 input channels, 32 output channels
    assert len(keys) == 3 and keys[2] != keys[0]     # the last: no relu, 48 output channels


def test_groups_that_stay_specific():
    net = Net((1, 32, 14, 14))
    dw = net.conv("x", 32, 32, k=3, p=1, groups=32)             # depthwise: its own definition
    mod, _ = _check(net, net.node("Softmax", [net.conv(dw, 32, 16)], axis=1))
    for n in mod.main.nodes():
        if not isinstance(n.op, Function):
            continue
        consts = {i: a.data for i, a in enumerate(n.args) if isinstance(a, Const)}
        ops = [o.op for o in n.op.nodes() if isinstance(o.op, str)]
        e = generic.find(n.op, consts, "llvm")
        if "softmax" in " ".join(ops) or any(o.attrs.get("groups", 1) > 1 for o in n.op.nodes() if o.op == "nn.conv2d"):
            assert e is None, ops
        assert generic.find(n.op, consts, "c") is None       # only the LLVM backend


def test_global_pools_share_a_kernel():
    # two squeeze-excite squeezes of 32 and 24 channels at 14x14
    net = Net((1, 16, 14, 14))
    a = net.node("Relu", [net.conv("x", 16, 32)])
    b = net.node("Relu", [net.conv("x", 16, 24)])
    sa = net.conv(net.node("GlobalAveragePool", [a]), 32, 8)
    sb = net.conv(net.node("GlobalAveragePool", [b]), 24, 8)
    mod, exe = _check(net, net.node("Add", [sa, sb]))
    pools = _steps_by_ops(exe)[("nn.global_avg_pool",)]
    assert sorted(n.args[0].type.shape[1] for _, n in pools) == [24, 32]
    assert len({id(k) for k, _ in pools}) == 1
    _per_channel_buffers_only(pools[0][0])


def _check_batches(net, out, batches, rtol=2e-4, dims=None):
    """Builds the graph once with its symbolic batch (`dims`: its bounds) and runs it at
    each of `batches` against onnxruntime; returns the executor."""
    model = net.model(out)
    exe = G.build(G.optimize(G.from_onnx(model, dims=dims)))
    so = ort.SessionOptions()
    so.log_severity_level = 3
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    for b in batches:
        x = net.rng.standard_normal((b,) + net.x_shape[1:]).astype(np.float32)
        got, ref = exe.run(x)[0], sess.run(None, {"x": x})[0]
        assert got.shape == ref.shape
        np.testing.assert_allclose(got, ref, rtol=rtol, atol=rtol * float(np.abs(ref).max()))
    return exe


@pytest.mark.parametrize("hw, path", [(28, "1x1"), (14, "blocked")])
def test_dense_block_with_a_symbolic_batch_shares_kernels(hw, path):
    # the same layers with the batch symbolic: a kernel generic in C and in the batch
    net = Net(("batch", 24, hw, hw), seed=hw)
    block = _dense_block(net, net.node("Relu", ["x"]), 24, layers=4, growth=12, bottleneck=32)
    exe = _check_batches(net, net.conv(net.node("Relu", [_bn(net, block, 72)]), 72, 16, bias=False), (3, 1, 2))
    steps = _steps_by_ops(exe)
    convs = steps[("nn.conv2d", "nn.bias_add", "nn.relu")]
    growth = steps[("nn.conv2d",)]          # the 3x3 convs of 32 channels and the transition
    assert sorted(n.args[0].type.shape[1] for _, n in convs) == [24, 36, 48, 60]
    assert all(not n.type.static for _, n in convs)
    assert len({id(k) for k, _ in convs}) == 1
    assert len({id(k) for k, _ in growth}) == 2
    # per group: the bn+relu of x, 4 convs 1x1, 4 concats with their bn+relu, 4 convs 3x3
    # (one kernel) and the transition; the 1x1 convs one kernel, not four
    assert exe.stats["compiled"] + exe.stats["cached"] == 15
    assert exe.stats["compiled"] <= 9
    _per_channel_buffers_only(convs[0][0])
    g, n = convs[0][1], convs[0][1].op
    consts = {i: a.data for i, a in enumerate(g.args) if isinstance(a, Const)}
    assert conv_path(GroupDef(n, consts, "llvm"), next(iter(n.nodes()))) == path


def test_global_pools_with_a_symbolic_batch_share_a_kernel():
    net = Net(("batch", 16, 14, 14))
    a = net.node("Relu", [net.conv("x", 16, 32)])
    b = net.node("Relu", [net.conv("x", 16, 24)])
    sa = net.conv(net.node("GlobalAveragePool", [a]), 32, 8)
    sb = net.conv(net.node("GlobalAveragePool", [b]), 24, 8)
    exe = _check_batches(net, net.node("Add", [sa, sb]), (2, 1, 5))
    pools = _steps_by_ops(exe)[("nn.global_avg_pool",)]
    assert sorted(n.args[0].type.shape[1] for _, n in pools) == [24, 32]
    assert len({id(k) for k, _ in pools}) == 1


def test_groups_with_other_symbolic_sizes_stay_specific():
    # an image of symbolic height: C axes are numbers, but the kernels keep their own
    # sizes (and size classes) rather than one generic in C
    net = Net(("batch", 16, "height", 14))
    a = net.node("Relu", [_bn(net, net.node("Relu", [net.conv("x", 16, 32)]), 32)])
    b = net.node("Relu", [_bn(net, net.node("Relu", [net.conv("x", 16, 24)]), 24)])
    out = net.node("Add", [net.conv(a, 32, 8), net.conv(b, 24, 8)])
    model = net.model(out)
    mod = G.optimize(G.from_onnx(model))
    groups = [(n, {i: a.data for i, a in enumerate(n.args) if isinstance(a, Const)})
              for n in mod.main.nodes() if isinstance(n.op, Function)]
    assert groups and all(generic.find(n.op, consts, "llvm") is None for n, consts in groups)
    exe = G.build(mod)
    so = ort.SessionOptions()
    so.log_severity_level = 3
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    for shape in [(2, 16, 9, 14), (1, 16, 20, 14)]:
        x = net.rng.standard_normal(shape).astype(np.float32)
        got, ref = exe.run(x)[0], sess.run(None, {"x": x})[0]
        np.testing.assert_allclose(got, ref, rtol=2e-4, atol=2e-4 * float(np.abs(ref).max()))


def test_a_generic_kernel_follows_the_batch_bounds():
    # a symbolic kernel's schedule follows its sizes' declared bounds: a build with other
    # bounds compiles its own generic kernel rather than reusing one scheduled for them
    net = Net(("batch", 24, 14, 14), seed=3)
    block = _dense_block(net, net.node("Relu", ["x"]), 24, layers=3, growth=12, bottleneck=32)
    out = net.conv(net.node("Relu", [_bn(net, block, 60)]), 60, 16, bias=False)
    kernels = []
    for high in (4, 64):
        exe = _check_batches(net, out, (3, 1), dims={"batch": (1, high)})
        convs = _steps_by_ops(exe)[("nn.conv2d", "nn.bias_add", "nn.relu")]
        assert len(convs) == 3 and len({id(k) for k, _ in convs}) == 1
        kernels.append(convs[0][0])
    assert kernels[0] is not kernels[1]
