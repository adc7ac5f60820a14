"""Backward rules of the layout operators (ir/ops_tensor.py): each moves the adjoint back
the way the forward operator moved the data."""
from __future__ import annotations

import numpy as np

from ...errors import GraphError
from .registry import op, register_gradient, unbroadcast


@register_gradient("reshape")
def _reshape(call, g):
    return [op("reshape", g, newshape=list(call.args[0].type.shape))]


@register_gradient("transpose")
def _transpose(call, g):
    inverse = [int(i) for i in np.argsort(call.attrs["axes"])]
    return [op("transpose", g, axes=inverse)]


@register_gradient("broadcast_to")
def _broadcast_to(call, g):
    return [unbroadcast(g, call.args[0].type.shape)]


@register_gradient("concatenate")
def _concatenate(call, g):
    ax = call.attrs["axis"]
    out, start = [], 0
    for x in call.args:
        shape = list(x.type.shape)
        begin = [0] * len(shape)
        end = list(g.type.shape)
        begin[ax], end[ax] = start, start + shape[ax]
        out.append(op("strided_slice", g, begin=begin, end=end, strides=[1] * len(shape)))
        start += shape[ax]
    return out


@register_gradient("strided_slice")
def _strided_slice(call, g):
    x = call.args[0]
    b, s = call.attrs["begin"], call.attrs["strides"]
    if any(v != 1 for v in s):
        where = f" (node '{call.span}')" if call.span else ""
        raise GraphError(f"gradient: strided_slice{where} with strides {s} has no gradient rule "
                         "yet (only stride 1)")
    # the slice's adjoint is the output adjoint padded with zeros back to x's shape
    pw = [[b[d], x.type.shape[d] - b[d] - g.type.shape[d]] for d in range(x.type.ndim)]
    return [op("nn.pad", g, pad_width=pw, pad_value=0.0, mode="constant")]


@register_gradient("nn.pad")
def _pad(call, g):
    x = call.args[0]
    pw = call.attrs["pad_width"]
    if call.attrs["mode"] != "constant" or any(v < 0 for p in pw for v in p):
        where = f" (node '{call.span}')" if call.span else ""
        raise GraphError(f"gradient: nn.pad{where} in mode '{call.attrs['mode']}' or with negative "
                         "widths has no gradient rule yet (only constant padding)")
    begin = [p[0] for p in pw]
    end = [p[0] + s for p, s in zip(pw, x.type.shape)]
    return [op("strided_slice", g, begin=begin, end=end, strides=[1] * x.type.ndim)]
