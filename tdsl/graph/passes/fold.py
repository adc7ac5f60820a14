"""Constant folding, and batch norm folded into the conv or dense before it."""
from __future__ import annotations

import numpy as np

from ..ir import Call, Const, Function, Module
from ..ir.registry import evaluate, get_op
from .rewrite import rewrite, same, use_counts


# ---------------------------------------------------------------------------- constant folding

FOLD_LIMIT = 1 << 26   # bytes: do not materialize huge broadcasts


def fold_constants(mod: Module) -> Module:
    """Evaluates every operator whose inputs are all constants (numpy meaning). With
    symbolic sizes a constant can be a splat, one value broadcast to a run-time shape
    (`broadcast_to` of a constant: what `ones_like` of an input exports as): elementwise
    operators, reshapes and gathers of splats fold to splats, and comparisons decided by
    the range of their operand (`arange(sequence) >= 0`) to splats of the answer, so that
    the attention masks a network computes from its input's shape fold away as they do
    at a static size."""
    def visit(n, args):
        if isinstance(n.op, Function) or not args and n.op != "arange":
            return same(n, args)
        if all(isinstance(a, Const) for a in args) and n.type.static and n.type.nbytes <= FOLD_LIMIT:
            return Const(evaluate(n.op, n.attrs, [a.data for a in args]))
        if not n.type.static:
            r = _fold_splat(n, args)
            if r is None:
                r = _gather_of_a_const_slice(n, args) or _gather_of_a_splat(n, args) or _implicit_broadcast(n, args)
            if r is not None:
                return r
        return same(n, args)
    return rewrite(mod, visit)


def _gather_of_a_const_slice(n, args):
    """take(constant table, strided_slice(constant indices)) -> strided_slice(constant
    gathered rows): a transformer's position embeddings, `table[position_ids[:, :seq]]`,
    whose slice end is a run-time size. Static, the whole gather folds; symbolic, the
    gather of every position folds and only the slice is left, which fuses into the
    embeddings' add as a read at an offset instead of a kernel of its own."""
    if n.op != "take" or not isinstance(args[0], Const) or not isinstance(args[1], Call) \
            or args[1].op != "strided_slice" or not isinstance(args[1].args[0], Const):
        return None
    sl, table, idx = args[1], args[0].data, args[1].args[0].data
    ax = n.attrs["axis"]
    rows = evaluate("take", n.attrs, [table, idx])
    if rows.nbytes > max(table.nbytes, FOLD_LIMIT // 64):
        return None       # more rows than the table holds: keep the gather
    a = sl.attrs
    full = [(0, d, 1) for d in table.shape]
    bes = full[:ax] + list(zip(a["begin"], a["end"], a["strides"])) + full[ax + 1:]
    return Call("strided_slice", [Const(rows)], {"begin": [b for b, _, _ in bes], "end": [e for _, e, _ in bes],
                                                 "strides": [s for _, _, s in bes]}, n.span)


def _gather_of_a_splat(n, args):
    """take(constant table, one index broadcast to a run-time shape) -> that row of the
    table broadcast: BERT's token type embeddings of the token types it defaults to zero
    (`table[zeros(batch, sequence)]`), which a static build folds."""
    if n.op != "take" or not isinstance(args[0], Const) or splat_value(args[1]) is None \
            or not isinstance(args[1], Call):
        return None
    ax, table = n.attrs["axis"], args[0].data
    row = evaluate("take", n.attrs, [table, splat_value(args[1])])
    row = row.reshape(table.shape[:ax] + (1,) * args[1].type.ndim + table.shape[ax + 1:])
    return Call("broadcast_to", [Const(row)], {"shape": list(n.type.shape)}, n.span)


def _implicit_broadcast(n, args):
    """op(x, broadcast_to(constant)) -> op(x, constant) for an elementwise `op` whose
    other operands have its shape already: the operator broadcasts the constant as it
    reads it, and the broadcast is no kernel of its own."""
    if get_op(n.op).kind not in ("elemwise", "broadcast") or len(args) != 2:
        return None
    for i in (0, 1):
        b, other = args[i], args[1 - i]
        if isinstance(b, Call) and b.op == "broadcast_to" and isinstance(b.args[0], Const) \
                and other.type.shape == n.type.shape and other.type.dtype == b.type.dtype \
                and b.args[0].type.ndim <= n.type.ndim:
            new = list(args)
            new[i] = b.args[0]
            return Call(n.op, new, n.attrs, n.span)
    return None


def splat_value(e):
    """The one value of a splat (a scalar constant broadcast to a shape) as a 0-d array,
    or of a constant whose elements are all equal; else None."""
    if isinstance(e, Call) and e.op == "broadcast_to" and isinstance(e.args[0], Const):
        e = e.args[0]
    if not isinstance(e, Const) or not e.data.size:
        return None
    d = e.data
    first = d.flat[0]
    # a weight is no splat: its last or middle element tells without comparing (and
    # copying, where it is a transposed view) all of it
    if d.flat[-1] != first or d.flat[d.size // 2] != first or not bool(np.all(d == first)):
        return None
    return np.asarray(first, d.dtype).reshape(())


def _splat(value, t, span):
    return Call("broadcast_to", [Const(np.asarray(value, t.dtype).reshape(()))], {"shape": list(t.shape)}, span)


def _fold_splat(n, args):
    kind = get_op(n.op).kind
    vals = [splat_value(a) for a in args]
    if n.op == "broadcast_to":
        if vals[0] is None or isinstance(args[0], Const) and args[0].type.ndim == 0:
            return None           # not a splat, or one already
        return _splat(vals[0], n.type, n.span)
    if n.op in ("reshape", "take", "gather_elements", "strided_slice", "transpose") and vals[0] is not None:
        return _splat(vals[0], n.type, n.span)      # every element is the one value
    if kind in ("elemwise", "broadcast") and None not in vals:
        return _splat(evaluate(n.op, n.attrs, vals), n.type, n.span)
    if n.op in _COMPARE and len(args) == 2:
        lo_hi = [value_range(a) for a in args]
        decided = _COMPARE[n.op](lo_hi[0], lo_hi[1])
        if decided is not None:
            return _splat(decided, n.type, n.span)
    return None


def value_range(e):
    """(lo, hi) of the values of `e` where known (None for an open side): of a constant,
    and of `arange` (through reshapes and broadcasts)."""
    while isinstance(e, Call) and e.op in ("reshape", "broadcast_to", "transpose"):
        e = e.args[0]
    if isinstance(e, Const) and e.data.size and e.type.dtype != "bool":
        return float(e.data.min()), float(e.data.max())
    if isinstance(e, Call) and e.op == "arange":
        start, step = e.attrs["start"], e.attrs["step"]
        return (start, None) if step >= 0 else (None, start)
    return None, None


def _ge(a, b):
    """a >= b for every pair of values (True/False), or None when the ranges overlap."""
    if a[0] is not None and b[1] is not None and a[0] >= b[1]:
        return True
    if a[1] is not None and b[0] is not None and a[1] < b[0]:
        return False
    return None


def _gt(a, b):
    if a[0] is not None and b[1] is not None and a[0] > b[1]:
        return True
    if a[1] is not None and b[0] is not None and a[1] <= b[0]:
        return False
    return None


_COMPARE = {
    "greater_equal": _ge, "greater": _gt,
    "less": lambda a, b: None if _ge(a, b) is None else not _ge(a, b),
    "less_equal": lambda a, b: None if _gt(a, b) is None else not _gt(a, b),
}


# ---------------------------------------------------------------------------- BN folding

def fold_batch_norm(mod: Module) -> Module:
    """batch_norm(conv(x, W) [+ b]) with constant parameters -> conv(x, W * s) + (b - m) * s + beta;
    any other inference batch_norm -> x * s + t (broadcast constants that fuse)."""
    uses = use_counts(mod.main)

    def visit(n, args):
        if n.op != "nn.batch_norm" or not all(isinstance(a, Const) for a in args[1:]):
            return same(n, args)
        x = args[0]
        g, b, m, v = (a.data.astype(np.float64) for a in args[1:])
        scale = g / np.sqrt(v + n.attrs["epsilon"])
        shift = b - m * scale
        dt = n.type.dtype
        bias = None
        conv = x
        if isinstance(x, Call) and x.op == "nn.bias_add" and isinstance(x.args[1], Const) \
                and uses.get(n.args[0], 0) == 1 and isinstance(x.args[0], Call) and x.args[0].op.startswith("nn.conv") \
                and not x.args[0].op.endswith("transpose") and uses.get(n.args[0].args[0], 0) == 1:
            bias = x.args[1].data.astype(np.float64)
            conv = x.args[0]
        if isinstance(conv, Call) and isinstance(conv.op, str) and conv.op.startswith("nn.conv") \
                and not conv.op.endswith("transpose") and isinstance(conv.args[1], Const) \
                and (bias is not None or uses.get(n.args[0], 0) == 1):
            w = conv.args[1].data
            w2 = (w.astype(np.float64) * scale.reshape((-1,) + (1,) * (w.ndim - 1))).astype(w.dtype)
            newconv = Call(conv.op, [conv.args[0], Const(w2)], conv.attrs, conv.span)
            b2 = shift if bias is None else bias * scale + shift
            return Call("nn.bias_add", [newconv, Const(b2.astype(dt))], {"axis": 1}, n.span)
        shape = (-1,) + (1,) * (x.type.ndim - 2)
        y = Call("multiply", [x, Const(scale.astype(dt).reshape(shape))], {}, n.span)
        return Call("add", [y, Const(shift.astype(dt).reshape(shape))], {}, n.span)
    return rewrite(mod, visit)
