"""Integer convs and matmuls of quantized networks on CPUs without an integer dot-product
instruction (no AVX512-VNNI: AVX2 machines such as Zen 3) computed with float32
multiply-adds:

    qnn.conv2d(x, W, z_x, z_W) -> cast(nn.conv2d(cast(x) - z_x, W - z_W), int32)

and likewise qnn.matmul with constant weights. Without VNNI the int32 products run at a
fraction of the FMA rate (vpmulld), while the float conv strategies run near it. The
result is the same integer: every operand is an integer of at most 9 bits, so products
and partial sums are exact in float32 while they stay under 2^24 (a sum of products of
uint8 and int8 values would need K > 500 terms all near the extremes to leave that
range); the padding of the shifted data is 0, as the integer conv's padding with the zero
point is. Run by `optimize(mod, target=...)` before the layout pass, so the float convs
join the blocked chains."""
from __future__ import annotations

import numpy as np

from ..ir import Call, Const, Module
from .rewrite import rewrite, same


def _shifted(x, z):
    f = Call("cast", [x], {"dtype": "float32"})
    return Call("subtract", [f, Const(np.asarray(z, np.float32).reshape(()))], {})


def _float_operator(n, args):
    x, w, zx, zw = args
    if not (isinstance(w, Const) and isinstance(zx, Const) and isinstance(zw, Const)) or \
            zx.data.size != 1:
        return None
    wf = Const((w.data.astype(np.float32) - zw.data.astype(np.float32)).astype(np.float32))
    if n.op == "qnn.conv2d":
        y = Call("nn.conv2d", [_shifted(x, zx.data), wf], dict(n.attrs), n.span)
    else:
        y = Call("nn.matmul", [_shifted(x, zx.data), wf], {}, n.span)
    return Call("cast", [y], {"dtype": "int32"}, n.span)


def _one_channel_conv(n):
    return n.op == "qnn.conv2d" and n.args[0].type.shape[1] == 1


def integer_products_in_float(mod: Module, one_channel_only=False) -> Module:
    """Every integer conv and matmul with constant weights in float32; `one_channel_only`
    (targets with VNNI): only convs of one input channel (a 1-D signal's stem), whose
    vpdpbusd lanes would hold 1 product of 4, where the float stem strategy vectorizes
    along the output (conv1d_net's 1 -> 32 channel, 11-tap stem)."""
    def visit(n, args):
        if one_channel_only and not _one_channel_conv(n):
            return same(n, args)
        if n.op in ("qnn.conv2d", "qnn.matmul"):
            r = _float_operator(n, args)
            if r is not None:
                return r
        return same(n, args)
    return rewrite(mod, visit)
