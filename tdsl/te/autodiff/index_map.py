"""Inverting the index map of one tensor read: scatter turned into gather.

A stage `Y[v] = ... A[f(v, r)] ...` sends its adjoint to `A[f(v, r)]` for every point
(v, r) of its iteration domain. To write the adjoint of A as a gather (a compute over
A's indices `a`), the equations `a = f(v, r)` are solved for the stage's variables:

- each index is affine in the variables after `g // c` and `g % c` (constant c > 0) are
  replaced by a quotient q and a remainder t with `g = c*q + t`, 0 <= t < c (so `A[i // 2]`
  and reshapes invert too);
- equations are eliminated one variable at a time, always solving for the variable with
  the largest domain (the output axes of a convolution rather than its kernel offsets), so
  the variables left unsolved, which become reduction axes of the adjoint, are the small
  ones; a coefficient c != +-1 solves with a floor division and the condition that it
  divides exactly (the input of a strided convolution);
- the domain of each solved variable becomes a condition, as do equations left without a
  variable (`A[i, i]`: a0 == a1).

A read whose index is not affine in this sense (`A[i * j]`, `A[idx[i]]`) raises a TdslError
naming the tensor and the index: its adjoint would be a scatter."""
from __future__ import annotations

import itertools

from ... import arith
from ...errors import TdslError
from ...ir import expr as E
from ...ir.visitor import Mutator, free_vars, substitute

_BIG = 1 << 40          # the rank of a symbolic extent: larger than any constant one
_fresh = itertools.count()


class Unknown:
    """A variable of the equations: a stage axis ("axis"), a reduction axis ("reduce"), or
    the quotient ("quot") / remainder ("rem") of a division in an index."""

    def __init__(self, var, lo, extent, kind):
        self.var, self.lo, self.extent, self.kind = var, lo, extent, kind

    def rank(self):
        ext = self.extent.value if isinstance(self.extent, E.IntImm) else _BIG
        return (ext, {"axis": 3, "reduce": 2, "quot": 1, "rem": 0}[self.kind])


class Inversion:
    """`subst`: every stage variable as an expression of the adjoint's indices and of the
    unknowns left `free` (which the adjoint reduces over); `conds`: when such a point
    exists (every condition must hold)."""

    def __init__(self, subst, conds, free):
        self.subst, self.conds, self.free = subst, conds, free


class _Divisions(Mutator):
    """Replaces `g // c` and `g % c` by fresh unknowns q, t with the equation g = c*q + t."""

    def __init__(self, unknowns, ranges, where):
        self.unknowns, self.ranges, self.where = unknowns, ranges, where
        self.extra = []         # expressions equal to zero
        self.memo = {}

    def _split(self, n):
        c = n.b
        g = self.visit(n.a)
        if not isinstance(c, E.IntImm) or c.value <= 0:
            raise _NotAffine()
        key = (str(g), c.value)
        if key not in self.memo:
            k = next(_fresh)
            q, t = E.Var(f"q{k}", g.dtype), E.Var(f"t{k}", g.dtype)
            lo, hi = arith.bound(g, self.ranges)
            qlo = None if lo is None else arith.simplify(E.FloorDiv(lo, c))
            qext = None if lo is None or hi is None else \
                arith.simplify(E.FloorDiv(hi, c) - E.FloorDiv(lo, c) + 1)
            self.unknowns.append(Unknown(q, qlo, qext, "quot"))
            self.unknowns.append(Unknown(t, E.const(0, g.dtype), c, "rem"))
            self.extra.append(g - c * q - t)
            self.memo[key] = (q, t)
        return self.memo[key]

    def visit_FloorDiv(self, n):
        return self._split(n)[0]

    def visit_FloorMod(self, n):
        return self._split(n)[1]

    def visit_ProducerLoad(self, n):
        raise _NotAffine()


class _NotAffine(Exception):
    pass


def _linear(e, unknowns):
    """{Var: int coefficient}, rest with e == sum(c * var) + rest; raises _NotAffine."""
    coeffs, rest = {}, e
    for u in unknowns:
        lc = arith.linear_coeff(rest, u.var)
        if lc is None:
            raise _NotAffine()
        c, rest = lc
        if c:
            coeffs[u.var] = int(c)
    if free_vars(rest) & {u.var for u in unknowns}:
        raise _NotAffine()
    return coeffs, rest


def _combine(co, rest, k, co2, rest2, k2):
    """k * (co, rest) + k2 * (co2, rest2) with zero coefficients dropped."""
    out = {v: k * co.get(v, 0) + k2 * co2.get(v, 0) for v in set(co) | set(co2)}
    return {v: c for v, c in out.items() if c}, _scale(rest, k) + _scale(rest2, k2)


def _cmp(cls, a, b):
    """A comparison node even between constants (Python's operators fold those)."""
    a, b = E.convert_operands(a, b)
    return cls(a, b)


def _scale(e, k):
    return e if k == 1 else e * k


def invert(indices, stage_vars, targets, ranges, tensor, where):
    """Solves `targets[k] == indices[k]` for the stage's variables (`stage_vars`: Unknowns
    of kind "axis" or "reduce"); `ranges`: their domains. Returns an Inversion."""
    unknowns = list(stage_vars)
    divs = _Divisions(unknowns, ranges, where)
    eqs = []
    for k, (idx, a) in enumerate(zip(indices, targets)):
        try:
            g = divs.visit(idx)
            eqs.append(_linear(g - a, unknowns))
        except _NotAffine:
            raise TdslError(
                f"{where}: the read {tensor.name}[{', '.join(map(str, indices))}] has index "
                f"{k} ({idx}) that is not affine in the stage's variables; its gradient would "
                "be a scatter. Use indices of the form c*i + d (with // and % by constants), "
                "or write this adjoint by hand") from None
    try:
        eqs += [_linear(g, unknowns) for g in divs.extra]
    except _NotAffine:
        raise TdslError(f"{where}: a division in the read of {tensor.name} is not affine")
    by_var = {u.var: u for u in unknowns}
    solved, conds = [], []
    while True:
        best = None
        for n, (co, _) in enumerate(eqs):
            for v, c in co.items():
                key = (by_var[v].rank(), abs(c) == 1, -len(co))
                if best is None or key > best[0]:
                    best = (key, n, v, c)
        if best is None:
            break
        _, n, v, c = best
        co, rest = eqs.pop(n)
        if c < 0:
            co, rest = {w: -d for w, d in co.items()}, -rest
            c = -c
        others = E.const(0, rest.dtype) + rest
        for w, d in co.items():
            if w is not v:
                others = others + w * d
        num = -others
        if c == 1:
            solved.append((v, num))
        else:
            solved.append((v, E.FloorDiv(num, E.const(c, num.dtype))))
            conds.append(_cmp(E.EQ, E.FloorMod(num, E.const(c, num.dtype)), 0))
        new = []
        for co2, rest2 in eqs:
            c2 = co2.get(v, 0)
            new.append(_combine(co2, rest2, c, co, rest, -c2) if c2 else (co2, rest2))
        eqs = new
    for co, rest in eqs:        # no variable left: the indices must agree
        conds.append(_cmp(E.EQ, rest, 0))
    # back-substitute: a solution may use variables solved after it
    final = {}
    for v, val in reversed(solved):
        final[v] = arith.simplify(substitute(val, final))
    free = [u for u in unknowns if u.var not in final]
    for u in free:
        if u.lo is None or u.extent is None:
            raise TdslError(f"{where}: cannot bound the division in the read of "
                            f"{tensor.name}[{', '.join(map(str, indices))}]")
    conds = [substitute(cnd, final) for cnd in conds]
    for v, val in final.items():
        u = by_var[v]
        if u.kind != "quot":      # a quotient is determined by the rest; no own range
            conds.append(_cmp(E.GE, val, u.lo))
            conds.append(_cmp(E.LT, val, u.lo + u.extent))
    return Inversion(final, conds, free)
