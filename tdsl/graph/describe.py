"""One line per fused group saying which layer it is, for the rows of a profile."""
from __future__ import annotations

from .ir import Function


def describe_group(fn: Function) -> str:
    """A group's anchor and shapes for a profile row, e.g. `conv 3x3/2 g96 96x112x112->96x56x56`
    (kernel/stride, dilation when not 1, groups when not 1), so a row says which layer it is."""
    for n in fn.nodes():
        if isinstance(n.op, str) and n.op.startswith("nn.conv") and n.type.ndim >= 3:
            a = n.attrs
            x, w = n.args[0].type.shape, n.args[1].type.shape
            s = f"conv {'x'.join(map(str, w[2:]))}/{'x'.join(map(str, sorted(set(a['strides']))))}"
            if any(d != 1 for d in a.get("dilation", ())):
                s += f" d{'x'.join(map(str, sorted(set(a['dilation']))))}"
            if a.get("groups", 1) != 1:
                s += f" g{a['groups']}"
            return s + f" {'x'.join(map(str, x[1:]))}->{'x'.join(map(str, n.type.shape[1:]))}"
    out = fn.outputs[0]
    return f"{'x'.join(map(str, out.type.shape))}" if out.type.ndim else ""
