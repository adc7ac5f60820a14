"""Float convs whose weights are an input of the kernel, not a constant: the forward and
weight-gradient convs of a `tdsl.graph.gradient` module (its weights are module inputs)
and their data-gradient transposed convs. They take the blocked conv of conv_blocked.py
with the weights packed to (CO/bn, CI, *K, bn) once per call inside the kernel
(`conv_blocked.runtime_pack`), where constant weights are packed at build time; the pack
reads the weights once, the conv reads them once per output pixel tile. A transposed conv
(the data gradient) is the blocked conv of its input spread onto the stride grid with the
weights' channel axes swapped and taps reversed (conv_blocked.conv_transpose)."""
from __future__ import annotations

from . import conv_blocked

OPS = ("nn.conv2d", "nn.conv2d_transpose")


def applies(g, n):
    """A 2-D float32 conv or transposed conv of groups 1 and static shapes whose data and
    weights are both group parameters, the weights not bound to a constant."""
    x_e, w_e = n.args
    if g.const_param(w_e) is not None or x_e not in g.pidx or w_e not in g.pidx:
        return False
    if x_e.type.dtype != "float32" or w_e.type.dtype != "float32" or n.attrs["groups"] != 1:
        return False
    shapes = tuple(x_e.type.shape) + tuple(w_e.type.shape) + tuple(n.type.shape)
    return all(isinstance(d, int) for d in shapes)


def compute(g, n, tensors):
    x = g.param_tensor(g.pidx[n.args[0]])
    w = g.param_tensor(g.pidx[n.args[1]])
    if n.op == "nn.conv2d_transpose":
        return conv_blocked.conv_transpose(g, n, x, w)
    return conv_blocked.conv_padded(g, n, x, w)


def schedule(s, out, g, parallel=True):
    """The blocked conv's schedule; the pack stage's channel blocks split between the
    cores."""
    conv_blocked.schedule(s, out, g, parallel)
    wp = g.anchor.tensor.op.attrs["weights"]
    if parallel:
        s[wp].parallel(wp.op.axis[0])
