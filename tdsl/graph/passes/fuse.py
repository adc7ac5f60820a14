"""Operator fusion: groups of nodes become primitive functions, one kernel each."""
from __future__ import annotations

from typing import Dict, List


from ..ir import Call, Const, Expr, Function, Module, Var
from ..ir.registry import get_op
from ..ir.text import print_function
from . import concat_prefix
from .rewrite import use_counts


# ---------------------------------------------------------------------------- fusion

def _kind(n):
    return get_op(n.op).kind


# Reductions along axes (ONNX Reduce*) that a group may compute in the middle: their input
# computed in the same loop nest and their result read by an elementwise epilogue (the RMS
# norm's mean(x * x), 1 / sqrt(. + eps), x * . as one kernel). Pools, scans, top-k and the
# other "reduce" operators have strategies that read their input from memory and end a group.
ROW_REDUCTIONS = frozenset(("sum", "mean", "max", "min", "prod"))


def _master(n):
    return "row_reduce" if n.op in ROW_REDUCTIONS else _kind(n)


class _Group:
    def __init__(self, first):
        self.nodes = [first]
        self.master_kind = _master(first)

    @property
    def last(self):
        return self.nodes[-1]

    def accepts(self, kind, op=None):
        mk = self.master_kind
        if mk == "row_reduce":
            # not a layout conversion: a CNN's global pool over a blocked image has its
            # own strategy (cpu/squeeze.py), which takes no epilogue
            return kind in ("elemwise", "broadcast") and not str(op).startswith("layout.")
        if kind in ("elemwise", "broadcast"):
            return mk in ("elemwise", "broadcast", "injective", "anchor")
        if kind == "injective":
            return mk in ("elemwise", "broadcast", "injective")
        # an elementwise chain is inlined into the reduction that reads it (one reduction a
        # group: its epilogue may not feed a second one)
        return op in ROW_REDUCTIONS and mk in ("elemwise", "broadcast")

    def add(self, n):
        self.nodes.append(n)
        if n.op in ROW_REDUCTIONS:
            self.master_kind = "row_reduce"


def _users(nodes):
    out: Dict[Expr, List[Call]] = {}
    for n in nodes:
        for a in n.args:
            lst = out.setdefault(a, [])
            if not lst or lst[-1] is not n:
                lst.append(n)
    return out


DIAMOND_DEPTH = 8


def _passes(m, rows):
    """Whether a diamond's chain may go on through `m`: an elementwise/broadcast node, or
    with `rows` a row reduction (a layer norm's mean((x - mean(x))^2) on the way from
    x - mean(x) to the division by its root)."""
    return _kind(m) in ("elemwise", "broadcast") or rows and m.op in ROW_REDUCTIONS


def _chain(u, users, uses, outputs, rows=False):
    """`u` and the nodes below it along single uses, while each is elementwise/broadcast
    (or, with `rows`, a row reduction) and not a graph output: the path a value of a
    diamond takes to where it may meet the others (at most DIAMOND_DEPTH steps, the last
    node reached included)."""
    path = [u]
    while len(path) <= DIAMOND_DEPTH and _passes(u, rows) and u not in outputs and uses.get(u, 0) == 1:
        u = users[u][0]
        path.append(u)
    return path


def _diamond(a, users, uses, outputs, pos, rows=False):
    """The nodes of an elementwise diamond below `a`, or None: every use of `a` is by
    chains of single-use elementwise/broadcast nodes that meet in one elementwise node
    (x * sigmoid(x), x * hardsigmoid(x), x * x, gelu's chain). They can join a's group:
    nothing outside reads a or the chains, so the group stays one kernel with one output
    (SiLU after every conv of efficientnet would otherwise cost a memory pass each).
    The chains meet in the first node all of them reach, which need not read `a` itself
    (the tanh GELU of ALBERT and GPT-2 reads x first in 0.5 * x and last in x + c * x^3,
    and the two meet in the product after the tanh)."""
    direct = users.get(a, [])
    if not direct:
        return None
    paths = [_chain(u, users, uses, outputs, rows) for u in direct]
    common = set(paths[0]).intersection(*paths[1:])
    if not common:
        return None
    sink = min(common, key=lambda m: pos[m])
    members = dict.fromkeys([sink])     # in order, once each: two chains may meet early
    for path in paths:
        for m in path[:path.index(sink)]:
            if not _passes(m, rows) or m in outputs or uses.get(m, 0) != 1:
                return None
            members[m] = None
    if _kind(sink) not in ("elemwise", "broadcast"):
        return None
    # every edge out of a and out of a chain node lands inside the diamond
    edges = sum(1 for m in members for x in m.args if x is a)
    if edges != uses.get(a, 0):
        return None
    return sorted(members, key=lambda m: pos[m])


SCALE_INTO_CONV = True     # off: the squeeze-excite multiply keeps a kernel of its own (A/B)


def _takes_channel_scale(n, uses, outputs, group_of):
    """conv2d(multiply(x, s), W) with s per channel (1, C, 1, 1), constant W and the
    multiply read by nothing else: the squeeze-excite scaling. The multiply moves into the
    conv's kernel, which reads x as it is and scales its packed weights by s once per call
    (strategy/cpu/conv_choice.on_input), instead of a kernel of its own that writes the scaled image for
    the conv to read back."""
    if not SCALE_INTO_CONV or n.op not in ("nn.conv2d", "nn.conv2d_blocked") or n.attrs.get("groups") != 1 \
            or not isinstance(n.args[1], Const) or (n.op == "nn.conv2d_blocked" and not n.attrs["in_blocked"]):
        return False
    a = n.args[0]
    if not isinstance(a, Call) or a.op != "multiply" or uses.get(a, 0) != 1 or a in outputs \
            or a not in group_of or group_of[a].last is not a:
        return False
    shape = a.type.shape
    # batch 1: a scale per input channel ((1, C/bn, 1, 1, bn) for a blocked image); a
    # symbolic batch: per image too, the conv's weights scaled per image
    if len(shape) != (5 if n.op == "nn.conv2d_blocked" else 4) or isinstance(shape[0], int) and shape[0] != 1 \
            or a.type.dtype != "float32":
        return False
    # the conv scales its weights once per call: worth it while they are fewer than the
    # image's pixels per channel (with more, scaling the weights costs more than the image)
    co, _, kh, kw = n.args[1].type.shape
    if co * kh * kw > shape[2] * shape[3]:
        return False
    scale = (shape[0], shape[1], 1, 1) + tuple(shape[4:])
    kinds = sorted(tuple(x.type.shape) == tuple(shape) for x in a.args)
    return kinds == [False, True] and any(tuple(x.type.shape) == scale for x in a.args)


def _producer_group(n, kind, uses, alone, group_of):
    """The group of an operand of `n` that `n` joins: the first that accepts it, but a
    group that is one reshape (a view of its input, no kernel once memory is planned) only
    when no other does, so that a residual add of a projection's output and a reshaped
    hidden state (sink_reshapes) joins the projection's kernel."""
    found = []
    for a in n.args:
        if isinstance(a, Call) and uses.get(a, 0) == 1 and a not in alone:
            g = group_of[a]
            if g.last is a and g.accepts(kind, n.op):
                found.append(g)
    views = [g for g in found if len(g.nodes) == 1 and g.last.op == "reshape"]
    return next((g for g in found if g not in views), found[0] if found else None)


def _split_off_last(a, group_of, groups):
    """Moves `a`, the last node of its group, into a new group that will take a conv."""
    g = group_of[a]
    if len(g.nodes) == 1:
        g.master_kind = "anchor"
        return g
    g.nodes.pop()
    ng = _Group(a)
    ng.master_kind = "anchor"
    groups.append(ng)
    group_of[a] = ng
    return ng


def fuse_ops(mod: Module) -> Module:
    """Groups operators into kernels: elementwise and broadcast operators join their
    producer's group (conv/dense/matmul + bias + activation + residual add become one
    kernel), injective operators chain together; a row reduction (ROW_REDUCTIONS) takes an
    elementwise group as its input and elementwise operators as its epilogue (and a
    diamond through a second reduction: a layer norm's x - mean(x)), other
    reductions and opaque operators end a group. Each group becomes a primitive function
    that @main calls."""
    fn = mod.main
    if any(isinstance(n.op, Function) for n in fn.nodes()):
        return mod
    uses = use_counts(fn)
    group_of: Dict[Call, _Group] = {}
    groups: List[_Group] = []
    nodes = fn.nodes()
    users = _users(nodes)
    outputs = set(fn.outputs)
    pos = {n: i for i, n in enumerate(nodes)}
    pending: Dict[Call, _Group] = {}     # diamond members -> the group they will join
    alone = concat_prefix.sealed(nodes)  # concatenations that will be views of a buffer
    for n in nodes:
        kind = _kind(n)
        target = pending.pop(n, None)
        if target is None and _takes_channel_scale(n, uses, outputs, group_of) and n.args[0] not in alone:
            target = _split_off_last(n.args[0], group_of, groups)
        if target is None and n not in alone:
            target = _producer_group(n, kind, uses, alone, group_of)
        if target is None:
            target = _Group(n)
            groups.append(target)
        else:
            target.add(n)
        group_of[n] = target
        if uses.get(n, 0) > 1 and n not in outputs and n not in alone:
            rows = target.master_kind == "row_reduce"
            members = _diamond(n, users, uses, outputs, pos, rows)
            # a node already promised to another group (two diamonds sharing a sink) stays
            # out; in a reduction's kernel a diamond may hold a reduction of its own
            if members and all((target.accepts(_kind(m), m.op) or rows and m.op in ROW_REDUCTIONS)
                               and m not in pending for m in members):
                for m in members:
                    pending[m] = target
    # build primitive functions and the new main
    memo: Dict[Call, Expr] = {}
    funcs: Dict[str, Function] = {}
    by_text: Dict[str, Function] = {}
    pos = {n: i for i, n in enumerate(fn.nodes())}
    groups.sort(key=lambda g: pos[g.last])   # a group runs after every group it reads
    for g in groups:
        members = set(g.nodes)
        params, outer_args, pmap = [], [], {}
        for n in g.nodes:
            for a in n.args:
                if a in members or a in pmap:
                    continue
                p = Var(f"p{len(params)}", a.type)
                pmap[a] = p
                params.append(p)
                outer_args.append(memo.get(a, a))
        inner: Dict[Call, Expr] = {}
        for n in g.nodes:
            args = [inner[a] if a in inner else pmap[a] for a in n.args]
            inner[n] = Call(n.op, args, n.attrs, n.span)
        base = "fused_" + "_".join(dict.fromkeys(n.op.replace("nn.", "").replace(".", "_") for n in g.nodes))
        f = Function(base, params, [inner[g.last]], {"primitive": 1})
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
        memo[g.last] = call
    outs = [memo.get(o, o) for o in fn.outputs]
    return Module(Function(fn.name, fn.params, outs, fn.attrs), mod.info)
