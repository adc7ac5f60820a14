"""Float convs with constant weights re-laid out at build time: which of them the CPU
definitions take (`fast_conv`), which definition a conv2d takes (`conv_path`; the blocked
NCHW[x]c conv itself is conv_blocked.py), and the input they read (`on_input`)."""
from __future__ import annotations

from . import conv1x1, conv_spatial, squeeze, width


def fast_conv(g, n):
    """nn.conv2d and nn.conv3d (conv1d arrives as a conv2d of one row: passes/conv_forms),
    their transposes and nn.conv2d_blocked: float32, groups 1, constant weights, the input
    a group parameter or (not for a transposed conv) the squeeze-excite multiply that
    fuse_ops moved into the group. In a group with symbolic sizes only the batch
    (batch.py) and the row width (width.py) may be."""
    x_e, w_e = n.args
    if g.const_param(w_e) is None or x_e.type.dtype != "float32" or n.attrs["groups"] != 1 \
            or not width.batch_and_width(g, n):
        return False
    if x_e in g.pidx:
        return True
    return not n.op.endswith("_transpose") and _channel_scaled(g, x_e) is not None


def _channel_scaled(g, x_e):
    """(image, per-channel scale) group parameters when the conv's input is the
    squeeze-excite multiply that fuse_ops moved into this group (batch 1: one scale per
    input channel; a symbolic batch: one per image and input channel)."""
    if getattr(x_e, "op", None) != "multiply" or isinstance(x_e.type.shape[0], int) and x_e.type.shape[0] != 1:
        return None
    big = [a for a in x_e.args if a.type.shape == x_e.type.shape]
    small = [a for a in x_e.args if a.type.shape != x_e.type.shape]
    if len(big) != 1 or len(small) != 1 or not all(a in g.pidx for a in (big[0], small[0])):
        return None
    return big[0], small[0]


def on_input(define):
    """compute(g, n, tensors) of a `fast_conv` node by `define(g, n, x, wi)`: `x` the
    placeholder of its input, `wi` the index of its constant weights. A channel-scaled
    input is read as it is and its scale goes into the packed weights (g.channel_scale):
    conv(x * s[ci], W) = conv(x, W * s[ci]), CO*CI*KH*KW multiplies once per call instead
    of a pass over x."""
    def compute(g, n, tensors):
        x_e, w_e = n.args
        wi = g.const_param(w_e)
        if x_e in g.pidx:
            return define(g, n, g.param_tensor(g.pidx[x_e]), wi)
        x, g.channel_scale = (g.param_tensor(g.pidx[a]) for a in _channel_scaled(g, x_e))
        try:
            return define(g, n, x, wi)
        finally:
            g.channel_scale = None
    return compute


def conv_path(g, n):
    """Which definition takes conv node `n`: "matvec" (a 1x1 image), "rows" (stems, convs
    whose blocked tile is latency-bound), "1x1" (conv1x1.py) or "blocked" (NCHW[x]c; the
    only one with other than two spatial dimensions)."""
    if n.op != "nn.conv2d":
        return "blocked"
    CO = n.args[1].type.shape[0]
    bn = g.target.vector_lanes(n.args[0].type.dtype)
    # the blocked conv's register tile: rows must divide the output row, so a prime width
    # (13 in squeezenet) on 16 registers leaves it one accumulator; the strategies that
    # vectorize along the image take such convs
    # (on a symbolic row, width.row_tile: the best tile for a long row, ragged at its end)
    xb, cbb = width.row_tile(g.target, n.type.shape[3], -(-CO // bn) * bn, whole_vecs=True)
    if squeeze.is_matvec_conv(n):
        return "matvec"
    if conv_spatial.applies(g, n, xb * cbb):
        return "rows"
    # the pixel GEMM packs whole images of a static size
    if not width.symbolic_width(n) and conv1x1.applies(g, n, xb * cbb):
        return "1x1"
    return "blocked"


def path_is(path):
    """applies(g, n) of the definition of `path` (conv_path)."""
    def applies(g, n):
        return fast_conv(g, n) and conv_path(g, n) == path
    return applies
