"""Graph passes. Each is a function Module -> Module (new expressions; the input is left as
it is). `optimize` runs them in order:

simplify -> fold_constants -> fold_batch_norm -> simplify -> fold_constants -> sink_reshapes
-> simplify -> eliminate_common_subexpr -> eliminate_dead_code -> fuse_ops
"""
from __future__ import annotations

from typing import Callable, Dict, List

import numpy as np

from ..errors import GraphError
from .ir import Call, Const, Expr, Function, Module, Var
from .ops import evaluate, get_op
from . import concat_prefix


def rewrite(mod: Module, visit: Callable[[Call, List[Expr]], Expr]) -> Module:
    """Rebuilds @main bottom-up: `visit(old_call, new_args)` returns the replacement."""
    fn = mod.main
    memo: Dict[int, Expr] = {}
    for n in fn.nodes():
        args = [memo.get(id(a), a) for a in n.args]
        memo[id(n)] = visit(n, args)
    outs = [memo.get(id(o), o) for o in fn.outputs]
    return Module(Function(fn.name, fn.params, outs, fn.attrs), mod.info)


def same(n: Call, args):
    if all(a is b for a, b in zip(args, n.args)):
        return n
    return Call(n.op, args, n.attrs, n.span)


def use_counts(fn: Function):
    uses: Dict[int, int] = {}
    for n in fn.nodes():
        for a in n.args:
            uses[id(a)] = uses.get(id(a), 0) + 1
    for o in fn.outputs:
        uses[id(o)] = uses.get(id(o), 0) + 1
    return uses


# ---------------------------------------------------------------------------- constant folding

FOLD_LIMIT = 1 << 26   # bytes: do not materialize huge broadcasts


def fold_constants(mod: Module) -> Module:
    """Evaluates every operator whose inputs are all constants (numpy meaning)."""
    def visit(n, args):
        if not isinstance(n.op, Function) and args and all(isinstance(a, Const) for a in args) \
                and n.type.nbytes <= FOLD_LIMIT:
            return Const(evaluate(n.op, n.attrs, [a.data for a in args]))
        return same(n, args)
    return rewrite(mod, visit)


# ---------------------------------------------------------------------------- simplification

def _is_const_value(e, v):
    return isinstance(e, Const) and e.data.size > 0 and bool(np.all(e.data == v))


def simplify(mod: Module) -> Module:
    """x*1, 1*x, x+0, 0+x, x-0, x/1 -> x; reshape(reshape(x)) -> reshape(x); a reshape to the
    same shape -> x; transpose(transpose(x)) -> one transpose or x; copy(x) -> x; a cast to
    the same dtype -> x."""
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

_COMMUTING_BINARY = ("add", "subtract", "multiply", "divide", "maximum", "minimum", "power")


def sink_reshapes(mod: Module) -> Module:
    """op(reshape(x), ...) -> reshape(op(x, ...)) for elementwise operators whose other
    operands are reshapes of the same shape or constants that commute with the reshape
    (scalars; per-last-axis vectors when the reshape keeps the last axis). Applied bottom-up
    it moves a reshape below a whole elementwise chain, so the chain joins the producer's
    kernel: convnext's Linear -> reshape -> GELU becomes one dense kernel with a GELU
    epilogue instead of a dense and a separate pass over its output."""
    def visit(n, args):
        op = n.op
        if isinstance(op, Function) or not args \
                or (get_op(op).kind != "elemwise" and op not in _COMMUTING_BINARY):
            return same(n, args)
        inner_shape, shape_attrs, new_args = None, None, []
        for a in args:
            if isinstance(a, Call) and a.op == "reshape" and a.type.shape == n.type.shape:
                s = a.args[0].type.shape
                if inner_shape is not None and s != inner_shape:
                    return same(n, args)
                inner_shape, shape_attrs = s, a.attrs
                new_args.append(a.args[0])
            elif isinstance(a, Const):
                new_args.append(a)
            else:
                return same(n, args)
        if inner_shape is None or not inner_shape:
            return same(n, args)
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
                and uses.get(id(n.args[0]), 0) == 1 and isinstance(x.args[0], Call) and x.args[0].op.startswith("nn.conv") \
                and not x.args[0].op.endswith("transpose") and uses.get(id(n.args[0].args[0]), 0) == 1:
            bias = x.args[1].data.astype(np.float64)
            conv = x.args[0]
        if isinstance(conv, Call) and isinstance(conv.op, str) and conv.op.startswith("nn.conv") \
                and not conv.op.endswith("transpose") and isinstance(conv.args[1], Const) \
                and (bias is not None or uses.get(id(n.args[0]), 0) == 1):
            w = conv.args[1].data
            w2 = (w.astype(np.float64) * scale.reshape((-1,) + (1,) * (w.ndim - 1))).astype(w.dtype)
            newconv = Call(conv.op, [conv.args[0], Const(w2)], conv.attrs, conv.span)
            b2 = shift if bias is None else bias * scale + shift
            return Call("nn.bias_add", [newconv, Const(b2.astype(dt))], {"axis": 1}, n.span)
        shape = (-1,) + (1,) * (x.type.ndim - 2)
        y = Call("multiply", [x, Const(scale.astype(dt).reshape(shape))], {}, n.span)
        return Call("add", [y, Const(shift.astype(dt).reshape(shape))], {}, n.span)
    return rewrite(mod, visit)


# ---------------------------------------------------------------------------- DCE / CSE

def eliminate_dead_code(mod: Module) -> Module:
    """Keeps only what the outputs use (the DAG is rebuilt from the outputs), and drops
    unused parameters' nodes. Parameters stay: they are the model's interface."""
    return rewrite(mod, same)


def eliminate_common_subexpr(mod: Module) -> Module:
    """Merges calls with the same operator, arguments and attributes, and equal small
    constants."""
    seen: Dict[tuple, Expr] = {}
    consts: Dict[tuple, Const] = {}

    def canon(a):
        if isinstance(a, Const) and a.data.nbytes <= 4096:
            key = (a.type.dtype, a.type.shape, a.data.tobytes())
            return consts.setdefault(key, a)
        return a

    def visit(n, args):
        args = [canon(a) for a in args]
        key = (n.op if isinstance(n.op, str) else id(n.op), tuple(id(a) for a in args), repr(sorted(n.attrs.items())))
        hit = seen.get(key)
        if hit is not None:
            return hit
        r = same(n, args)
        seen[key] = r
        return r
    return rewrite(mod, visit)


# ---------------------------------------------------------------------------- fusion

_ORDER = {"elemwise": 0, "broadcast": 1, "injective": 2, "reduce": 3, "anchor": 4, "opaque": 5}


def _kind(n):
    return get_op(n.op).kind


class _Group:
    def __init__(self, first):
        self.nodes = [first]
        self.master_kind = _kind(first)

    @property
    def last(self):
        return self.nodes[-1]

    def accepts(self, kind):
        mk = self.master_kind
        if kind in ("elemwise", "broadcast"):
            return mk in ("elemwise", "broadcast", "injective", "anchor")
        if kind == "injective":
            return mk in ("elemwise", "broadcast", "injective")
        return False


def _users(nodes):
    out: Dict[int, List[Call]] = {}
    for n in nodes:
        for a in n.args:
            lst = out.setdefault(id(a), [])
            if not lst or lst[-1] is not n:
                lst.append(n)
    return out


DIAMOND_DEPTH = 8


def _diamond(a, users, uses, outputs, pos):
    """The nodes of an elementwise diamond below `a`, or None: every use of `a` is by
    chains of single-use elementwise/broadcast nodes that meet in one elementwise node
    (x * sigmoid(x), x * hardsigmoid(x), x * x, gelu's chain). They can join a's group:
    nothing outside reads a or the chains, so the group stays one kernel with one output
    (SiLU after every conv of efficientnet would otherwise cost a memory pass each)."""
    direct = users.get(id(a), [])
    if not direct:
        return None
    sink = max(direct, key=lambda u: pos[id(u)])
    members = {id(sink): sink}
    for u in direct:
        m, depth = u, 0
        while m is not sink:
            if depth >= DIAMOND_DEPTH or _kind(m) not in ("elemwise", "broadcast") or id(m) in outputs \
                    or uses.get(id(m), 0) != 1:
                return None
            members[id(m)] = m
            m = users[id(m)][0]
            depth += 1
    if _kind(sink) not in ("elemwise", "broadcast"):
        return None
    # every edge out of a and out of a chain node lands inside the diamond
    edges = sum(1 for m in members.values() for x in m.args if x is a)
    if edges != uses.get(id(a), 0):
        return None
    return sorted(members.values(), key=lambda m: pos[id(m)])


SCALE_INTO_CONV = True     # off: the squeeze-excite multiply keeps a kernel of its own (A/B)


def _takes_channel_scale(n, uses, outputs, group_of):
    """conv2d(multiply(x, s), W) with s per channel (1, C, 1, 1), constant W and the
    multiply read by nothing else: the squeeze-excite scaling. The multiply moves into the
    conv's kernel, which reads x as it is and scales its packed weights by s once per call
    (strategy.conv2d_fast), instead of a kernel of its own that writes the scaled image for
    the conv to read back."""
    if not SCALE_INTO_CONV or n.op != "nn.conv2d" or n.attrs.get("groups") != 1 \
            or not isinstance(n.args[1], Const):
        return False
    a = n.args[0]
    if not isinstance(a, Call) or a.op != "multiply" or uses.get(id(a), 0) != 1 or id(a) in outputs \
            or id(a) not in group_of or group_of[id(a)].last is not a:
        return False
    shape = a.type.shape
    if len(shape) != 4 or shape[0] != 1 or a.type.dtype != "float32":   # batch 1: a scale per input channel
        return False
    # the conv scales its weights once per call: worth it while they are fewer than the
    # image's pixels per channel (measured: 240->40 at 28x28 gained 15%, 1152->192 at 7x7
    # lost 18%)
    co, _, kh, kw = n.args[1].type.shape
    if co * kh * kw > shape[2] * shape[3]:
        return False
    scale = (shape[0], shape[1], 1, 1)
    kinds = sorted(tuple(x.type.shape) == tuple(shape) for x in a.args)
    return kinds == [False, True] and any(tuple(x.type.shape) == scale for x in a.args)


def _split_off_last(a, group_of, groups):
    """Moves `a`, the last node of its group, into a new group that will take a conv."""
    g = group_of[id(a)]
    if len(g.nodes) == 1:
        g.master_kind = "anchor"
        return g
    g.nodes.pop()
    ng = _Group(a)
    ng.master_kind = "anchor"
    groups.append(ng)
    group_of[id(a)] = ng
    return ng


def fuse_ops(mod: Module) -> Module:
    """Groups operators into kernels: elementwise and broadcast operators join their
    producer's group (conv/dense/matmul + bias + activation + residual add become one
    kernel), injective operators chain together, reductions and opaque operators end a
    group. Each group becomes a primitive function that @main calls."""
    fn = mod.main
    if any(isinstance(n.op, Function) for n in fn.nodes()):
        return mod
    uses = use_counts(fn)
    group_of: Dict[int, _Group] = {}
    groups: List[_Group] = []
    nodes = fn.nodes()
    users = _users(nodes)
    outputs = {id(o) for o in fn.outputs}
    pos = {id(n): i for i, n in enumerate(nodes)}
    pending: Dict[int, _Group] = {}     # diamond members -> the group they will join
    alone = concat_prefix.sealed(nodes)  # concatenations that will be views of a buffer
    for n in nodes:
        kind = _kind(n)
        target = pending.pop(id(n), None)
        if target is None and _takes_channel_scale(n, uses, outputs, group_of) and id(n.args[0]) not in alone:
            target = _split_off_last(n.args[0], group_of, groups)
        for a in n.args if target is None and id(n) not in alone else ():
            if isinstance(a, Call) and uses.get(id(a), 0) == 1 and id(a) not in alone:
                g = group_of[id(a)]
                if g.last is a and g.accepts(kind):
                    target = g
                    break
        if target is None:
            target = _Group(n)
            groups.append(target)
        else:
            target.nodes.append(n)
        group_of[id(n)] = target
        if uses.get(id(n), 0) > 1 and id(n) not in outputs and id(n) not in alone:
            members = _diamond(n, users, uses, outputs, pos)
            # a node already promised to another group (two diamonds sharing a sink) stays out
            if members and all(target.accepts(_kind(m)) and id(m) not in pending for m in members):
                for m in members:
                    pending[id(m)] = target
    # build primitive functions and the new main
    memo: Dict[int, Expr] = {}
    funcs: Dict[str, Function] = {}
    by_text: Dict[str, Function] = {}
    from .text import print_function
    pos = {id(n): i for i, n in enumerate(fn.nodes())}
    groups.sort(key=lambda g: pos[id(g.last)])   # a group runs after every group it reads
    for g in groups:
        members = {id(n) for n in g.nodes}
        params, outer_args, pmap = [], [], {}
        for n in g.nodes:
            for a in n.args:
                if id(a) in members or id(a) in pmap:
                    continue
                p = Var(f"p{len(params)}", a.type)
                pmap[id(a)] = p
                params.append(p)
                outer_args.append(memo.get(id(a), a))
        inner: Dict[int, Expr] = {}
        for n in g.nodes:
            args = [inner[id(a)] if id(a) in inner else pmap[id(a)] for a in n.args]
            inner[id(n)] = Call(n.op, args, n.attrs, n.span)
        base = "fused_" + "_".join(dict.fromkeys(n.op.replace("nn.", "") for n in g.nodes))
        f = Function(base, params, [inner[id(g.last)]], {"primitive": 1})
        text = print_function(f).split("(", 1)[1]
        if text in by_text:
            f = by_text[text]
        else:
            name, k = base, 1
            while name in funcs:
                name = f"{base}_{k}"
                k += 1
            f.name = name
            funcs[name] = f
            by_text[text] = f
        call = Call(f, outer_args, {}, g.last.span)
        memo[id(g.last)] = call
    outs = [memo.get(id(o), o) for o in fn.outputs]
    return Module(Function(fn.name, fn.params, outs, fn.attrs), mod.info)


def optimize(mod: Module, fuse: bool = True) -> Module:
    """The standard pipeline; `fuse=False` stops before operator fusion."""
    if not isinstance(mod, Module):
        raise GraphError(f"optimize: expected a tdsl.graph.Module, got {type(mod).__name__}")
    for p in (simplify, fold_constants, fold_batch_norm, simplify, fold_constants, sink_reshapes, simplify,
              eliminate_common_subexpr, eliminate_dead_code):
        mod = p(mod)
    if fuse:
        mod = fuse_ops(mod)
    return mod
