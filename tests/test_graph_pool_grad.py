"""The max pool's adjoint on the CPU's covering-window gather (cpu/pool_grad.py), against
the operator's numpy meaning and torch's max_pool2d backward: ties (ReLU zeros, repeated
integers) go to each window's first maximum, padding and ceil mode drop nothing, and each
case checks that the group took that implementation."""
import numpy as np
import pytest

import tdsl.graph as G
from tdsl.graph import Call, Function, Module, TensorType, Var
from tdsl.graph.ir.registry import evaluate
from tdsl.graph.strategy.groupdef import GroupDef

torch = pytest.importorskip("torch")


def _implementations(mod):
    names = []
    for n in mod.main.nodes():
        if isinstance(n.op, Function):
            g = GroupDef(n.op, {}, "llvm")
            g.build()
            names.append(g.anchor.impl.name if g.anchor else None)
    return names


def _module(x_shape, attrs):
    from tdsl.graph.ir.ops_nn import pool_out_type
    xt = TensorType(x_shape, "float32")
    dyt = pool_out_type(xt, attrs, 2)
    x, dy = Var("x", xt), Var("dy", dyt)
    call = Call("nn.max_pool_grad", [x, dy], attrs)
    return Module(Function("main", [x, dy], [call])), dyt.shape


def _attrs(k, s, p, ceil=False):
    return dict(pool_size=list(k), strides=list(s), padding=list(p), dilation=[1, 1], ceil_mode=ceil)


@pytest.mark.parametrize("x_shape,k,s,p,ceil", [
    ((2, 3, 16, 16), (3, 3), (2, 2), (1, 1, 1, 1), False),     # ResNet's stem pool
    ((2, 4, 8, 8), (2, 2), (2, 2), (0, 0, 0, 0), False),       # the digits CNN's
    ((1, 2, 11, 7), (3, 3), (1, 1), (1, 1, 1, 1), False),      # stride 1: 9 covering windows
    ((1, 2, 11, 13), (3, 2), (3, 2), (0, 1, 2, 0), False),     # stride 3, asymmetric padding
    ((1, 2, 12, 12), (1, 1), (2, 2), (0, 0, 0, 0), False),     # windows skip positions
    ((2, 3, 10, 9), (3, 3), (2, 2), (0, 0, 0, 0), True),       # ceil mode: ragged last window
])
@pytest.mark.parametrize("data", ["normal", "relu", "ties"])
def test_max_pool_grad_gathers_covering_windows(x_shape, k, s, p, ceil, data):
    rng = np.random.default_rng(5)
    xv = rng.standard_normal(x_shape).astype(np.float32)
    if data == "relu":
        xv = np.maximum(xv, 0)
    elif data == "ties":
        xv = rng.integers(0, 3, x_shape).astype(np.float32)
    attrs = _attrs(k, s, p, ceil)
    mod, dy_shape = _module(x_shape, attrs)
    dyv = rng.standard_normal(dy_shape).astype(np.float32)
    mod = G.optimize(mod)
    assert _implementations(mod) == ["max_pool2d_grad"]
    (got,) = G.build(mod).run(x=xv, dy=dyv)
    want = evaluate("nn.max_pool_grad", attrs, [xv, dyv])
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("target", ["llvm", "llvm -mcpu=haswell"])
def test_max_pool_grad_matches_torch(target):
    rng = np.random.default_rng(6)
    xv = np.maximum(rng.standard_normal((2, 16, 28, 30)), 0).astype(np.float32)
    xt = torch.from_numpy(xv).requires_grad_(True)
    y = torch.nn.functional.max_pool2d(xt, 3, 2, 1)
    dyv = rng.standard_normal(tuple(y.shape)).astype(np.float32)
    y.backward(torch.from_numpy(dyv))
    mod, _ = _module(xv.shape, _attrs((3, 3), (2, 2), (1, 1, 1, 1)))
    (got,) = G.build(G.optimize(mod), target=target).run(x=xv, dy=dyv)
    np.testing.assert_allclose(got, xt.grad.numpy(), rtol=1e-6, atol=1e-6)


def test_dilated_max_pool_grad_keeps_the_generic_gather():
    attrs = dict(_attrs((2, 2), (1, 1), (0, 0, 0, 0)), dilation=[2, 2])
    mod, dy_shape = _module((1, 2, 7, 7), attrs)
    mod = G.optimize(mod)
    assert _implementations(mod) != ["max_pool2d_grad"]
    rng = np.random.default_rng(7)
    xv = rng.standard_normal((1, 2, 7, 7)).astype(np.float32)
    dyv = rng.standard_normal(dy_shape).astype(np.float32)
    (got,) = G.build(mod).run(x=xv, dy=dyv)
    np.testing.assert_allclose(got, evaluate("nn.max_pool_grad", attrs, [xv, dyv]), rtol=1e-6, atol=1e-6)
