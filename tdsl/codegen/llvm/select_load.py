"""A choice between reads of different buffers as one read from a chosen address.

A concatenation is defined elementwise: `select(c < 64, x0[i0], select(c < 96, x1[i1],
...))`, each `i_k` the flat index of the same element relative to input k (`b * C_k*H*W +
(c - off_k)*H*W + h*W + w`). Emitted as written, every vector of the output runs a branch
per link of the chain (25 in a DenseNet block) before its load. But the indices differ only
in terms that are the same for every lane (the batch's stride, the channel offset) and the
conditions are uniform too, so the chain is one load from `p + h*W + w`, where `p` is a
chain of scalar `select`s over `x_k + b*C_k*H*W + (c - off_k)*H*W` (pointer arithmetic
only, no read, so the sides not chosen are never touched). Nothing in `p` depends on the
inner loops: LLVM's LICM computes it once per channel, and the body is compiled once
whatever the number of inputs.

The leaves must be loads of distinct buffers other than the function's stack buffers
(those stay plain accesses, which LLVM promotes to registers), and neither the conditions
nor the differing terms may vary across the lanes of a vectorized loop. (In a loop that is
not vectorized nothing is checked: a differing term of the innermost loop's variable would
cost n addresses per element, which no concatenation's index has.)
"""
from __future__ import annotations

from llvmlite import ir

from ...ir import expr as E
from ...ir import stmt as S
from . import memory
from .irscan import expr_vars, has_load, structural_key
from .types import scalar_type

MIN_LEAVES = 2


def _leaves(e, out):
    """The loads at the ends of select tree `e` into `out`; False where a leaf is another
    expression or a condition reads memory."""
    if isinstance(e, E.Select):
        return not has_load(e.cond) and _leaves(e.t, out) and _leaves(e.f, out)
    if isinstance(e, E.BufferLoad) and len(e.indices) == 1:
        out.append(e)
        return True
    return False


def _terms(e, coef, out):
    """`e` as a sum: out[key] = [coefficient, term] (key None: the constant)."""
    if isinstance(e, E.IntImm):
        out.setdefault(None, [0, None])[0] += coef * e.value
    elif isinstance(e, E.Add):
        _terms(e.a, coef, out)
        _terms(e.b, coef, out)
    elif isinstance(e, E.Sub):
        _terms(e.a, coef, out)
        _terms(e.b, -coef, out)
    elif isinstance(e, E.Mul) and isinstance(e.b, E.IntImm):
        _terms(e.a, coef * e.b.value, out)
    elif isinstance(e, E.Mul) and isinstance(e.a, E.IntImm):
        _terms(e.b, coef * e.a.value, out)
    else:
        out.setdefault(structural_key(e), [0, e])[0] += coef
    return out


def _sum(terms, dtype):
    acc = None
    for c, t in terms:
        if c == 0:
            continue
        x = E.IntImm(c, dtype) if t is None else t if c == 1 else E.Mul(t, E.IntImm(c, dtype))
        acc = x if acc is None else E.Add(acc, x)
    return acc if acc is not None else E.IntImm(0, dtype)


def _split(loads, chooser):
    """(common index, {id(load): the rest of its index}): the terms every load's index
    has with the same coefficient, but for those of the variables in `chooser` (the
    conditions'), and each load's other terms. The chosen load's own rest is then the
    start of its row or plane (`b*C_k*H*W + (c - off_k)*H*W`), inside its buffer, so
    that the `inbounds` address of the load is one from an address inside the buffer."""
    forms = [_terms(ld.indices[0], 1, {}) for ld in loads]
    first = forms[0]
    shared = [k for k in first if k is not None and first[k][0] != 0
              and not expr_vars(first[k][1], set()) <= chooser
              and all(k in f and f[k][0] == first[k][0] for f in forms[1:])]
    dtype = loads[0].indices[0].dtype
    common = _sum([first[k] for k in shared], dtype)
    rest = {id(ld): _sum([v for k, v in f.items() if k not in shared], dtype)
            for ld, f in zip(loads, forms)}
    return common, rest


def try_emit(em, e):
    """The value of select tree `e` as one load from a chosen address, or None where it is
    not a choice between reads of distinct buffers at lane-invariant distances."""
    loads = []
    if not _leaves(e, loads) or len(loads) < MIN_LEAVES:
        return None
    bufs = [ld.buffer for ld in loads]
    if len(set(bufs)) != len(bufs) or len({b.dtype for b in bufs}) != 1:
        return None
    if any(b not in em.bufs or isinstance(em.bufs[b], ir.AllocaInstr) for b in bufs):
        return None
    common, rest = _split(loads, _cond_vars(e, set()))
    info = em.vec.info if em.vec is not None else None
    if info is not None and (any(info.is_varying(r) for r in rest.values())
                             or _cond_varies(e, info)):
        return None
    ptr = _address(em, e, rest)
    chosen = S.Buffer(f"{bufs[0].name}.chosen", (), bufs[0].dtype)
    em.bufs[chosen] = ptr
    try:
        return memory.load(em, E.BufferLoad(chosen, (common,)))
    finally:
        del em.bufs[chosen]


def _cond_vars(e, out):
    if isinstance(e, E.Select):
        expr_vars(e.cond, out)
        _cond_vars(e.t, out)
        _cond_vars(e.f, out)
    return out


def _cond_varies(e, info):
    if isinstance(e, E.Select):
        return info.is_varying(e.cond) or _cond_varies(e.t, info) or _cond_varies(e.f, info)
    return False


def _address(em, e, rest):
    if isinstance(e, E.Select):
        c = em.expr(e.cond)
        return em.builder.select(c, _address(em, e.t, rest), _address(em, e.f, rest))
    # no `inbounds`: the sides not chosen may point anywhere, and are never read
    return em.builder.gep(memory.buffer_ptr(em, e.buffer), [em.index(rest[id(e)])],
                          source_etype=scalar_type(e.buffer.dtype, mem=True))
