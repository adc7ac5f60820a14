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


def test_grouped_conv_is_named():
    x = Var("x", TensorType((1, 4, 5, 5), "float32"))
    w = Const(np.ones((4, 1, 3, 3), "float32"))
    loss = op("sum", op("nn.conv2d", x, w, groups=4))
    with pytest.raises(tdsl.GraphError, match="nn.conv2d with groups=4"):
        tdsl.graph.gradient(Module(Function("main", [x], [loss])))


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
