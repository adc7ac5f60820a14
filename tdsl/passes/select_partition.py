"""select_partition: one loop per input of a concatenation.

A concatenation along an axis is defined elementwise (TVM's and topi's definition): each
element picks its input with a chain of selects on the axis's index, `select(c < 64,
x0[..], select(c < 96, x1[..], x2[..]))`. Left as written, every vector of the output runs
the whole chain (up to 24 inputs in a DenseNet block), and a consumer the concatenation is
inlined into (DenseNet's batch norm and ReLU) runs it in its loads. But the choice only
depends on the axis's loop: cut at the points where a select changes side, that loop
becomes one loop per input, in each of which every such select has one side, and each
input is copied as a block (TVM's concatenate schedule splits by input; onnxruntime copies
each input with a memcpy).

What is cut: a serial loop of constant range over v whose body holds a select between two
reads of memory chosen by `v` against a constant (`v < K`, `v >= K`, ...). Selects with a
constant side (padding, masks) stay: the pattern is a choice between two tensors.
Vectorized and unrolled loops are left alone (their loops keep constant extents), and the
loops around them are handled instead.

Where the loop is parallel (a cut would fork once per input), or the choice is not a
constant cut of its variable (the batch fused with the channels, `fused % C < K`, as the
auto-scheduler parallelizes a run-time or small batch), the loop keeps its range and its
body is unswitched: the selects that depend on the loop's variable but on no loop inside
it become a chain of `if`s around copies of the body, one per input, so that the choice
is made once per iteration (a channel's plane) rather than per vector.

Either way each input's body is compiled once: n inputs cost LLVM about n loop nests.
"""
from __future__ import annotations

import dataclasses

from ..ir import expr as E
from ..ir import stmt as S
from ..ir.visitor import Mutator, expr_key, free_vars, walk

_KINDS = (S.ForKind.SERIAL, S.ForKind.PARALLEL)
MAX_COPIES = 64     # bodies an unswitched loop may hold: a concatenation of 64 inputs


def _reads(e, memo) -> bool:
    """Whether `e` loads from memory (`memo`: {id: (node, answer)} of the nodes asked about
    so far, as a chain of n selects holds the next n - 1 on its false side; holding the node
    keeps its id from being reused)."""
    key = id(e)
    if key not in memo:
        memo[key] = (e, isinstance(e, E.BufferLoad) or any(_reads(c, memo) for c in _children(e)))
    return memo[key][1]


def _threshold(sel, var, memo):
    """(K, whether the select takes its true side below K) where `sel` chooses between two
    reads by `var` against the constant K, else None."""
    c = sel.cond
    if not (isinstance(c, (E.LT, E.LE, E.GT, E.GE)) and c.a is var and isinstance(c.b, E.IntImm)):
        return None
    if not (_reads(sel.t, memo) and _reads(sel.f, memo)):
        return None
    k = c.b.value + (1 if isinstance(c, (E.LE, E.GT)) else 0)
    return k, isinstance(c, (E.LT, E.LE))


class _Choose(Mutator):
    """Each select of `var` resolved to its side in [lo, hi), where it has one."""

    def __init__(self, var, lo, hi, memo):
        self.var, self.lo, self.hi, self.memo = var, lo, hi, memo

    def visit_Select(self, e):
        th = _threshold(e, self.var, self.memo)
        if th is not None:
            k, below = th
            if self.hi <= k:
                return self.visit(e.t if below else e.f)
            if self.lo >= k:
                return self.visit(e.f if below else e.t)
        return self.generic_visit(e)


def _bound_inside(body):
    out = set()
    walk(body, lambda n: out.add(n.var) if isinstance(n, (S.For, S.LetStmt)) else None)
    return out


def _first_choice(node, var, inner, memo):
    """The condition of the outermost select between two reads that depends on `var` and on
    none of the variables in `inner`, or None (outermost: a chain's first link, so that
    assuming it false leaves the rest of the chain, and assuming it true none of it)."""
    if isinstance(node, E.Select) and _reads(node.t, memo) and _reads(node.f, memo):
        used = free_vars(node.cond)
        if var in used and not used & inner:
            return node.cond
    for child in _children(node):
        c = _first_choice(child, var, inner, memo)
        if c is not None:
            return c
    return None


def _children(node):
    for f in dataclasses.fields(node):
        v = getattr(node, f.name)
        for x in (v if isinstance(v, tuple) else (v,)):
            if isinstance(x, (E.Expr, S.Stmt)) and not isinstance(x, E.Var):
                yield x


class _Assume(Mutator):
    """The selects on `cond` resolved to the side `value` takes."""

    def __init__(self, cond, value):
        self.key, self.value = expr_key(cond), value

    def visit_Select(self, e):
        if expr_key(e.cond) == self.key:
            return self.visit(e.t if self.value else e.f)
        return self.generic_visit(e)


def _unswitch(body, var, inner, memo, copies=1):
    cond = _first_choice(body, var, inner, memo)
    if cond is None or copies >= MAX_COPIES:
        return body
    then = _Assume(cond, True).visit(body)
    other = _unswitch(_Assume(cond, False).visit(body), var, inner, memo, copies + 1)
    return S.IfThenElse(cond, then, other)


class _Cut(Mutator):
    def __init__(self):
        self.memo = {}

    def visit_For(self, f):
        body = self.visit(f.body)
        if f.kind not in _KINDS:
            return f if body is f.body else S.For(f.var, f.min, f.extent, f.kind, body, f.thread_tag, f.pragmas)
        lo = f.min.value if isinstance(f.min, E.IntImm) else None
        hi = lo + f.extent.value if lo is not None and isinstance(f.extent, E.IntImm) else None
        cuts = set()

        def find(n):
            if isinstance(n, E.Select):
                th = _threshold(n, f.var, self.memo)
                if th is not None and lo < th[0] < hi:
                    cuts.add(th[0])
        if hi is not None and f.kind is S.ForKind.SERIAL:
            walk(body, find)
        if not cuts:
            body = _unswitch(body, f.var, _bound_inside(body), self.memo)
            return f if body is f.body else S.For(f.var, f.min, f.extent, f.kind, body, f.thread_tag, f.pragmas)
        points = [lo, *sorted(cuts), hi]
        dt = f.extent.dtype
        return S.seq(*[S.For(f.var, E.const(a, dt), E.const(b - a, dt), f.kind,
                             _Choose(f.var, a, b, self.memo).visit(body), f.thread_tag, f.pragmas)
                       for a, b in zip(points, points[1:])])


def select_partition(func: S.PrimFunc) -> S.PrimFunc:
    return func.with_body(_Cut().visit(func.body))
