"""Attention as one operator: the exporters' per-head MatMul(Q, K^T) -> [Mul/Div by a
scalar] -> [Add mask] -> Softmax -> [Where(IsNaN(p), 0, p)] -> MatMul(P, V) becomes
`nn.attention(q, kt, v[, mask])` for a CPU target (strategy/cpu/attention.py computes it
per block of query rows, the block's scores kept in cache).

Unfused, the scores of a long sequence (whisper: 4 heads x 1500 x 1500 floats, 36 MB) go
through memory three times: written by Q K^T, read and written by the softmax, read by
P V. Only where the keys are many does that traffic dominate; over a short sequence the
three kernels' own schedules are as fast (keys_to_fuse). A symbolic size (a dynamic batch or
sequence) is fused when the keys can reach that many: one kernel serves every size, and
the fused kernel at a short sequence costs about what the three do."""
from __future__ import annotations

import math
from typing import Optional

from ...target import as_target
from ..ir import Call, Const, Module
from .rewrite import rewrite, same, use_counts

# keys (scores per query row) from which the fused operator pays, where set (tests and
# bench/attention.py force one); None: keys_to_fuse(target)
MIN_KEYS = None


def keys_to_fuse(target) -> int:
    """Keys from which fusing pays on `target`: where one head's scores (keys x keys
    float32) fill the core's L2, so the three kernels' passes over them go to L3 (512 keys
    with Zen 5's 1 MB, 256 with Haswell's 256 KB). Below that, whole networks (bert,
    distilbert, gpt2, t5 encoder at 1-8 x 64-256 tokens, bench/attention.py --cpu) ran
    fused as fast as unfused, within the noise, on Zen 5: the scores stay in L2."""
    return max(1, math.isqrt(as_target(target).cache_bytes(2) // 4))


def _float4(t):
    return t.ndim == 4 and t.dtype == "float32"


def _may_reach(n, bounds, min_keys):
    """Whether `n` keys (an int or an expression of size variables) can be `min_keys`
    or more: a number is compared, an expression by the upper bounds declared for its
    variables (a variable with none is unbounded)."""
    if isinstance(n, int):
        return n >= min_keys
    hi = {}
    for v in n.free_symbols:
        top = (bounds.get(v.name) or (1, None))[1]
        if top is None:
            return True
        hi[v] = top
    # dimensions grow with their variables (sizes, products, windows)
    return int(n.subs(hi)) >= min_keys


def _scalar(e):
    """The value of a one-element float constant, else None."""
    if isinstance(e, Const) and e.data.size == 1 and e.data.dtype.kind == "f":
        return float(e.data.reshape(-1)[0])
    return None


def _match(n, uses, min_keys, bounds):
    """(q, kt, v, mask or None, attrs) of the attention ending in matmul `n`, else None."""
    if n.op != "nn.matmul" or not all(_float4(a.type) for a in n.args):
        return None
    p, v = n.args
    zero_nan = False
    if isinstance(p, Call) and p.op == "where" and uses.get(p) == 1:
        c, zero, p2 = p.args
        if not (isinstance(c, Call) and c.op == "isnan" and c.args[0] is p2 and _scalar(zero) == 0.0
                and uses.get(c) == 1 and uses.get(p2) == 2):
            return None
        p, zero_nan = p2, True
    elif uses.get(p) != 1:
        return None
    if not (isinstance(p, Call) and p.op == "nn.softmax" and p.attrs["axis"] == 3):
        return None
    z, mask, scale = p.args[0], None, 1.0
    if isinstance(z, Call) and z.op == "add" and uses.get(z) == 1:
        a, b = z.args
        z, mask = (a, b) if isinstance(a, Call) and a.op in ("nn.matmul", "multiply", "divide") else (b, a)
        if mask.type.dtype != "float32" or mask.type.ndim > 4:
            return None
    if isinstance(z, Call) and z.op in ("multiply", "divide") and uses.get(z) == 1:
        a, b = z.args
        k = _scalar(b)
        if k is None and z.op == "multiply":
            a, k = b, _scalar(a)
        if k is None or k == 0.0:
            return None
        z, scale = a, (k if z.op == "multiply" else 1.0 / k)
    if not (isinstance(z, Call) and z.op == "nn.matmul" and uses.get(z) == 1):
        return None
    q, kt = z.args
    if not (_float4(q.type) and _float4(kt.type)) or not (q.type.shape[:2] == kt.type.shape[:2] == v.type.shape[:2]):
        return None
    if not _may_reach(kt.type.shape[3], bounds, min_keys):
        return None
    if mask is not None and not _broadcasts(mask.type.shape, z.type.shape):
        return None
    return q, kt, v, mask, {"scale": scale, "zero_nan": zero_nan}


def _broadcasts(mask, scores):
    """Whether a mask of shape `mask` broadcasts to the scores' 4-D shape: each of its
    dimensions (aligned from the right) is 1 or the scores' own."""
    return all(m == 1 or m == d for m, d in zip(reversed(mask), reversed(scores)))


def fuse_attention(mod: Module, min_keys: Optional[int] = None, target="llvm") -> Module:
    """`mod` with each attention of at least `min_keys` keys (MIN_KEYS where set, else
    keys_to_fuse(target)) as one `nn.attention`."""
    least = min_keys if min_keys is not None else MIN_KEYS if MIN_KEYS is not None else keys_to_fuse(target)
    uses = use_counts(mod.main)
    found = {}
    for n in mod.main.nodes():
        m = _match(n, uses, least, mod.info.get("dim_bounds") or {})
        if m is not None:
            found[n] = m
    if not found:
        return mod
    new = {}

    def visit(n, args):
        if n in found:
            q, kt, v, mask, attrs = found[n]
            ins = [new.get(x, x) for x in (q, kt, v) + ((mask,) if mask is not None else ())]
            out = Call("nn.attention", ins, attrs, n.span)
        else:
            out = same(n, args)
        new[n] = out
        return out
    # the replaced matmul, softmax and scaling are read by nothing else: they drop out
    return rewrite(mod, visit)
