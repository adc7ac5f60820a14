"""Vector analysis for vectorized loops: what varies across lanes, and whether a loop can be
emitted as vector IR exactly (`vector_legality`).

A vectorized loop becomes one copy of its body over `<L x T>` values. That is exact when the
body has no inner loops or allocations and no dependence between lanes through memory:
every buffer that is written is accessed at one index only (per lane), and a buffer written
at a lane-invariant index is not read in the body. Otherwise the loop runs serially and
the reason is recorded in the module's notes.
"""
from __future__ import annotations

from typing import Dict, Optional

from ... import arith
from ... import dtype as dt
from ...ir import expr as E
from ...ir import stmt as S
from ...ir.visitor import substitute
from .irscan import expr_vars, iter_children, structural_key

MAX_LANES = 256


def local_linear(e, v):
    """Coefficient of `v` in integer expression `e` if `e` is affine in `v`, else None."""
    if e is v:
        return 1
    if isinstance(e, (E.IntImm, E.Var)):
        return 0
    if isinstance(e, E.Add):
        a, b = local_linear(e.a, v), local_linear(e.b, v)
        return None if a is None or b is None else a + b
    if isinstance(e, E.Sub):
        a, b = local_linear(e.a, v), local_linear(e.b, v)
        return None if a is None or b is None else a - b
    if isinstance(e, E.Mul):
        a, b = local_linear(e.a, v), local_linear(e.b, v)
        if a is None or b is None:
            return None
        if a == 0 and b == 0:
            return 0
        if a == 0 and isinstance(e.a, E.IntImm):
            return e.a.value * b
        if b == 0 and isinstance(e.b, E.IntImm):
            return e.b.value * a
        return None
    if isinstance(e, E.Cast):
        if dt.is_int(e.dtype) and dt.is_int(e.value.dtype) \
                and dt.bits(e.dtype) >= dt.bits(e.value.dtype):
            return local_linear(e.value, v)
    if v in expr_vars(e, set()):
        return None
    return 0


def _arith_linear(e, v, lo, extent):
    """Ask tdsl.arith for the coefficient; None when it cannot tell."""
    from ...arith import linear_coeff
    try:
        res = linear_coeff(e, v, {v: E.Range(lo, extent)})
    except Exception:       # not an index expression (floats, calls): not affine
        return None
    if res is None:
        return None
    c = res[0] if isinstance(res, tuple) else res
    try:
        return int(c)
    except (TypeError, ValueError):
        return None


class Lanes:
    """What varies across the lanes of a vectorized loop: the lane variable and the let
    variables whose values depend on it (with their definitions inlined)."""

    def __init__(self, var: E.Var, lo: E.Expr, lanes: int):
        self.var = var
        self.lo = lo
        self.lanes = lanes
        self.lets: Dict[E.Var, E.Expr] = {}
        self._coeff_cache = {}

    def is_varying(self, e) -> bool:
        fv = expr_vars(e, set())
        return self.var in fv or any(x in self.lets for x in fv)

    def inline(self, e):
        if not self.lets:
            return e
        fv = expr_vars(e, set())
        if not any(x in self.lets for x in fv):
            return e
        return substitute(e, self.lets)

    def add_let(self, var, value):
        self.lets[var] = self.inline(value)

    def index_varies(self, e) -> bool:
        """Whether inlined index `e` differs between lanes (coefficient 0 does not)."""
        return self.is_varying(e) and self.coeff(e) != 0

    def coeff(self, e):
        """Coefficient of the lane var in an inlined index `e`, None if not affine."""
        key = id(e)
        hit = self._coeff_cache.get(key)
        if hit is not None:
            return hit[1]
        c = local_linear(e, self.var)
        if c is None:
            c = _arith_linear(e, self.var, self.lo, E.IntImm(self.lanes, self.var.dtype))
        self._coeff_cache[key] = (e, c)
        return c


class VecCtx:
    """The emitter's state inside a vectorized loop."""

    def __init__(self, lanes_info: Lanes, lo_val, count: int):
        self.info = lanes_info
        self.lo_val = lo_val          # scalar LLVM value of the loop min (lane 0)
        self.count = count
        self.mask = None              # None (all lanes) or <count x i1>


def _lanes_apart(lanes, stores, acc) -> bool:
    """Whether one contiguous store and reads of the same buffer at constant distances
    from it keep the serial loop's values as vectors: a read ahead of the store (the
    serial loop reads those elements before any later iteration writes them) or at least
    a vector behind it (a recursive filter's previous row) sees no lane's new value."""
    if len({a[2] for a in stores}) != 1 or lanes.coeff(stores[0][6]) != 1:
        return False
    w = stores[0][6]
    for a in acc:
        if a[1] or a[2] == stores[0][2]:
            continue
        if lanes.coeff(a[6]) != 1:
            return False
        try:
            d = arith.simplify(a[6] - w)
        except Exception:       # not an index expression: no distance
            return False
        if not isinstance(d, E.IntImm) or -lanes.lanes < d.value <= 0:
            return False
    return True


def vector_legality(loop: S.For) -> Optional[str]:
    """None when `loop` (VECTORIZED, constant extent) can be emitted as vector IR exactly;
    otherwise the reason it runs as a scalar loop."""
    if not isinstance(loop.extent, E.IntImm):
        return "the extent is not a constant"
    if not 1 <= loop.extent.value <= MAX_LANES:
        return f"the extent {loop.extent.value} is not in [1, {MAX_LANES}]"
    lanes = Lanes(loop.var, loop.min, loop.extent.value)
    accesses = []  # (buffer, is_store, index key, index varying, value varying, masked, idx)
    problems = []

    def loads(e, masked):
        stack = [e]
        while stack:
            x = stack.pop()
            if isinstance(x, E.BufferLoad):
                if len(x.indices) != 1:
                    problems.append(f"the load {x} is not flattened")
                    continue
                idx = lanes.inline(x.indices[0])
                accesses.append((x.buffer, False, structural_key(idx), lanes.index_varies(idx),
                                 False, masked, idx))
            stack.extend(iter_children(x))

    def st(s, masked):
        if problems:
            return
        if isinstance(s, S.SeqStmt):
            for c in s.stmts:
                st(c, masked)
        elif isinstance(s, S.LetStmt):
            loads(s.value, masked)
            if lanes.is_varying(s.value):
                lanes.add_let(s.var, s.value)
            st(s.body, masked)
        elif isinstance(s, S.IfThenElse):
            loads(s.cond, masked)
            m = masked or lanes.is_varying(s.cond)
            st(s.then_case, m)
            if s.else_case is not None:
                st(s.else_case, m)
        elif isinstance(s, S.BufferStore):
            if len(s.indices) != 1:
                problems.append(f"the store to {s.buffer.name} is not flattened")
                return
            if s.atomic:
                problems.append(f"the store to {s.buffer.name} is atomic (lanes may update "
                                "one element)")
                return
            loads(s.value, masked)
            loads(s.indices[0], masked)
            idx = lanes.inline(s.indices[0])
            accesses.append((s.buffer, True, structural_key(idx), lanes.index_varies(idx),
                             lanes.is_varying(s.value), masked, idx))
        elif isinstance(s, S.Evaluate):
            loads(s.value, masked)
        elif isinstance(s, S.For):
            problems.append("the body contains a loop")
        elif isinstance(s, S.Allocate):
            problems.append("the body allocates")
        elif isinstance(s, (S.Barrier, S.AsyncCommit)):
            pass
        else:
            problems.append(f"the body contains {type(s).__name__}")

    st(loop.body, False)
    if problems:
        return problems[0]
    by_buf: Dict[object, list] = {}
    for a in accesses:
        by_buf.setdefault(a[0], []).append(a)
    for buf, acc in by_buf.items():
        stores = [a for a in acc if a[1]]
        if not stores:
            continue
        keys = {a[2] for a in acc}
        if len(keys) > 1 and not _lanes_apart(lanes, stores, acc):
            return (f"{buf.name} is written and accessed at different indices in the body "
                    "(possible dependence between lanes)")
        _, _, _, varying, _, _, idx = stores[0]
        if not varying:
            if any(not a[1] for a in acc):
                return f"{buf.name} is read and written at a lane-invariant index"
            if any(a[5] for a in stores):
                return (f"{buf.name} is written at a lane-invariant index under a lane-varying "
                        "condition")
            # otherwise the last lane's value is stored, as the serial loop would leave it
            continue
        if lanes.coeff(idx) != 1 and any(not a[1] for a in acc):
            return f"{buf.name} is read and scattered to in the body"
    return None
