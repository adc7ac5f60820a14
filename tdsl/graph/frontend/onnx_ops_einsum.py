"""ONNX Einsum as graph operators: each operand first sums away the indices nobody else
needs, then operands are contracted left to right, each pair as one batched ``nn.matmul``
(batch indices, the left operand's free indices, the right one's, the contracted ones
flattened into the three matmul dimensions) or, with nothing to contract, a broadcasting
``multiply``; a final transpose gives the output order. An index repeated within one
operand (a diagonal, a trace) first becomes one index by a take of the diagonal positions.
An equation that does not parse or fit the operands raises a GraphError naming it.
"""
from __future__ import annotations

import numpy as np

from ...errors import GraphError
from ..ir.dims import product
from ..ir import Const
from .registry import reshape_to, converter


def parse_equation(eq, ranks):
    """Operand index strings and the output string, with each '...' spelled out as
    distinct characters (right-aligned across operands, as numpy broadcasts them)."""
    eq = eq.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(ranks):
        raise GraphError(f"Einsum equation '{eq}' has {len(terms)} operands, the node {len(ranks)}")
    used = set(eq)
    pool = (chr(c) for c in range(0x100, 0x200) if chr(c) not in used)
    n_ell = 0
    for t, r in zip(terms, ranks):
        if "..." in t:
            n_ell = max(n_ell, r - (len(t) - 3))
    ell = "".join(next(pool) for _ in range(n_ell))
    out_terms = []
    for t, r in zip(terms, ranks):
        if "..." in t:
            k = r - (len(t) - 3)
            if k < 0:
                raise GraphError(f"Einsum equation '{eq}': operand '{t}' has rank {r}")
            t = t.replace("...", ell[n_ell - k:] if k else "")
        if not all(ch.isalpha() for ch in t) or len(t) != r:
            raise GraphError(f"Einsum equation '{eq}': operand '{t}' does not fit rank {r}")
        out_terms.append(t)
    if arrow:
        out = rhs.replace("...", ell)
        if not all(ch.isalpha() for ch in out):
            raise GraphError(f"Einsum equation '{eq}': malformed output '{rhs}'")
    else:       # implicit output: the indices seen once, in alphabetical order, after '...'
        counts = {}
        for t in out_terms:
            for ch in t:
                counts[ch] = counts.get(ch, 0) + 1
        out = ell + "".join(sorted(ch for ch, n in counts.items() if n == 1 and ch not in ell))
    if len(set(out)) != len(out):
        raise GraphError(f"Einsum equation '{eq}' repeats an output index")
    for ch in out:
        if not any(ch in t for t in out_terms):
            raise GraphError(f"Einsum equation '{eq}': output index '{ch}' is in no operand")
    return out_terms, out


def _transpose_to(ctx, x, letters, order):
    perm = [letters.index(ch) for ch in order]
    if perm == list(range(len(perm))):
        return x
    return ctx.call("transpose", [x], axes=perm)


def _diagonals(ctx, eq, x, letters):
    """Operand `x` with each index that it repeats (x[i, i] in 'ii->i') taken once."""
    while True:
        dup = next((ch for ch in letters if letters.count(ch) > 1), None)
        if dup is None:
            return x, letters
        p = letters.index(dup)
        q = letters.index(dup, p + 1)
        n, m = x.type.shape[p], x.type.shape[q]
        if n != m:
            raise GraphError(f"Einsum equation '{eq}': index '{dup}' has sizes {n} and {m}")
        rest = [d for d in range(len(letters)) if d not in (p, q)]
        perm = rest + [p, q]
        if perm != list(range(len(perm))):
            x = ctx.call("transpose", [x], axes=perm)
        x = reshape_to(ctx, x, [x.type.shape[d] for d in range(len(rest))] + [n * n])
        x = ctx.call("take", [x, Const(np.arange(n, dtype=np.int64) * (n + 1))], axis=len(rest))
        letters = "".join(letters[d] for d in rest) + dup


def _sum_away(ctx, x, letters, keep):
    axes = [d for d, ch in enumerate(letters) if ch not in keep]
    if not axes:
        return x, letters
    return ctx.call("sum", [x], axis=axes, keepdims=False), "".join(ch for ch in letters if ch in keep)


@converter("Einsum")
def _einsum(ctx, node, ins, attrs):
    eq = attrs["equation"]
    node_in0 = ins[0]
    terms, out = parse_equation(eq, [x.type.ndim for x in ins])
    diag = [_diagonals(ctx, eq, x, t) for x, t in zip(ins, terms)]
    ins, terms = [d[0] for d in diag], [d[1] for d in diag]
    size = {}
    for x, t in zip(ins, terms):
        for ch, s in zip(t, x.type.shape):
            size[ch] = max(size.get(ch, 1), s)
    ops = []
    for x, t in zip(ins, terms):
        want = tuple(size[ch] for ch in t)
        if x.type.shape != want:    # '...' dimensions of size 1 broadcast
            try:
                x = ctx.call("broadcast_to", [x], shape=list(want))
            except GraphError:
                raise GraphError(f"Einsum equation '{eq}': operand {x.type} does not fit the "
                                 f"sizes {dict((ch, size[ch]) for ch in t)}") from None
        ops.append((x, t))
    x, lx = ops[0]
    later = set(out).union(*[set(t) for _, t in ops[1:]])
    x, lx = _sum_away(ctx, x, lx, later)
    for k in range(1, len(ops)):
        y, ly = ops[k]
        later = set(out).union(*[set(t) for _, t in ops[k + 1:]])
        y, ly = _sum_away(ctx, y, ly, later | set(lx))
        x, lx = _sum_away(ctx, x, lx, later | set(ly))
        batch = [ch for ch in lx if ch in ly and ch in later]
        contract = [ch for ch in lx if ch in ly and ch not in later]
        fa = [ch for ch in lx if ch not in ly]
        fb = [ch for ch in ly if ch not in lx]
        dt = x.type.dtype
        if y.type.dtype != dt:
            raise GraphError(f"Einsum equation '{eq}': operand dtypes differ ({dt}, {y.type.dtype})")
        if not contract:
            a = _transpose_to(ctx, x, lx, batch + fa)
            a = reshape_to(ctx, a, [size[ch] for ch in batch + fa] + [1] * len(fb))
            b = _transpose_to(ctx, y, ly, batch + fb)
            b = reshape_to(ctx, b, [size[ch] for ch in batch] + [1] * len(fa) + [size[ch] for ch in fb])
            x = ctx.call("multiply", [a, b])
        else:
            nb, m, kk, n = (product([size[ch] for ch in g]) for g in (batch, fa, contract, fb))
            lead = [nb] if batch else []
            a = reshape_to(ctx, _transpose_to(ctx, x, lx, batch + fa + contract), lead + [m, kk])
            b = reshape_to(ctx, _transpose_to(ctx, y, ly, batch + contract + fb), lead + [kk, n])
            x = reshape_to(ctx, ctx.call("nn.matmul", [a, b]), [size[ch] for ch in batch + fa + fb])
        lx = "".join(batch + fa + fb)
    x, lx = _sum_away(ctx, x, lx, set(out))
    x = _transpose_to(ctx, x, lx, list(out))
    return x if x is not node_in0 else ctx.call("copy", [x])
