"""Attention as one operator: the exporters' per-head MatMul(Q, K^T) -> [Mul/Div by a
scalar] -> [Add mask] -> Softmax -> [Where(IsNaN(p), 0, p)] -> MatMul(P, V) becomes
`nn.attention(q, kt, v[, mask])` for a CPU target (strategy/cpu/attention.py computes it
per block of query rows, the block's scores kept in cache).

Unfused, the scores of a long sequence (whisper: 4 heads x 1500 x 1500 floats, 36 MB) go
through memory three times: written by Q K^T, read and written by the softmax, read by
P V. Only where the keys are many does that traffic dominate; over a short sequence the
three kernels' own schedules are as fast (MIN_KEYS). Sizes that are not numbers (a
dynamic sequence) keep the three kernels."""
from __future__ import annotations

from typing import Optional

import numpy as np

from ..ir import Call, Const, Module
from .rewrite import rewrite, same, use_counts

# keys (scores per query row) from which the fused operator pays: at 128 (bert's zoo
# sequence) the three kernels are as fast, their scores in L2 anyway
MIN_KEYS = 512


def _static4(t):
    return t.ndim == 4 and all(isinstance(d, int) for d in t.shape) and t.dtype == "float32"


def _scalar(e):
    """The value of a one-element float constant, else None."""
    if isinstance(e, Const) and e.data.size == 1 and e.data.dtype.kind == "f":
        return float(e.data.reshape(-1)[0])
    return None


def _match(n, uses, min_keys):
    """(q, kt, v, mask or None, attrs) of the attention ending in matmul `n`, else None."""
    if n.op != "nn.matmul" or not all(_static4(a.type) for a in n.args):
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
        if mask.type.dtype != "float32" or mask.type.ndim > 4 or not all(isinstance(d, int) for d in mask.type.shape):
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
    if not (_static4(q.type) and _static4(kt.type)) or not (q.type.shape[:2] == kt.type.shape[:2] == v.type.shape[:2]):
        return None
    if kt.type.shape[3] < min_keys:
        return None
    if mask is not None and len(np.broadcast_shapes(mask.type.shape, z.type.shape)) != 4:
        return None
    return q, kt, v, mask, {"scale": scale, "zero_nan": zero_nan}


def fuse_attention(mod: Module, min_keys: Optional[int] = None) -> Module:
    """`mod` with each attention of at least `min_keys` keys (MIN_KEYS) as one
    `nn.attention`."""
    min_keys = MIN_KEYS if min_keys is None else min_keys
    uses = use_counts(mod.main)
    found = {}
    for n in mod.main.nodes():
        m = _match(n, uses, min_keys)
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
