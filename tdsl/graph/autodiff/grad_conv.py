"""Backward rules of the convolutions (ir/ops_nn.py), grouped and depthwise included: the
data adjoint of a conv is the transposed conv of its output adjoint by the same weights,
that of a transposed conv the conv; the weight adjoint of both is one conv that slides the
output adjoint over the data (`_weight_adjoint`), the groups becoming the groups of that
conv, so a depthwise conv's weights get a depthwise-shaped adjoint, not a dense one."""
from __future__ import annotations

from .registry import op, register_gradient


def _swap01(x, groups):
    """(N, G*C, *S) -> (C, G*N, *S): the channels of each group become the batch of one
    conv, the batch (per group) its reduced channels."""
    n, ch = x.type.shape[:2]
    sp = list(x.type.shape[2:])
    nd = len(sp)
    if groups == 1:
        return op("transpose", x, axes=[1, 0] + list(range(2, nd + 2)))
    x = op("reshape", x, newshape=[n, groups, ch // groups] + sp)
    x = op("transpose", x, axes=[2, 1, 0] + list(range(3, nd + 3)))
    return op("reshape", x, newshape=[ch // groups, groups * n] + sp)


def _group_major(dy, groups):
    """(N, G*C, *S) -> (G*C, N, *S): the conv weights of the weight adjoint, group-major."""
    nd = dy.type.ndim - 2
    return op("transpose", dy, axes=[1, 0] + list(range(2, nd + 2)))


def _weight_adjoint(x, dy, s, p, dl, groups, k_dims):
    """The adjoint of the weights (CO, CI/G, *K) of a conv of data `x` (N, CI, *X) with
    output adjoint `dy` (N, CO, *Y): dW[co, c, k] = sum over n, y of
    dy[n, co, y] * x_padded[n, g(co) * CI/G + c, y * s + k * dl]. That is a conv of the
    data (its channels per group as the batch, the batch as the reduced channels) by the
    output adjoint as weights, with the forward dilation as its stride and the forward
    stride as its dilation, grouped as the forward conv."""
    nd = len(k_dims)
    gw = op(f"nn.conv{nd}d", _swap01(x, groups), _group_major(dy, groups), strides=dl, padding=p,
            dilation=s, groups=groups)
    # (CI/G, CO, *K'): the rows past the kernel (the stride's remainder) are dropped
    if tuple(gw.type.shape[2:]) != tuple(k_dims):
        gw = op("strided_slice", gw, begin=[0] * (nd + 2), end=list(gw.type.shape[:2]) + list(k_dims),
                strides=[1] * (nd + 2))
    return op("transpose", gw, axes=[1, 0] + list(range(2, nd + 2)))


def _conv(call, g):
    x, w = call.args
    nd = x.type.ndim - 2
    a = call.attrs
    s, p, dl, groups = a["strides"], a["padding"], a["dilation"], a["groups"]
    in_dims, k_dims, out_dims = x.type.shape[2:], w.type.shape[2:], g.type.shape[2:]
    # the rows the forward conv never reached (the stride's remainder) come back as
    # output padding of the transposed conv, so that the data adjoint has x's shape
    opad = [in_dims[d] + p[d] + p[d + nd] - ((out_dims[d] - 1) * s[d] + (k_dims[d] - 1) * dl[d] + 1)
            for d in range(nd)]
    # a conv's weights (CO, CI/G, *K) are its transposed conv's (CI', CO'/G, *K) as they are
    gx = op(f"nn.conv{nd}d_transpose", g, w, strides=s, padding=p, dilation=dl, groups=groups,
            output_padding=opad)
    return [gx, _weight_adjoint(x, g, s, p, dl, groups, k_dims)]


def _conv_transpose(call, g):
    x, w = call.args                 # x (N, CI, *X), w (CI, CO/G, *K), g (N, CO, *Y)
    nd = x.type.ndim - 2
    a = call.attrs
    s, p, dl, groups = a["strides"], a["padding"], a["dilation"], a["groups"]
    # the transposed conv is the adjoint of the conv of the same attributes: its adjoint
    # is that conv (the output padding only adds rows this conv never reads back)
    gx = op(f"nn.conv{nd}d", g, w, strides=s, padding=p, dilation=dl, groups=groups)
    # y[o*s + k*dl - p] += x[i] w[k]: the roles of the conv's data and output adjoint swap
    return [gx, _weight_adjoint(g, x, s, p, dl, groups, w.type.shape[2:])]


for _nd in (1, 2, 3):
    register_gradient(f"nn.conv{_nd}d")(_conv)
    register_gradient(f"nn.conv{_nd}d_transpose")(_conv_transpose)
