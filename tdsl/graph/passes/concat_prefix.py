"""Concatenations that are prefixes of one another share one buffer (DenseNet's blocks).

A dense block concatenates, before each layer, the block's input with every feature map
made so far: concat(x0, f1), concat(x0, f1, f2), ... concat(x0, f1, ..., fn). At batch 1
along the channels each of them is a prefix of the last one's memory. So the last one
(the family's owner) gets a buffer, every input is computed straight into its slice, and
every concatenation is a view of the owner's first bytes: no concatenation copies
anything (each would copy all features so far: quadratic work in the block's depth) and
no kernel is compiled for them. Fusion keeps these concatenations alone in their groups
(`sealed`), so that the batch norm after each one reads the view.
"""
from __future__ import annotations

from typing import Dict, List

from ..ir import Call, Function
from ..ir.dims import evaluate


def _body(n):
    """The concatenate call of `n` (a raw call, or a group whose body is one concat)."""
    if isinstance(n.op, Function):
        body = n.op.nodes()
        if len(body) != 1 or body[0].op != "concatenate" or list(body[0].args) != list(n.op.params):
            return None
        return body[0]
    return n if n.op == "concatenate" else None


def leading_ones(dims, sizes=None) -> bool:
    """Whether every dimension in `dims` is 1: at `sizes` ({size variable: int}) where
    given; without them a symbolic dimension is not taken for 1."""
    if sizes is None:
        return all(d == 1 for d in dims)
    return all(evaluate(d, sizes) == 1 for d in dims)


def _eligible(n, sizes=None):
    c = _body(n)
    if c is None or len(n.args) < 2:
        return False
    axis = c.attrs["axis"] % n.type.ndim
    return leading_ones(n.type.shape[:axis], sizes) and all(isinstance(a, Call) for a in n.args) \
        and all(a.type.dtype == n.type.dtype for a in n.args)


def families(nodes: List[Call], sizes=None) -> Dict[Call, Call]:
    """{concat: its family's owner} for every concatenation whose inputs begin the
    inputs of another one (same axis and dtype), the owners included. Families have at
    least two members; a concatenation in none is left out. `sizes`: the sizes of a call
    of a network with symbolic sizes. Fusion (`sealed`) asks without them: a concatenation
    with a symbolic batch is fused with its batch norm, as at batch 2 and up, where the
    fused copy costs one pass and a shared buffer would need a copy and a pass of its own;
    at batch 1 the batch norm's pass over the shared prefix costs what the fused copy
    does, so nothing is lost there."""
    cands = [n for n in nodes if _eligible(n, sizes)]
    key = {n: (_body(n).attrs["axis"] % n.type.ndim, n.type.dtype) for n in cands}
    args = {n: n.args for n in cands}
    owner: Dict[Call, Call] = {}
    for n in sorted(cands, key=lambda m: -len(m.args)):        # longest first: the owners
        if n in owner:
            continue
        members = [m for m in cands if m not in owner and key[m] == key[n]
                   and args[n][:len(m.args)] == args[m]]
        if len(members) >= 2:
            for m in members:
                owner[m] = n
    return owner


def sealed(nodes: List[Call]) -> set:
    """The raw concatenations fusion must keep alone."""
    return set(families(nodes))
