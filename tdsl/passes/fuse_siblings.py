"""fuse_sibling_loops: adjacent loop nests marked `pragma(axis, "fuse_siblings")` that run
over the same range and do not depend on each other become one nest (Halide's
`compute_with`).

Two stages computed at one place over the same region (a Harris detector's Ix and Iy, at a
tile of the output) each read the same input rows; one after the other, each loads them
again. Fused, one iteration computes both, and the loads they share are made once: Ix and
Iy read 12 input vectors between them but only 8 distinct ones (in cache, Harris 0.84-0.88
of the time unfused). Inside the fused loop the two bodies are zipped the same way as long
as their statements are loops of matching ranges (the vector loops and the tails), and
otherwise follow each other.

Legal when neither nest reads or writes what the other writes: interleaving their
iterations then changes nothing. Runs before loop partitioning and storage flattening, on
the loops as the schedule made them.
"""
from __future__ import annotations

from .. import arith
from ..ir import stmt as S
from ..ir.visitor import Mutator, buffers_accessed, substitute

PRAGMA = "fuse_siblings"


def _same_range(a, b) -> bool:
    return isinstance(a, S.For) and isinstance(b, S.For) and a.kind is b.kind and \
        a.kind in (S.ForKind.SERIAL, S.ForKind.UNROLLED, S.ForKind.VECTORIZED) and \
        arith.equal(a.min, b.min) and arith.equal(a.extent, b.extent)


def _independent(a, b) -> bool:
    ra, wa = buffers_accessed(a)
    rb, wb = buffers_accessed(b)
    return not (wa & (rb | wb)) and not (wb & ra)


def _fuse(a, b):
    body_b = substitute(b.body, {b.var: a.var})
    return S.For(a.var, a.min, a.extent, a.kind, _zip(a.body, body_b), a.thread_tag,
                 a.pragmas)


def _zip(x, y):
    xs = list(x.stmts) if isinstance(x, S.SeqStmt) else [x]
    ys = list(y.stmts) if isinstance(y, S.SeqStmt) else [y]
    # prefetches (loops of them) lead a body and change no value: both bodies' go first,
    # a region both ask for once, and the rest is zipped
    fx, xs = _leading_prefetches(xs)
    fy, ys = _leading_prefetches(ys)
    fetches = fx + [f for f in fy if not any(_same_text(f, g) for g in fx)]
    if len(xs) == len(ys) and all(_same_range(p, q) for p, q in zip(xs, ys)):
        return S.seq(*fetches, *[_fuse(p, q) for p, q in zip(xs, ys)])
    return S.seq(*fetches, *xs, *ys) if fetches else S.seq(x, y)


def _is_prefetch(s) -> bool:
    while isinstance(s, S.For):
        s = s.body
    return isinstance(s, S.Prefetch)


def _leading_prefetches(stmts):
    k = 0
    while k < len(stmts) and _is_prefetch(stmts[k]):
        k += 1
    return stmts[:k], stmts[k:]


def _same_text(a, b) -> bool:
    return str(a) == str(b)


def _marked(s) -> bool:
    return isinstance(s, S.For) and any(k == PRAGMA for k, _ in s.pragmas)


class _FuseSiblings(Mutator):
    def visit_SeqStmt(self, s):
        out = []
        for x in (self.visit(x) for x in s.stmts):
            prev = out[-1] if out else None
            if _marked(prev) and _marked(x) and _same_range(prev, x) and _independent(prev, x):
                out[-1] = _fuse(prev, x)
            else:
                out.append(x)
        return S.seq(*out)


def fuse_sibling_loops(func: S.PrimFunc) -> S.PrimFunc:
    body = _FuseSiblings().visit(func.body)
    return func if body is func.body else func.with_body(body)
