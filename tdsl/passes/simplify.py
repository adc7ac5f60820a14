"""simplify: simplify every integer expression of a statement under the loop ranges.

A pure function from IR to IR (`simplify_stmt`, `simplify_func`). It walks statements
keeping the range [min, min + extent) of each enclosing For variable and the value of each
integer LetStmt variable (as the one-point range [value, value], so bounds see through
names without substituting them), and

* simplifies loop bounds, buffer indices, stored values (their integer parts), let values,
  conditions and select conditions with `tdsl.arith.simplify`;
* removes an IfThenElse whose condition is proven true or false (a `likely(c)` hint is
  looked through; a condition that does not fold as written is tried once more with let
  variables replaced by their values);
* uses conditions as facts: each conjunct of a condition is simplified under the ones
  before it (so `likely(jo*16 + ji < 40) and likely(jo < 3)` loses its implied second
  part), and the then-branch sees the enclosing loop ranges narrowed by the condition
  (from k*v + rest < 0, v <= (-rest - 1) // k);
* drops For loops whose extent is provably <= 0, and replaces a loop of extent 1 (other
  than a thread binding) by its body with the variable replaced by the loop min;
* drops LetStmts whose variable is unused, Evaluate of constants, prefetches of provably
  no element (a loop's peeled last iteration), and empty bodies, and flattens nested
  SeqStmts.

An entirely removed body comes back as an empty `SeqStmt(())`.
"""
from __future__ import annotations

from .. import arith
from .. import dtype as dt
from ..ir import expr as E
from ..ir import stmt as S
from ..ir.expr import Range
from ..ir.visitor import Mutator, conjuncts, free_vars, substitute


def _sameconjuncts(parts, cond):
    old = conjuncts(cond)
    return len(old) == len(parts) and all(a is b for a, b in zip(old, parts))


def _is_const(e, v=None):
    return type(e) is E.IntImm and (v is None or e.value == v)


class _Simplify(Mutator):
    def __init__(self, ranges):
        from ..arith import core               # sympy is loaded on first use only
        self.A = core
        self.ranges = dict(ranges or {})
        self.loop_vars = ()
        self.tile_vars = frozenset()      # of vectorized and unrolled loops
        self.lets = {}
        self.scope = self.A.RangeScope(self.ranges)

    # scope handling ----------------------------------------------------------------
    def _push(self, var, rng):
        old = (self.ranges, self.scope)
        self.ranges = dict(self.ranges)
        self.ranges[var] = rng
        self.scope = self.A.RangeScope(self.ranges)
        return old

    def _pop(self, old):
        self.ranges, self.scope = old

    def expr(self, e):
        return self.A.simplify_in(e, self.scope)

    def visit(self, node):
        if node is None:
            return None
        if isinstance(node, E.Expr):
            return self.expr(node)
        return super().visit(node)

    # statements --------------------------------------------------------------------
    def visit_For(self, f):
        lo = self.expr(f.min)
        ext = self.expr(f.extent)
        if (_is_const(ext) and ext.value <= 0) or (
                not _is_const(ext) and arith.can_prove(E.LE(ext, E.IntImm(0, ext.dtype)),
                                                       self.scope)):
            return None
        if _is_const(ext, 1) and f.kind is not S.ForKind.THREAD_BINDING:
            return self.visit(substitute(f.body, {f.var: lo}))
        old = self._push(f.var, Range(lo, ext))
        old_loops, old_tiles = self.loop_vars, self.tile_vars
        self.loop_vars = old_loops + (f.var,)
        if f.kind in (S.ForKind.VECTORIZED, S.ForKind.UNROLLED):
            self.tile_vars = old_tiles | {f.var}
        try:
            body = self.visit(f.body)
        finally:
            self._pop(old)
            self.loop_vars, self.tile_vars = old_loops, old_tiles
        if body is None:
            return None
        if lo is f.min and ext is f.extent and body is f.body:
            return f
        return S.For(f.var, lo, ext, f.kind, body, f.thread_tag, f.pragmas)

    def visit_LetStmt(self, s):
        value = self.expr(s.value)
        old = None
        old_lets = self.lets
        if dt.is_int(s.var.dtype) and dt.is_int(value.dtype):
            try:
                self.A.C.nid_of(value)
                old = self._push(s.var, Range(value, E.IntImm(1, value.dtype)))
                self.lets = dict(self.lets)
                self.lets[s.var] = substitute(value, self.lets)
            except arith.NotIndexExpr:
                pass
        try:
            body = self.visit(s.body)
        finally:
            if old is not None:
                self._pop(old)
            self.lets = old_lets
        if body is None:
            return None
        if s.var not in free_vars(body):
            return body
        if value is s.value and body is s.body:
            return s
        return S.LetStmt(s.var, value, body)

    def _cond(self, c):
        c2 = self.expr(c)
        if not _is_const(c2) and self.lets:
            c3 = self.expr(substitute(c, self.lets))
            if _is_const(c3):
                return c3
        return c2

    def visit_IfThenElse(self, s):
        cond = self._cond(s.cond)
        if _is_const(cond):
            return self.visit(s.then_case if cond.value else s.else_case)
        saved = (self.ranges, self.scope, self.loop_vars)
        try:
            # each conjunct is simplified under the facts of the ones before it, and the
            # then-branch under the facts of all of them
            parts = []
            for i, c in enumerate(conjuncts(cond)):
                c2 = c if i == 0 else self.expr(c)
                if _is_const(c2):
                    if c2.value:
                        continue
                    self.ranges, self.scope, self.loop_vars = saved
                    return self.visit(s.else_case)
                parts.append(c2)
                self._refine(c2)
            if not parts:
                self.ranges, self.scope, self.loop_vars = saved
                return self.visit(s.then_case)
            new_cond = parts[0]
            for c in parts[1:]:
                new_cond = E.And(new_cond, c)
            if _sameconjuncts(parts, cond):
                new_cond = cond
            then = self.visit(s.then_case)
        finally:
            self.ranges, self.scope, self.loop_vars = saved
        other = self.visit(s.else_case)
        if then is None and other is None:
            return None
        if then is None:
            return S.IfThenElse(self.expr(E.Not(new_cond)), other, None)
        if new_cond is s.cond and then is s.then_case and other is s.else_case:
            return s
        return S.IfThenElse(new_cond, then, other)

    def _refine(self, c):
        """Narrow the ranges of enclosing loop variables to what `c` implies: from
        k*v + rest < 0, v <= (-rest - 1) // k (k > 0) or v >= rest // -k + 1 (k < 0).
        A vectorized or unrolled loop under a condition on a run-time size keeps its
        range: narrowed, it would be symbolic, costly to simplify under (sympy), and
        fold nothing, the guard staying as a mask or a branch per lane or copy; what is
        lost is dropping a later conjunct that such a condition implies."""
        if isinstance(c, E.Call) and c.name == "likely" and len(c.args) == 1:
            c = c.args[0]
        if isinstance(c, E.LT):
            d = E.Sub(c.a, c.b)
        elif isinstance(c, E.GT):
            d = E.Sub(c.b, c.a)
        elif isinstance(c, E.LE):
            d = E.Sub(E.Sub(c.a, c.b), E.IntImm(1, c.a.dtype))
        elif isinstance(c, E.GE):
            d = E.Sub(E.Sub(c.b, c.a), E.IntImm(1, c.a.dtype))
        else:
            return
        if not dt.is_int(d.dtype):
            return
        names = free_vars(d)
        vs = [v for v in self.loop_vars if v in names]
        sized = any(v not in self.loop_vars and v not in self.lets for v in names)
        for v in vs:
            lin = arith.linear_coeff(d, v)
            if lin is None or lin[0] == 0:
                continue
            k, rest = lin
            r = self.ranges[v]
            if sized and v in self.tile_vars:
                continue
            one = E.IntImm(1, v.dtype)
            if k > 0:
                hi = E.FloorDiv(E.Sub(E.Sub(E.IntImm(0, v.dtype), rest), one), E.IntImm(k, v.dtype))
                ext = self.expr(E.Min(r.extent, E.Add(E.Sub(hi, r.min), one)))
                new = Range(r.min, ext)
            else:
                lo = E.Add(E.FloorDiv(rest, E.IntImm(-k, v.dtype)), one)
                new_min = self.expr(E.Max(r.min, lo))
                new = Range(new_min, self.expr(E.Sub(E.Add(r.min, r.extent), new_min)))
            self._push(v, new)

    def visit_SeqStmt(self, s):
        out = []
        changed = False
        for x in s.stmts:
            y = self.visit(x)
            if y is not x:
                changed = True
            if y is None:
                continue
            if isinstance(y, S.SeqStmt):
                changed = True
                out.extend(y.stmts)
            else:
                out.append(y)
        if not out:
            return None
        if len(out) == 1:
            return out[0]
        if not changed:
            return s
        return S.SeqStmt(tuple(out))

    def visit_Allocate(self, s):
        body = self.visit(s.body)
        if body is None:
            return None
        return s if body is s.body else S.Allocate(s.buffer, body)

    def visit_Prefetch(self, s):
        n = self.expr(s.extent)
        if isinstance(n, E.IntImm) and n.value <= 0:
            return None
        return S.Prefetch(s.buffer, tuple(self.expr(i) for i in s.indices), n)

    def visit_Evaluate(self, s):
        v = self.expr(s.value)
        if isinstance(v, (E.IntImm, E.FloatImm, E.Var)):
            return None
        return s if v is s.value else S.Evaluate(v)


def simplify_stmt(stmt, ranges=None):
    """`stmt` with its integer expressions simplified under `ranges` ({Var: Range}) and
    the loop ranges it declares; see the module docstring."""
    out = _Simplify(ranges).visit(stmt)
    return S.SeqStmt(()) if out is None else out


def simplify_func(func):
    """simplify_stmt over a PrimFunc body, using the facts in func.attrs['size_ranges']."""
    facts = func.attrs.get("size_ranges", {}) if func.attrs else {}
    return func.with_body(simplify_stmt(func.body, facts))
