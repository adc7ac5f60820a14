"""Channel-blocked (NCHW[x]c) tensors and the convolution between them.

A blocked tensor holds an (N, C, *S) image as (N, ceil(C / bn), *S, bn): `bn` channels
(a vector) innermost, the channels past C zero when packed and of no meaning after that
(a consumer never reads them into a real channel: the blocked conv's weights for them are
zero, `layout.from_blocked` drops them). passes/layout.py keeps chains of convolutions in
this layout, with the transforms only at the chains' ends.

* `layout.to_blocked(x)` (attrs `bn`), `layout.from_blocked(xb)` (attrs `bn`, `channels`);
* `nn.conv2d_blocked(x, w)`: nn.conv2d's attributes plus `bn` and `in_blocked` (whether x
  is blocked or a plain NCHW image); w is the plain (CO, CI / groups, KH, KW) weight; the
  output is blocked. Groups: 1, or one per channel (depthwise).
* `nn.conv3d_blocked(x, w)`: the same for nn.conv3d (NCDHW[x]c), groups 1.
* `qnn.conv2d_blocked(x, w, x_zero, w_zero)`: the same for the integer conv (ops_quant.py's
  qnn.conv2d): uint8 data blocked or plain, int32 output blocked. Groups: 1, or one per
  channel.
"""
from __future__ import annotations

import numpy as np

from ...errors import GraphError
from .ops_nn import conv_infer, conv_ref
from .ops_quant import qconv_infer, qconv_ref
from .registry import check_nargs, register
from .types import TensorType


def blocks(c, bn):
    return -(-c // bn)


def _to_infer(types, attrs):
    check_nargs(types, 1)
    x = types[0]
    bn = attrs["bn"]
    if x.ndim < 3 or not isinstance(bn, int) or bn < 1:
        raise GraphError(f"layout.to_blocked: needs an image of rank >= 3 and bn >= 1, got {x} and bn={bn!r}")
    return TensorType((x.shape[0], blocks(x.shape[1], bn), *x.shape[2:], bn), x.dtype)


def to_blocked_ref(x, a):
    bn = a["bn"]
    N, C = x.shape[:2]
    cb = blocks(C, bn)
    xp = np.zeros((N, cb * bn) + x.shape[2:], x.dtype)
    xp[:, :C] = x
    return np.ascontiguousarray(np.moveaxis(xp.reshape((N, cb, bn) + x.shape[2:]), 2, -1))


def _from_infer(types, attrs):
    check_nargs(types, 1)
    x = types[0]
    bn, c = attrs["bn"], attrs["channels"]
    if x.ndim < 4 or x.shape[-1] != bn or blocks(c, bn) != x.shape[1]:
        raise GraphError(f"layout.from_blocked: {x} is not {c} channels blocked by {bn}")
    return TensorType((x.shape[0], c, *x.shape[2:-1]), x.dtype)


def from_blocked_ref(x, a):
    N, cb = x.shape[:2]
    y = np.moveaxis(x, -1, 2).reshape((N, cb * a["bn"]) + x.shape[2:-1])
    return np.ascontiguousarray(y[:, :a["channels"]])


def _plain_data(x, w, attrs, op):
    """The plain NCHW type of a blocked conv's data `x`."""
    bn = attrs["bn"]
    ci = w.shape[1] * attrs["groups"]
    if not attrs["in_blocked"]:
        return x
    if x.ndim != w.ndim + 1 or x.shape[-1] != bn or x.shape[1] != blocks(ci, bn):
        raise GraphError(f"{op}: data {x} is not {ci} channels blocked by {bn}")
    return TensorType((x.shape[0], ci, *x.shape[2:-1]), x.dtype)


def _blocked_type(t, bn):
    return TensorType((t.shape[0], blocks(t.shape[1], bn), *t.shape[2:], bn), t.dtype)


def _conv_blocked_infer(nd):
    op = f"nn.conv{nd}d_blocked"

    def infer(types, attrs):
        check_nargs(types, 2)
        x, w = types
        ci = w.shape[1] * attrs["groups"]
        if w.ndim != nd + 2:
            raise GraphError(f"{op}: weight {w} must have rank {nd + 2}")
        x = _plain_data(x, w, attrs, op)
        g = attrs["groups"]
        # the 3-D conv's blocked form has no depthwise kernel (cpu/conv_blocked.py)
        # (one input channel: groups 1 is both, and the conv is not depthwise)
        if g not in ((1, ci) if nd == 2 else (1,)) or (g == ci != 1 and w.shape[0] != ci):
            raise GraphError(f"{op}: groups={g} must be 1" + (f" or one per channel ({ci})" if nd == 2 else ""))
        return _blocked_type(conv_infer(nd)([x, w], attrs), attrs["bn"])
    return infer


def _plain_data_ref(x, w, a):
    return from_blocked_ref(x, {"bn": a["bn"], "channels": w.shape[1] * a["groups"]}) if a["in_blocked"] else x


def conv_blocked_ref(x, w, a):
    return to_blocked_ref(conv_ref(_plain_data_ref(x, w, a), w, a), {"bn": a["bn"]})


def _qconv_blocked_infer(types, attrs):
    check_nargs(types, 4)
    x, w, xz, wz = types
    g, ci = attrs["groups"], w.shape[1] * attrs["groups"]
    if g not in (1, ci) or (g == ci and w.shape[0] != ci):
        raise GraphError(f"qnn.conv2d_blocked: groups={g} must be 1 or one per channel ({ci})")
    x = _plain_data(x, w, attrs, "qnn.conv2d_blocked")
    return _blocked_type(qconv_infer([x, w, xz, wz], attrs), attrs["bn"])


def qconv_blocked_ref(x, w, xz, wz, a):
    return to_blocked_ref(qconv_ref(_plain_data_ref(x, w, a), w, xz, wz, a), {"bn": a["bn"]})


# from_blocked fuses into its producer's kernel like an elementwise epilogue (the blocked
# conv then stores NCHW from its register tile): "broadcast", not "injective", which
# would start a kernel (a memory pass) of its own
register("layout.to_blocked", "injective", _to_infer, to_blocked_ref, required=("bn",))
register("layout.from_blocked", "broadcast", _from_infer, from_blocked_ref, required=("bn", "channels"))
register("nn.conv2d_blocked", "anchor", _conv_blocked_infer(2), conv_blocked_ref,
         {"strides": [1, 1], "padding": [0] * 4, "dilation": [1, 1], "groups": 1, "in_blocked": True},
         required=("bn",))
register("nn.conv3d_blocked", "anchor", _conv_blocked_infer(3), conv_blocked_ref,
         {"strides": [1] * 3, "padding": [0] * 6, "dilation": [1] * 3, "groups": 1, "in_blocked": True},
         required=("bn",))
register("qnn.conv2d_blocked", "anchor", _qconv_blocked_infer, qconv_blocked_ref,
         {"strides": [1, 1], "padding": [0] * 4, "dilation": [1, 1], "groups": 1, "in_blocked": True},
         required=("bn",))
