"""Backward rules of the convolutions (ir/ops_nn.py), grouped and depthwise included: the
data adjoint of a conv is the transposed conv of its output adjoint by the same weights,
that of a transposed conv the conv; the weight adjoint of both is `nn.conv_weight_grad`
(ir/ops_grad.py), a contraction per tap of the output adjoint with the shifted data, of
the forward conv's groups, so a depthwise conv's weights get a depthwise-shaped adjoint,
not a dense one."""
from __future__ import annotations

from .registry import op, register_gradient


def _weight_adjoint(x, dy, s, p, dl, groups, k_dims):
    """The adjoint of the weights (CO, CI/G, *K) of a conv of data `x` (N, CI, *X) whose
    output adjoint is `dy` (N, CO, *Y): nn.conv_weight_grad, per tap a contraction of `dy`
    with the shifted data over the batch and the output pixels (a GEMM of CO x pixels by
    pixels x CI/G per tap and group)."""
    return op("nn.conv_weight_grad", x, dy, strides=s, padding=p, dilation=dl, groups=groups,
              kernel_size=list(k_dims))


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
