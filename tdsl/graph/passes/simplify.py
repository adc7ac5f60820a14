"""Algebraic simplification, and reshapes sunk below elementwise operators."""
from __future__ import annotations

import numpy as np

from ..ir import Call, Const, Function, Module
from ..ir.registry import get_op
from .fold import splat_value
from .rewrite import rewrite, same


# ---------------------------------------------------------------------------- simplification

def _is_const_value(e, v):
    """Whether every element of `e` is `v`: a constant, or a splat of one (fold.py)."""
    s = splat_value(e)
    return s is not None and bool(s == v)


def simplify(mod: Module) -> Module:
    """x*1, 1*x, x+0, 0+x, x-0, x/1 -> x (the constant may be a splat); x and True -> x;
    where(c, a, b) of a constant condition -> a or b; reshape(reshape(x)) -> reshape(x); a
    reshape to the same shape -> x; transpose(transpose(x)) -> one transpose or x; copy(x)
    -> x; a cast to the same dtype -> x."""
    def keep_type(n, x):
        return x if x.type == n.type else None

    def visit(n, args):
        op = n.op
        if isinstance(op, Function):
            return same(n, args)
        if op in ("multiply", "divide") and _is_const_value(args[1], 1):
            r = keep_type(n, args[0])
            if r is not None:
                return r
        if op == "multiply" and _is_const_value(args[0], 1):
            r = keep_type(n, args[1])
            if r is not None:
                return r
        if op in ("add", "subtract") and _is_const_value(args[1], 0):
            r = keep_type(n, args[0])
            if r is not None:
                return r
        if op == "add" and _is_const_value(args[0], 0):
            r = keep_type(n, args[1])
            if r is not None:
                return r
        if op in ("add", "subtract", "multiply", "divide") and isinstance(args[0], Call) \
                and args[0].op == "reshape" and isinstance(args[1], Const):
            # elementwise with a per-last-dim constant commutes with a reshape that keeps the
            # last dim: the bias of MatMul -> dense moves next to the dense and fuses into it
            r, cst = args[0], args[1]
            inner = r.args[0]
            last = n.type.shape[-1] if n.type.ndim else None
            if (n.type == r.type and last is not None and inner.type.ndim >= 1
                    and inner.type.shape[-1] == last and cst.type.ndim >= 1
                    and cst.type.shape[-1] in (1, last) and all(d == 1 for d in cst.type.shape[:-1])):
                moved = Call(op, [inner, Const(cst.data.reshape(-1))], n.attrs, n.span)
                return Call("reshape", [moved], r.attrs, r.span)
        if op == "power" and isinstance(args[1], Const) and args[1].data.size \
                and n.type == args[0].type:
            # a constant small exponent (GPT-2's tanh GELU has x ** 3): multiplies or a
            # square root, not a libm pow call per element
            e = args[1].data.reshape(-1)
            x = args[0]
            if np.all(e == e[0]) and float(e[0]) in (1.0, 2.0, 3.0, 4.0):
                r = x
                for _ in range(int(e[0]) - 1):
                    r = Call("multiply", [r, x], {}, n.span)
                return r
            if np.all(e == 0.5) and x.type.dtype.startswith("float"):
                return Call("sqrt", [x], {}, n.span)
        if op == "logical_and":
            for a, b in ((args[0], args[1]), (args[1], args[0])):
                if _is_const_value(a, True):
                    r = keep_type(n, b)
                    if r is not None:
                        return r
        if op == "where" and splat_value(args[0]) is not None:
            chosen = args[1] if bool(splat_value(args[0])) else args[2]
            if chosen.type == n.type:
                return chosen
            if chosen.type.dtype == n.type.dtype and splat_value(chosen) is not None:
                return Call("broadcast_to", [Const(splat_value(chosen))], {"shape": list(n.type.shape)}, n.span)
        if op == "copy" or (op == "cast" and args[0].type.dtype == n.attrs["dtype"]):
            return args[0]
        if op == "reshape":
            x = args[0]
            while isinstance(x, Call) and x.op == "reshape":
                x = x.args[0]
            if x.type.shape == n.type.shape:
                return x
            if x is not args[0]:
                return Call("reshape", [x], n.attrs, n.span)
        if op == "transpose" and isinstance(args[0], Call) and args[0].op == "transpose":
            inner = args[0]
            perm = [inner.attrs["axes"][p] for p in n.attrs["axes"]]
            if perm == list(range(len(perm))):
                return inner.args[0]
            return Call("transpose", [inner.args[0]], {"axes": perm}, n.span)
        if op == "transpose" and n.attrs["axes"] == list(range(n.type.ndim)):
            return args[0]
        return same(n, args)
    return rewrite(mod, visit)


# ---------------------------------------------------------------------------- reshape sinking

_COMMUTING_BINARY = ("add", "subtract", "multiply", "divide", "maximum", "minimum", "power",
                     # quantized element-wise operators (scales and zero points constant)
                     "qnn.add", "qnn.quantize", "qnn.dequantize", "qnn.requantize")


def _from_anchor(x, steps=8):
    """Whether `x` is a matrix product or conv, or an elementwise chain on one (along the
    first operand that is a call: a bias add, an activation)."""
    for _ in range(steps):
        if not isinstance(x, Call) or isinstance(x.op, Function):
            return False
        kind = get_op(x.op).kind
        if kind == "anchor":
            return True
        if kind not in ("elemwise", "broadcast"):
            return False
        x = next((a for a in x.args if isinstance(a, Call)), None)
    return False


def sink_reshapes(mod: Module) -> Module:
    """op(reshape(x), ...) -> reshape(op(x, ...)) for elementwise operators whose other
    operands are reshapes of the same shape, constants that commute with the reshape
    (scalars; per-last-axis vectors when the reshape keeps the last axis), or, where the
    reshaped operand comes out of a matrix product or a conv, values of the operator's
    own shape (reshaped back: a view). Applied bottom-up it moves a reshape below a whole
    elementwise chain, so the chain joins the producer's kernel: convnext's Linear ->
    reshape -> GELU becomes one dense kernel with a GELU epilogue instead of a dense and a
    separate pass over its output, and a transformer's residual add after a projection
    (MatMul of (1, S, D) imported as reshape -> dense -> reshape) becomes the dense's
    epilogue instead of a pass of its own over the hidden state."""
    def visit(n, args):
        op = n.op
        if isinstance(op, Function) or not args \
                or (get_op(op).kind != "elemwise" and op not in _COMMUTING_BINARY):
            return same(n, args)
        inner_shape, shape_attrs, new_args, full, anchored = None, None, [], [], False
        for a in args:
            if isinstance(a, Call) and a.op == "reshape" and a.type.shape == n.type.shape:
                s = a.args[0].type.shape
                if inner_shape is not None and s != inner_shape:
                    return same(n, args)
                inner_shape, shape_attrs = s, a.attrs
                new_args.append(a.args[0])
                anchored |= _from_anchor(a.args[0])
            elif isinstance(a, Const):
                new_args.append(a)
            elif a.type.shape == n.type.shape and a.type.dtype == n.type.dtype:
                full.append(len(new_args))
                new_args.append(a)
            else:
                return same(n, args)
        if inner_shape is None or not inner_shape or full and not anchored:
            return same(n, args)
        for i in full:
            new_args[i] = Call("reshape", [new_args[i]], {"newshape": list(inner_shape)}, n.span)
        last = n.type.shape[-1] if n.type.ndim else None
        for i, a in enumerate(new_args):
            if not isinstance(a, Const):
                continue
            if a.data.size == 1:
                new_args[i] = Const(a.data.reshape(()))
            elif (last is not None and inner_shape[-1] == last and a.type.shape[-1] == last
                  and all(d == 1 for d in a.type.shape[:-1])):
                new_args[i] = Const(a.data.reshape(-1))
            else:
                return same(n, args)
        moved = Call(op, new_args, n.attrs, n.span)
        if moved.type.shape != inner_shape or moved.type.dtype != n.type.dtype:
            return same(n, args)
        return Call("reshape", [moved], shape_attrs, n.span)
    return rewrite(mod, visit)
