"""The backward rules of tdsl.graph.gradient, one operator at a time, against central
differences (float64, numpy meaning of every operator), and a few built with kernels."""
import numpy as np
import pytest

import tdsl
from tdsl.graph import Call, Const, Function, Module, TensorType, Var
from tdsl.graph.ir import topo_order
from tdsl.graph.ir.registry import evaluate


def run_numpy(fn, inputs):
    env = dict(zip(fn.params, inputs))
    for n in topo_order(fn.outputs):
        env[n] = evaluate(n.op, n.attrs, [a.data if isinstance(a, Const) else env[a] for a in n.args])
    return [o.data if isinstance(o, Const) else env[o] for o in fn.outputs]


def check(body, x_shape, weights, seed=0, eps=1e-6):
    """loss = sum(body(x, *weights) * R): the gradient module's gradients match central
    differences of the loss."""
    rng = np.random.default_rng(seed)
    x = Var("x", TensorType(x_shape, "float64"))
    ws = [Const(rng.standard_normal(s)) for s in weights]
    y = body(x, *ws)
    r = Const(rng.standard_normal(y.type.shape))
    loss = Call("sum", [Call("multiply", [y, r])])
    mod = Module(Function("main", [x], [loss]), {"initializers": {f"w{i}": w for i, w in enumerate(ws)}})
    gmod = tdsl.graph.gradient(mod)
    assert [p.name for p in gmod.main.params] == ["x"] + [f"w{i}" for i in range(len(ws))]
    xv = rng.standard_normal(x_shape)
    vals = [w.data.copy() for w in ws]
    loss_v, *grads = run_numpy(gmod.main, [xv] + vals)
    for k, (w, g) in enumerate(zip(vals, grads)):
        num = np.zeros_like(w)
        for i in np.ndindex(*w.shape):
            for sign in (1, -1):
                v = [a.copy() for a in vals]
                v[k][i] += sign * eps
                num[i] += sign * run_numpy(gmod.main, [xv] + v)[0] / (2 * eps)
        np.testing.assert_allclose(g, num, rtol=1e-5, atol=1e-6, err_msg=f"weight {k}")
    return gmod


def op(name, *args, **attrs):
    return Call(name, args, attrs)


def test_conv2d_strided_dilated_asymmetric_padding():
    check(lambda x, w: op("nn.conv2d", x, w, strides=[2, 3], padding=[1, 0, 2, 1], dilation=[2, 1]),
          (2, 3, 9, 10), [(4, 3, 3, 2)])


def test_conv_data_adjoint_through_two_convs():
    # the first conv's weights see the second conv's data adjoint (a transposed conv)
    check(lambda x, w1, w2: op("nn.conv1d", op("nn.conv1d", x, w1, strides=[2], padding=[1, 1]), w2,
                               strides=[3], padding=[0, 2]),
          (2, 2, 11), [(3, 2, 3), (2, 3, 2)])


def test_max_pool_overlapping_padded():
    check(lambda x, w: op("nn.max_pool2d", op("multiply", x, w), pool_size=[3, 3], strides=[2, 2],
                          padding=[1, 1, 1, 1]), (2, 2, 7, 6), [(1, 2, 1, 1)])


def test_softmaxes_and_math():
    def body(x, a, b):
        h = op("nn.softmax", op("multiply", x, a), axis=1)
        h = op("add", h, op("nn.log_softmax", op("tanh", op("add", x, b)), axis=0))
        h = op("divide", op("sigmoid", h), op("sqrt", op("add", op("exp", op("multiply", x, a)),
                                                          Const(np.float64(1)))))
        return op("maximum", op("reciprocal", op("add", op("abs", h), Const(np.float64(1)))), op("negative", b))
    check(body, (3, 5), [(3, 5), (5,)])


def test_matmul_dense_bias_relu_broadcast():
    def body(x, w, v, b):
        h = op("nn.matmul", x, w)                       # (2, 3, 4) x (4, 5)
        h = op("nn.relu", op("nn.bias_add", op("reshape", h, newshape=[6, 5]), b, axis=1))
        return op("nn.dense", h, v)
    check(body, (2, 3, 4), [(4, 5), (3, 5), (5,)])


def test_batch_norm_inference():
    def body(x, g, b, m, v):
        return op("nn.batch_norm", x, g, b, m, op("add", op("multiply", v, v), Const(np.float64(0.5))))
    check(body, (2, 3, 4), [(3,), (3,), (3,), (3,)])


def test_layout_and_reductions():
    def body(x, w):
        h = op("concatenate", x, op("transpose", w, axes=[1, 0]), axis=0)          # (7, 4)
        h = op("nn.pad", op("strided_slice", h, begin=[1, 0], end=[6, 3], strides=[1, 1]),
               pad_width=[[1, 0], [2, 1]])
        m = op("max", h, axis=[1], keepdims=True)
        s = op("mean", op("multiply", h, h), axis=[0], keepdims=False)
        g = op("nn.global_avg_pool", op("reshape", h, newshape=[1, 2, 3, 6]))
        return op("add", op("add", op("multiply", h, m), s), op("sum", g))
    check(body, (3, 4), [(4, 4)])


def test_unused_wrt_gets_zeros_and_cast_stops():
    x = Var("x", TensorType((3,), "float32"))
    w = Const(np.ones(3, "float32"))
    unused = Const(np.ones(2, "float32"))
    loss = op("sum", op("multiply", op("cast", op("cast", x, dtype="int32"), dtype="float32"), w))
    mod = Module(Function("main", [x], [loss, op("sum", unused)]),
                 {"initializers": {"w": w, "unused": unused}})
    gmod = tdsl.graph.gradient(mod, wrt=["w", "unused"])
    _, gw, gu = run_numpy(gmod.main, [np.array([1.5, -2.5, 3.0], "f"), w.data, unused.data])
    np.testing.assert_array_equal(gw, [1, -2, 3])
    np.testing.assert_array_equal(gu, [0, 0])
    assert [p.name for p in tdsl.graph.gradient(mod).main.params] == ["x", "w"]


def scaled(x, w):
    """x times a weight of x's shape: that weight's gradient is x times the adjoint that
    reaches x, so every check below covers the data adjoint too."""
    return op("multiply", x, w)


@pytest.mark.parametrize("groups,co", [(2, 4), (4, 4), (4, 8)], ids=["grouped", "depthwise", "depthwise_x2"])
def test_grouped_and_depthwise_conv(groups, co):
    check(lambda x, s, w: op("nn.conv2d", scaled(x, s), w, strides=[2, 1], padding=[1, 2, 0, 1],
                             dilation=[1, 2], groups=groups),
          (2, 4, 7, 6), [(2, 4, 7, 6), (co, 4 // groups, 3, 2)])


def test_grouped_conv1d_and_3d():
    check(lambda x, s, w: op("nn.conv1d", scaled(x, s), w, strides=[3], padding=[2, 1], groups=3),
          (2, 6, 11), [(2, 6, 11), (6, 2, 3)])
    check(lambda x, s, w: op("nn.conv3d", scaled(x, s), w, strides=[1, 2, 1], padding=[1, 0, 0, 1, 1, 0],
                             groups=2), (1, 4, 3, 5, 3), [(1, 4, 3, 5, 3), (2, 2, 2, 3, 2)])


@pytest.mark.parametrize("groups", [1, 2])
def test_conv_transpose(groups):
    check(lambda x, s, w: op("nn.conv2d_transpose", scaled(x, s), w, strides=[2, 3], padding=[1, 0, 2, 1],
                             dilation=[1, 2], output_padding=[1, 2], groups=groups),
          (2, 4, 4, 3), [(2, 4, 4, 3), (4, 3, 3, 2)])
    check(lambda x, s, w: op("nn.conv1d_transpose", scaled(x, s), w, strides=[2], padding=[0, 1],
                             output_padding=[1], groups=groups), (2, 2, 5), [(2, 2, 5), (2, 3, 3)])


@pytest.mark.parametrize("include_pad,ceil", [(False, False), (True, False), (False, True), (True, True)])
def test_avg_pool(include_pad, ceil):
    check(lambda x, s: op("nn.avg_pool2d", scaled(x, s), pool_size=[3, 2], strides=[2, 2], padding=[1, 0, 1, 1],
                          dilation=[1, 2], count_include_pad=include_pad, ceil_mode=ceil),
          (2, 2, 8, 7), [(2, 2, 8, 7)])


def test_avg_pool1d_and_global():
    check(lambda x, s: op("add", op("nn.avg_pool1d", scaled(x, s), pool_size=[3], strides=[1], padding=[1, 1]),
                          op("nn.global_avg_pool", op("multiply", x, s))), (2, 3, 5), [(2, 3, 5)])


def test_layer_norm():
    # normalized over the last two axes; gamma broadcast along the first of them
    check(lambda x, s, g, b: op("nn.layer_norm", scaled(x, s), g, b, axis=1, epsilon=1e-3),
          (2, 3, 4), [(2, 3, 4), (1, 4), (3, 4)])


@pytest.mark.parametrize("begin,end,strides", [
    ([0, 1, 0], [4, 9, 5], [1, 2, 3]),
    ([3, 8, 4], [-1, 0, 1], [-1, -3, -2]),
    ([1, 0, 4], [3, 9, -1], [2, 4, -1]),
], ids=["steps", "negative_steps", "mixed"])
def test_stepped_slices(begin, end, strides):
    check(lambda x, s: op("strided_slice", scaled(x, s), begin=begin, end=end, strides=strides),
          (4, 9, 5), [(4, 9, 5)])


def test_erf_gelu_and_activations():
    def body(x, s, a):
        h = scaled(x, s)
        gelu = op("multiply", op("multiply", h, op("add", op("erf", op("multiply", h, Const(np.float64(0.7)))),
                                                  Const(np.float64(1)))), Const(np.float64(0.5)))
        hs = op("nn.hard_sigmoid", op("multiply", h, a), alpha=0.3, beta=0.4)
        hw = op("nn.hard_swish", op("multiply", op("multiply", h, a), Const(np.float64(4))))
        cl = op("clip", op("multiply", h, a), a_min=-0.5, a_max=0.7)
        lr = op("nn.leaky_relu", op("subtract", h, a), alpha=0.1)
        return op("add", op("add", op("add", gelu, hs), op("add", hw, cl)), lr)
    check(body, (3, 8), [(3, 8), (3, 8)])


def test_power():
    def body(x, s, e):
        h = op("add", op("abs", scaled(x, s)), Const(np.float64(0.5)))
        square = op("power", h, Const(np.float64(2)))
        tensor = op("power", h, e)                              # a tensor exponent, broadcast
        ints = op("power", scaled(x, s), Const(np.array([3, 1, 2], np.int64)))
        return op("add", op("add", square, tensor), ints)
    check(body, (4, 3), [(4, 3), (3,)])


def test_floor_and_mod():
    def body(x, s, b):
        h = scaled(x, s)
        return op("add", op("floor_mod", h, op("add", op("abs", b), Const(np.float64(0.5)))),
                  op("add", op("trunc_mod", h, Const(np.float64(0.3))), op("floor", h)))
    check(body, (3, 4), [(3, 4), (4,)])


def test_take_embedding_lookup_scatter_adds():
    # repeated ids (the gather's adjoint accumulates), a negative one, a 2-D index tensor
    ids = Const(np.array([[1, 4, 1], [0, -1, 1]], np.int64))
    check(lambda x, table: op("multiply", op("take", table, ids, axis=0), x), (2, 3, 3), [(5, 3)])
    check(lambda x, w: op("take", scaled(x, w), Const(np.array([2, 0, 2, 2], np.int32)), axis=1),
          (2, 3, 2), [(2, 3, 2)])


def test_gather_elements():
    idx = Const(np.array([[2, 0], [1, 1], [-1, 0]], np.int64))          # (3, 2): narrower off axis 0
    check(lambda x, s: op("gather_elements", scaled(x, s), idx, axis=0), (3, 3), [(3, 3)])
    check(lambda x, s: op("gather_elements", scaled(x, s), idx, axis=1), (4, 3), [(4, 3)])


@pytest.mark.parametrize("mode", ["edge", "reflect", "wrap", "constant"])
def test_pad_modes(mode):
    check(lambda x, s: op("nn.pad", scaled(x, s), pad_width=[[0, 0], [2, 1], [1, 3]], mode=mode,
                          pad_value=0.5), (2, 4, 5), [(2, 4, 5)])


def test_pad_negative_widths_crop():
    check(lambda x, s: op("nn.pad", scaled(x, s), pad_width=[[-1, 2], [1, -2]]), (4, 5), [(4, 5)])


def test_prod_with_zeros():
    # rows with no zero, one zero and two zeros: the one-zero row's zero gets the product
    # of the others, every element of the two-zero row gets 0
    x = Var("x", TensorType((3, 4), "float64"))
    w = Const(np.array([[1.5, -2.0, 0.5, 3.0], [2.0, 0.0, -1.5, 0.5], [0.0, 2.0, 0.0, 1.0]]))
    loss = op("sum", op("multiply", op("prod", op("multiply", x, w), axis=[1]), Const(np.array([1.0, 2.0, 3.0]))))
    mod = Module(Function("main", [x], [loss]), {"initializers": {"w": w}})
    xv = np.array([[1.0, 2.0, 3.0, 0.5], [1.0, 1.5, 2.0, -1.0], [0.5, 1.0, 2.0, 3.0]])
    _, g = run_numpy(tdsl.graph.gradient(mod).main, [xv, w.data])
    v = xv * w.data
    want = np.zeros_like(v)
    for i, j in np.ndindex(*v.shape):
        want[i, j] = np.prod(np.delete(v[i], j)) * xv[i, j] * [1.0, 2.0, 3.0][i]
    np.testing.assert_allclose(g, want, rtol=1e-12)
    assert np.count_nonzero(g[1]) == 1 and not g[2].any()
    check(lambda x, s: op("prod", scaled(x, s), axis=[0, 2], keepdims=True), (2, 3, 2), [(2, 3, 2)])


@pytest.mark.parametrize("a_shape,b_shape", [((2, 1, 3, 4), (5, 4, 6)), ((2, 3, 4), (4, 5)),
                                             ((3, 4), (2, 4, 5)), ((1, 3, 4), (2, 4, 5))],
                         ids=["both", "weights_2d", "data_2d", "size_one_batch"])
def test_matmul_batch_broadcasting(a_shape, b_shape):
    check(lambda x, s, b: op("nn.matmul", scaled(x, s), b), a_shape, [a_shape, b_shape])


def test_reductions_running_sums_and_masks():
    def body(x, s):
        h = scaled(x, s)
        r = op("add", op("min", h, axis=[0], keepdims=True), op("mean", h, axis=[0, 1], keepdims=True))
        c = op("cumsum", h, axis=1, exclusive=True)
        c = op("add", c, op("cumsum", h, axis=0, reverse=True))
        return op("add", op("add", r, c), op("trilu", h, upper=False, k=1))
    check(body, (3, 4), [(3, 4)])


def test_interp_linear_resize():
    # the two taps of a linear resize 4 -> 7 along axis 1, weights trained too
    idx = Const(np.array([[0, 0, 1, 1, 2, 2, 3], [0, 1, 1, 2, 2, 3, 3]], np.int64))
    check(lambda x, s, w: op("interp", scaled(x, s), idx, w, axis=1), (2, 4, 3), [(2, 4, 3), (2, 7)])


def test_quantized_operator_is_named():
    x = Var("x", TensorType((4,), "int8"))
    scale = Const(np.float32(0.5))
    loss = op("sum", op("qnn.dequantize", x, scale, Const(np.int8(0))))
    with pytest.raises(tdsl.GraphError, match="'qnn.dequantize'"):
        tdsl.graph.gradient(Module(Function("main", [x], [loss]), {"initializers": {"scale": scale}}))


def test_second_order_is_named():
    # the backward-only operators have no rules themselves: no gradient of a gradient
    x = Var("x", TensorType((1, 1, 4, 4), "float64"))
    w = Const(np.ones((1, 1, 4, 4)))
    loss = op("sum", op("nn.max_pool2d", op("multiply", x, w), pool_size=[2, 2], strides=[2, 2]))
    gmod = tdsl.graph.gradient(Module(Function("main", [x], [loss]), {"initializers": {"w": w}}))
    loss2 = op("sum", gmod.main.outputs[1])
    with pytest.raises(tdsl.GraphError, match="'nn.max_pool_grad'"):
        tdsl.graph.gradient(Module(Function("main", list(gmod.main.params), [loss2])), wrt=None)


@pytest.mark.parametrize("target", ["llvm", "c"])
def test_conv_and_pool_kernels_match_numpy(target):
    rng = np.random.default_rng(3)
    x = Var("x", TensorType((2, 3, 9, 10), "float32"))
    w = Const(rng.standard_normal((4, 3, 3, 2)).astype("f"))
    y = op("nn.conv2d", x, w, strides=[2, 3], padding=[1, 0, 2, 1], dilation=[2, 1])
    y = op("nn.max_pool2d", y, pool_size=[2, 2], strides=[1, 1], padding=[1, 0, 0, 1])
    r = Const(rng.standard_normal(y.type.shape).astype("f"))
    mod = Module(Function("main", [x], [op("sum", op("multiply", y, r))]), {"initializers": {"w": w}})
    gmod = tdsl.graph.gradient(mod)
    xv = rng.standard_normal((2, 3, 9, 10)).astype("f")
    want = run_numpy(gmod.main, [xv, w.data])
    got = tdsl.graph.build(tdsl.graph.optimize(gmod), target=target).run(x=xv, w=w.data)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)


def _new_rules_module(rng):
    """A module through the rules whose backward operators have their own kernels (the
    scatter-adds, the average pool's) and those built from other operators."""
    x = Var("x", TensorType((2, 4, 9, 8), "float32"))
    ws = {"s": rng.standard_normal((2, 4, 9, 8)), "dw": rng.standard_normal((4, 1, 3, 3)),
          "ct": rng.standard_normal((4, 2, 2, 2)), "ln": rng.standard_normal((5,)),
          "emb": rng.standard_normal((6, 5)), "iw": rng.standard_normal((2, 5))}
    ws = {k: Const(v.astype("float32")) for k, v in ws.items()}
    h = op("nn.conv2d", op("multiply", x, ws["s"]), ws["dw"], padding=[1, 1, 1, 1], strides=[2, 1], groups=4)
    h = op("nn.conv2d_transpose", h, ws["ct"], strides=[2, 2], groups=2)             # (2, 4, 10, 16)
    h = op("nn.avg_pool2d", h, pool_size=[3, 3], strides=[2, 3], padding=[1, 1, 1, 1], ceil_mode=True)
    h = op("strided_slice", h, begin=[0, 3, 0, 5], end=[2, -1, 5, 0], strides=[1, -2, 1, -1])
    h = op("nn.pad", h, pad_width=[[0, 0], [0, 0], [1, 0], [0, 2]], mode="reflect")  # (2, 2, 6, 7)
    h = op("reshape", h, newshape=[2, 12, 7])
    h = op("nn.layer_norm", op("strided_slice", h, begin=[0, 0, 1], end=[2, 12, 6], strides=[1, 1, 1]),
           ws["ln"], ws["ln"], axis=2)                                                  # (2, 12, 5)
    ids = Const(np.array([[1, 4, 1, 0], [5, 1, -1, 2]], np.int64))
    h = op("add", op("strided_slice", h, begin=[0, 0, 0], end=[2, 4, 5], strides=[1, 1, 1]),
           op("take", ws["emb"], ids, axis=0))                                          # (2, 4, 5)
    h = op("gather_elements", h, Const(np.array([[[3, 0, 1, 1, 2]], [[0, 0, 2, 3, 1]]], np.int64)), axis=1)
    idx = Const(np.array([[0, 0, 1, 2, 3], [1, 1, 2, 3, 4]], np.int64))
    h = op("interp", h, idx, ws["iw"], axis=2)                                          # (2, 1, 5)
    h = op("erf", op("cumsum", h, axis=2, reverse=True))
    r = Const(rng.standard_normal(h.type.shape).astype("f"))
    loss = op("sum", op("multiply", h, r))
    return Module(Function("main", [x], [loss]), {"initializers": ws}), ws


@pytest.mark.parametrize("target", ["llvm", "c"])
def test_new_rule_kernels_match_numpy(target):
    rng = np.random.default_rng(5)
    mod, ws = _new_rules_module(rng)
    gmod = tdsl.graph.gradient(mod)
    xv = rng.standard_normal((2, 4, 9, 8)).astype("f")
    vals = {k: w.data for k, w in ws.items()}
    want = run_numpy(gmod.main, [xv] + list(vals.values()))
    got = tdsl.graph.build(tdsl.graph.optimize(gmod), target=target).run(x=xv, **vals)
    for name, a, b in zip(["loss"] + list(ws), got, want):
        assert np.abs(b).max() > 0, name
        np.testing.assert_allclose(a, b, rtol=2e-4, atol=2e-4 * np.abs(b).max(), err_msg=name)


# the gathers' adjoints as kernels: scatter-adds on update definitions
# (strategy/topi_scatter.py), against numpy's np.add.at


def _scatter_kernel(op, g, idx, target, **attrs):
    gv = Var("g", TensorType(g.shape, str(g.dtype)))
    iv = Var("i", TensorType(idx.shape, str(idx.dtype)))
    exe = tdsl.graph.build(Module(Function("main", [gv, iv], [Call(op, [gv, iv], attrs)])), target=target)
    return exe


@pytest.mark.parametrize("target", ["llvm", "c"])
def test_take_grad_kernel_is_np_add_at(target):
    rng = np.random.default_rng(3)
    # an embedding's adjoint: 2-D ids with repeats and negative ones
    ids = rng.integers(-50, 50, (4, 33)).astype(np.int64)
    ids[:, :8] = 7
    g = rng.standard_normal((4, 33, 40)).astype(np.float32)
    try:
        exe = _scatter_kernel("take_grad", g, ids, target, axis=0, size=50)
    except tdsl.BuildError as e:
        pytest.skip(f"target {target} not available here: {str(e)[:120]}")
    ref = np.zeros((50, 40), np.float32)
    np.add.at(ref, ids % 50, g)
    np.testing.assert_allclose(exe.run(g, ids)[0], ref, rtol=1e-5, atol=1e-5)
    ids[2, 5] = 50
    with pytest.raises(tdsl.BoundsError, match="take_grad"):
        exe.run(g, ids)
    # along a middle axis: the leading dimension is a pure variable too
    ids = np.array([2, 0, 2, -1], np.int32)
    g = rng.standard_normal((3, 4, 5)).astype(np.float32)
    exe = _scatter_kernel("take_grad", g, ids, target, axis=1, size=3)
    ref = np.zeros((3, 3, 5), np.float32)
    np.add.at(ref, (slice(None), ids % 3), g)
    np.testing.assert_allclose(exe.run(g, ids)[0], ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("target", ["llvm", "c"])
@pytest.mark.parametrize("axis", [0, 1])
def test_gather_elements_grad_kernel_is_np_add_at(target, axis):
    rng = np.random.default_rng(4)
    shape = (6, 7)
    ids = rng.integers(-shape[axis], shape[axis], (5, 4)).astype(np.int64)   # narrower than the data
    g = rng.standard_normal(ids.shape).astype(np.float32)
    try:
        exe = _scatter_kernel("gather_elements_grad", g, ids, target, axis=axis, shape=list(shape))
    except tdsl.BuildError as e:
        pytest.skip(f"target {target} not available here: {str(e)[:120]}")
    ref = np.zeros(shape, np.float32)
    m = np.indices(ids.shape)
    at = tuple(ids % shape[axis] if d == axis else m[d] for d in range(2))
    np.add.at(ref, at, g)
    np.testing.assert_allclose(exe.run(g, ids)[0], ref, rtol=1e-5, atol=1e-5)
