"""Graph operators that only backward passes use (`graph.gradient`, graph/autodiff/): the
adjoints that no forward operator computes: the pools' (`nn.max_pool_grad`,
`nn.avg_pool_grad`; the max pool's takes the pool's input, the average pool's its shape) and the gathers'
(`take_grad`, `gather_elements_grad`: the scatter-adds that accumulate an output adjoint
into the rows its indices read, several reads of one row summed) and the convs' weights'
(`nn.conv_weight_grad`, a contraction over the batch and the output pixels per tap). Their tensor expressions
are in strategy/topi_grad.py."""
from __future__ import annotations

import numpy as np

from ...errors import GraphError
from .ops_index import window_positions
from .ops_nn import conv_infer, pool_out_type
from .registry import FLOATS, check_nargs, register
from .types import TensorType


def _pool_grad_infer(types, attrs):
    check_nargs(types, 2)
    x, dy = types
    nd = x.ndim - 2
    if nd < 1:
        raise GraphError(f"input {x} needs rank >= 3")
    if x.dtype not in FLOATS:
        raise GraphError(f"needs a floating-point input, got {x.dtype}")
    if dy != pool_out_type(x, attrs, nd):
        raise GraphError(f"output adjoint {dy} does not fit the pooling of {x}")
    return x


def _max_pool_grad_ref(x, dy, a):
    # each window's adjoint goes to its first maximum in row-major window order, as torch's
    # and onnxruntime's argmax pick it
    nd = x.ndim - 2
    k, s, p, dl = a["pool_size"], a["strides"], a["padding"], a["dilation"]
    out = np.zeros(x.shape, np.float64)
    for n, ch in np.ndindex(*x.shape[:2]):
        for oi in np.ndindex(*dy.shape[2:]):
            best, where = -np.inf, None
            for ki in np.ndindex(*k):
                pos = window_positions(oi, ki, s, p, dl)
                if all(0 <= pos[d] < x.shape[2 + d] for d in range(nd)):
                    v = x[(n, ch) + tuple(pos)]
                    if where is None or v > best:
                        best, where = v, tuple(pos)
            if where is not None:
                out[(n, ch) + where] += dy[(n, ch) + oi]
    return out.astype(x.dtype)


register("nn.max_pool_grad", "opaque", _pool_grad_infer, _max_pool_grad_ref,
         {"pool_size": [1], "strides": [1], "padding": [0, 0], "dilation": [1], "ceil_mode": False})


def _avg_pool_grad_infer(types, attrs):
    # the pool is linear: its adjoint needs the input's shape, not its values
    check_nargs(types, 1)
    shape = attrs["shape"]
    if not isinstance(shape, (list, tuple)) or not all(isinstance(v, int) and v > 0 for v in shape):
        raise GraphError(f"shape {shape!r} must be a list of positive integers")
    return _pool_grad_infer([TensorType(shape, types[0].dtype), types[0]], attrs)


def _avg_pool_grad_ref(dy, a):
    # each window's adjoint spread over the window, divided by the count the forward pool
    # divided by
    x = np.zeros(a["shape"], dy.dtype)
    nd = x.ndim - 2
    k, s, p, dl = a["pool_size"], a["strides"], a["padding"], a["dilation"]
    out = np.zeros(x.shape, np.float64)
    for oi in np.ndindex(*dy.shape[2:]):
        taps = [window_positions(oi, ki, s, p, dl) for ki in np.ndindex(*k)]
        inside = [t for t in taps if all(0 <= t[d] < x.shape[2 + d] for d in range(nd))]
        padded = [t for t in taps if all(-p[d] <= t[d] < x.shape[2 + d] + p[d + nd] for d in range(nd))]
        n = len(padded) if a["count_include_pad"] else len(inside)
        for t in inside:
            out[(slice(None), slice(None)) + tuple(t)] += dy[(slice(None), slice(None)) + oi] / max(n, 1)
    return out.astype(x.dtype)


# the adjoint of an average pool of an input of shape `shape`
register("nn.avg_pool_grad", "opaque", _avg_pool_grad_infer, _avg_pool_grad_ref,
         {"pool_size": [1], "strides": [1], "padding": [0, 0], "dilation": [1], "ceil_mode": False,
          "count_include_pad": False}, required=("shape",))


def _index_operand(idx):
    if not idx.dtype.startswith(("int", "uint")):
        raise GraphError(f"indices must be integers, got {idx.dtype}")


def _take_grad_infer(types, attrs):
    check_nargs(types, 2)
    g, idx = types
    _index_operand(idx)
    ax, k = attrs["axis"], idx.ndim
    if not 0 <= ax <= g.ndim - k or tuple(g.shape[ax:ax + k]) != tuple(idx.shape):
        raise GraphError(f"output adjoint {g} does not hold indices {idx} at axis {ax}")
    if not isinstance(attrs["size"], int) or attrs["size"] <= 0:
        raise GraphError(f"size {attrs['size']!r} must be a positive integer")
    return TensorType(g.shape[:ax] + (attrs["size"],) + g.shape[ax + k:], g.dtype)


def _take_grad_ref(g, idx, a):
    ax, n = a["axis"], a["size"]
    k = idx.ndim
    out = np.zeros(g.shape[:ax] + (n,) + g.shape[ax + k:], np.float64)
    for m in np.ndindex(*idx.shape):
        j = int(idx[m]) + (n if idx[m] < 0 else 0)
        out[(slice(None),) * ax + (j,)] += g[(slice(None),) * ax + m]
    return out.astype(g.dtype)


# the adjoint of `take(x, idx, axis)`: x's shape with `size` rows along `axis`
register("take_grad", "opaque", _take_grad_infer, _take_grad_ref, {"axis": 0}, required=("size",))


def _gather_elements_grad_infer(types, attrs):
    check_nargs(types, 2)
    g, idx = types
    _index_operand(idx)
    shape, ax = tuple(attrs["shape"]), attrs["axis"]
    if g.shape != idx.shape or len(shape) != g.ndim or not 0 <= ax < g.ndim or any(
            idx.shape[d] > shape[d] for d in range(g.ndim) if d != ax):
        raise GraphError(f"output adjoint {g} and indices {idx} do not fit data of shape {shape} "
                         f"along axis {ax}")
    return TensorType(shape, g.dtype)


def _gather_elements_grad_ref(g, idx, a):
    ax, shape = a["axis"], tuple(a["shape"])
    out = np.zeros(shape, np.float64)
    for m in np.ndindex(*idx.shape):
        j = int(idx[m]) + (shape[ax] if idx[m] < 0 else 0)
        out[m[:ax] + (j,) + m[ax + 1:]] += g[m]
    return out.astype(g.dtype)


# the adjoint of `gather_elements(x, idx, axis)` for x of shape `shape`
register("gather_elements_grad", "opaque", _gather_elements_grad_infer, _gather_elements_grad_ref,
         {"axis": 0}, required=("shape",))


def _conv_weight_grad_infer(types, attrs):
    check_nargs(types, 2)
    x, dy = types
    nd = x.ndim - 2
    k, g = attrs["kernel_size"], attrs["groups"]
    if nd < 1 or dy.ndim != x.ndim or x.dtype != dy.dtype or x.dtype not in FLOATS:
        raise GraphError(f"data {x} and output adjoint {dy} must be floating-point, of one rank >= 3")
    if not isinstance(k, (list, tuple)) or len(k) != nd or not isinstance(g, int) or g < 1 \
            or x.shape[1] % g or dy.shape[1] % g:
        raise GraphError(f"kernel_size {k} and groups {g} do not fit data {x} and adjoint {dy}")
    w = TensorType((dy.shape[1], x.shape[1] // g, *k), x.dtype)
    if conv_infer(nd)([x, w], attrs) != dy:
        raise GraphError(f"output adjoint {dy} is not the shape of the conv of {x} by weights {w.shape}")
    return w


def _conv_weight_grad_ref(x, dy, a):
    nd = x.ndim - 2
    s, p, dl, g, K = a["strides"], a["padding"], a["dilation"], a["groups"], a["kernel_size"]
    xp = np.pad(x.astype(np.float64), [(0, 0), (0, 0)] + [(p[d], p[d + nd]) for d in range(nd)])
    CO, cig = dy.shape[1], x.shape[1] // g
    cog = CO // g
    out = np.zeros((CO, cig, *K))
    red = [0] + list(range(2, nd + 2))
    for k in np.ndindex(*K):
        sl = tuple(slice(k[d] * dl[d], k[d] * dl[d] + (dy.shape[2 + d] - 1) * s[d] + 1, s[d]) for d in range(nd))
        for gi in range(g):
            xs = xp[(slice(None), slice(gi * cig, (gi + 1) * cig)) + sl]
            ys = dy[:, gi * cog:(gi + 1) * cog].astype(np.float64)
            out[(slice(gi * cog, (gi + 1) * cog), slice(None)) + k] = np.tensordot(ys, xs, axes=(red, red))
    return out.astype(x.dtype)


# the adjoint of the weights (CO, CI/groups, *kernel_size) of a conv of data x whose output
# adjoint is dy: dW[co, c, k] = sum over n, y of dy[n, co, y] * x_padded[n, c', y * s + k * dl]
register("nn.conv_weight_grad", "opaque", _conv_weight_grad_infer, _conv_weight_grad_ref,
         {"strides": [1], "padding": [0, 0], "dilation": [1], "groups": 1}, required=("kernel_size",))
