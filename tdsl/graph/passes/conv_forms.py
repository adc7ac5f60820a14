"""Convolutions over one spatial dimension as convolutions over two, one row high: the
CPU and GPU strategies for 2-D convs (blocked, 1x1, grouped and depthwise, rows) then take
1-D ones too. The reshapes around them are views (memory.py gives such groups no buffer)
and the weights' reshape folds away."""
from __future__ import annotations

from ..ir import Call, Const, Module
from .rewrite import rewrite, same

_AFFINE = ("add", "subtract", "multiply", "divide")


def _row(e):
    shape = list(e.type.shape)
    return Call("reshape", [e], {"newshape": shape[:2] + [1] + shape[2:]})


def conv1d_as_conv2d(mod: Module) -> Module:
    """nn.conv1d(x, w) -> reshape(nn.conv2d(x[:, :, None], w[:, :, None])), and the same
    for nn.conv1d_transpose. A bias or a constant scale or shift on the result (a folded
    batch norm) goes inside the reshape with the constant given the row axis, so that it
    joins the conv's kernel (sink_reshapes moves activations after it)."""
    rows = {}       # id(reshape made here) -> the 2-D tensor inside it

    def wrap(y, n):
        out = Call("reshape", [y], {"newshape": list(n.type.shape)}, n.span)
        rows[id(out)] = y
        return out

    def visit(n, args):
        if n.op == "nn.bias_add" and id(args[0]) in rows and n.attrs.get("axis") == 1:
            return wrap(Call("nn.bias_add", [rows[id(args[0])], args[1]], n.attrs, n.span), n)
        if n.op in _AFFINE and id(args[0]) in rows and isinstance(args[1], Const) \
                and n.type.shape == args[0].type.shape:
            c = args[1].data
            c = c.reshape(c.shape[:-1] + (1,) + c.shape[-1:]) if c.ndim else c
            return wrap(Call(n.op, [rows[id(args[0])], Const(c)], n.attrs, n.span), n)
        if n.op not in ("nn.conv1d", "nn.conv1d_transpose"):
            return same(n, args)
        a = dict(n.attrs)
        pb, pe = a["padding"]
        a.update(strides=[1] + list(a["strides"]), dilation=[1] + list(a["dilation"]),
                 padding=[0, pb, 0, pe])
        if "output_padding" in a:
            a["output_padding"] = [0] + list(a["output_padding"])
        y = Call(n.op.replace("1d", "2d"), [_row(args[0]), _row(args[1])], a, n.span)
        return wrap(y, n)
    return rewrite(mod, visit)
