"""bounds_check: accesses to a buffer check their flat index against the buffer's extent.

Every build runs it for the accesses whose index is read from memory (a gather's
`x[idx[i]]`, `data_only=True`): no range can prove those inside, and an index out of range
in the data (a token id past the vocabulary) must be an error, not a read of another
object's memory or a crash. `build(..., bounds_check=True)` checks every access that the
loop ranges do not prove inside. It runs on the fully lowered function (after
storage_flatten, and after split_kernels for GPU targets, so buffers and kernels are
final). An index outside [0, extent) skips its access (a load yields 0, a store does
nothing) and records the failure in a record buffer that the pass appends to the
function's parameters (and to each kernel's): `rec[0]` holds check id + 1 of the first
failure seen, `rec[1 + 2c]`, `rec[2 + 2c]` the index and extent of check `c`. The record
is written in plain IR, so every backend runs it as it runs any other store and the host
reads it back like any written buffer. Racing writers (parallel loops, GPU threads) are
harmless: each check has its own slots, written before the flag, so the flag always
names a check whose slots hold a real failure.

Loads sit inside expressions, so their record statements go just before the statement
that holds them, under the `Select` conditions on the way to the load (a load on the
untaken side of an `if_then_else` is never made, and must not be reported).

A vectorized loop whose indices are all affine in its variable is versioned: the
original loop runs when the first and last lane of every access the checked copy checks
(with `data_only`, those whose index reads memory) are inside, a serial checked copy
otherwise, so a correct vector loop stays a vector loop. The condition holds
each distinct lane's term once and none that the loop ranges prove inside a buffer of
constant extent; a value read from memory that it needs (a gather's row) is read once, in
a LetStmt before it, where the read itself is proven inside (against a run-time extent,
where no proof is tried: where every iteration makes that read, unchecked, anyway). The
checked copy indexes by that variable too, and is kept as written (LLVM neither unrolls
nor vectorizes it): it runs only where a lane is outside, and spelt out or unrolled it
was most of a gather's IR and LLVM time. The vector copy is left as it was.
"""
from __future__ import annotations

import dataclasses
from contextlib import contextmanager
from dataclasses import dataclass

from .. import arith
from .. import dtype as dt
from ..arith.errors import NotIndexExpr
from ..ir import expr as E
from ..ir import stmt as S
from ..ir.expr import Range
from ..ir.visitor import Mutator, expr_key, free_vars, substitute, walk

RECORD_NAME = "__tdsl_oob"


@dataclass(frozen=True)
class Check:
    """What one check id guards, for the host's error message."""
    kernel: str
    buffer: str
    access: str  # "load", "store" or "prefetch"


def _extent(buf):
    n = E.const(1, "int64")
    for d in buf.shape:
        n = n * E.cast(d, "int64")
    return arith.simplify(n)


def _in_bounds(idx, extent):
    i = E.cast(idx, "int64")
    return E.logical_and(i >= E.const(0, "int64"), i < extent)


# the checked copy of a vector loop runs only for lanes near an edge or past it: a plain
# loop, so that C compilers do not unroll and vectorize a second copy, kept as written
# (the pragma of a peeled tail) so that LLVM does not either: unrolled, a gather's checked
# copy was most of its kernel's optimised IR
SLOW_COPY = (("tail", True),)

NARROW_BITS = 16     # a value read from memory of at most this many bits is bounded by its type


class _ReadsAsVars(Mutator):
    """An index with every load replaced by a variable: one of a narrow integer type
    ranging over the type's values (`ranges`), any other unbounded, so that only a clamp
    around it (`min(max(v, 0), n - 1)`, a lookup by a uint8) proves the index inside."""

    def __init__(self):
        self.ranges, self.count = {}, 0

    def _value(self, t):
        self.count += 1
        v = E.Var(f"read{self.count}", t)
        if (dt.is_int(t) or t == "bool") and dt.bits(t) <= NARROW_BITS:
            lo = -(1 << (dt.bits(t) - 1)) if dt.is_signed(t) else 0
            self.ranges[v] = Range(E.const(lo, t), E.const(1 << dt.bits(t), "int32"))
        return v

    def visit_BufferLoad(self, e):
        return self._value(e.dtype)

    def visit_Cast(self, e):
        # a narrow integer cast of a value read from memory (a quantized lookup's
        # uint8(round(x / s) + z)) is within its type whatever the float math inside
        t = e.dtype
        if dt.is_int(t) and dt.bits(t) <= NARROW_BITS and _has_load(e.value):
            return self._value(t)
        # an integer from float math on values read (a bilateral grid's intensity bin,
        # `int32(v * 10)`) is any value of its type: no bound from it, but a clamp around
        # it still proves the index, which float math inside would otherwise keep from
        # being analysed at all
        if dt.is_int(t) and not (dt.is_int(e.value.dtype) or e.value.dtype == "bool") \
                and _has_load(e.value):
            return self._value(t)
        return self.generic_visit(e)


def _has_load(e):
    found = []
    walk(e, lambda n: found.append(n) if isinstance(n, E.BufferLoad) else None)
    return bool(found)


def _loads_invariant(e, loop_vars, stored):
    """Whether every load in `e` reads, at an index free of loads and of `loop_vars`, a
    buffer the loop does not store to: its value is the same before the loop as in it (a
    scatter's row `out[idx[m] * W + x]` along a vector loop over `x`), so the condition on
    the first and last lane may read it before the loop."""
    ok = [True]

    def f(n):
        if isinstance(n, E.BufferLoad) and (n.buffer in stored or any(
                _has_load(i) or free_vars(i) & loop_vars for i in n.indices)):
            ok[0] = False
    walk(e, f)
    return ok[0]


class _ReadsOpaque(Mutator):
    """Each largest term that reads memory and not `var` -> a variable: a constant of
    the loop over `var`, so that linearity in `var` is decided around it."""

    def __init__(self, var):
        self.var = var

    def visit(self, e):
        if isinstance(e, E.Expr) and _has_load(e) and self.var not in free_vars(e):
            return E.Var("read", e.dtype)
        return super().visit(e)


class _ReadsOnce(Mutator):
    """Each largest term of an index that reads memory and not `var` -> a variable bound
    before the vector loop's condition (`lets`), the same variable for structurally equal
    terms: a gather's row `ids[t]` is read once per vector, not once per access and lane
    (loads are never merged by the emitter). Only a term whose loads `safe` proves inside
    wherever the loop is reached moves: any other is read only under the condition's
    earlier terms, where it stays (reading it under a guard of its own measured slower)."""

    def __init__(self, var, safe):
        self.var, self.safe = var, safe
        self.lets, self.seen = [], {}

    def visit(self, e):
        if not (isinstance(e, E.Expr) and _has_load(e) and self.var not in free_vars(e)):
            return super().visit(e)
        key = expr_key(e)
        if key not in self.seen:
            loads = []
            walk(e, lambda n: loads.append(n) if isinstance(n, E.BufferLoad) else None)
            if all(self.safe(ld) for ld in loads):
                v = E.Var(f"row{len(self.lets)}", e.dtype)
                self.lets.append((v, e))
                self.seen[key] = v
            else:
                self.seen[key] = e     # each proof tried once: they are the slow part
        return self.seen[key]


class _Reuse(Mutator):
    """Each term structurally equal to one of `lets`' values -> its variable. Sound inside
    the loop whose condition bound them: _ReadsOnce binds only terms free of the loop's
    variables whose loads read buffers the loop does not store to."""

    def __init__(self, lets):
        self.vars = {expr_key(value): var for var, value in lets}
        self.kinds = {(type(value), value.dtype) for _, value in lets}

    def visit(self, e):
        if isinstance(e, E.Expr) and (type(e), e.dtype) in self.kinds and _has_load(e):
            var = self.vars.get(expr_key(e))
            if var is not None:
                return var
        return super().visit(e)


class _Checker(Mutator):
    """Checks the accesses of one kernel (or of the whole CPU function)."""

    def __init__(self, kernel, known, record, table, ranges, data_only):
        self.kernel = kernel
        self.data_only = data_only     # check only indices read from memory
        self.ranges = dict(ranges)     # loop and let variables in scope -> Range
        self.known = dict(known)       # buffer -> extent (int64 expression)
        self.record = record
        self.table = table
        self.path = []                 # Select conditions above the current expression
        self.pending = []              # record statements for loads of the current statement

    # the record ---------------------------------------------------------------------
    def _report(self, buf, access, idx):
        c = len(self.table)
        self.table.append(Check(self.kernel, buf.name, access))
        rec = self.record

        def put(slot, value):
            return S.BufferStore(rec, E.cast(value, "int64"), (E.const(slot, "int32"),))
        first = E.BufferLoad(rec, (E.const(0, "int32"),)) == E.const(0, "int64")
        return S.IfThenElse(first, S.seq(put(1 + 2 * c, idx), put(2 + 2 * c, self.known[buf]),
                                         put(0, c + 1)))

    def _needs_check(self, buf, idx):
        """Whether the access may fall outside: unless the loop ranges prove it inside,
        values read from memory taken as anything their type holds (a uint8 indexing a
        256-entry table is inside; an int32 or int64 is only when clamped)."""
        if buf not in self.known or buf is self.record:
            return False
        reads = _has_load(idx)
        if self.data_only and not reads:
            return False
        ranges = self.ranges
        if reads:
            as_vars = _ReadsAsVars()
            idx = as_vars.visit(idx)
            ranges = {**ranges, **as_vars.ranges}
        try:
            return self._outside(buf, idx, ranges)
        except NotIndexExpr:        # float math on values read: nothing to prove with
            return True

    def _outside(self, buf, idx, ranges):
        lo, hi = arith.const_bound(idx, ranges)
        ext = self.known[buf]
        if lo is None or lo < 0 or hi is None:
            return True
        if isinstance(ext, E.IntImm):
            return hi >= ext.value
        return not arith.can_prove(E.cast(idx, "int64") < ext, ranges)

    # expressions --------------------------------------------------------------------
    def visit_Select(self, e):
        cond = self.visit(e.cond)
        self.path.append(cond)
        t = self.visit(e.t)
        self.path[-1] = E.logical_not(cond)
        f = self.visit(e.f)
        self.path.pop()
        if cond is e.cond and t is e.t and f is e.f:
            return e
        return E.Select(cond, t, f)

    def _short_circuit(self, e, guard):
        # codegen evaluates the right side of `and` / `or` only where the left side does
        # not decide the result: a load there is made under that condition only
        a = self.visit(e.a)
        self.path.append(guard(a))
        b = self.visit(e.b)
        self.path.pop()
        if a is e.a and b is e.b:
            return e
        return type(e)(a, b)

    def visit_And(self, e):
        return self._short_circuit(e, lambda a: a)

    def visit_Or(self, e):
        return self._short_circuit(e, E.logical_not)

    def visit_BufferLoad(self, e):
        idx = self.visit(e.indices[0])
        load = e if idx is e.indices[0] else E.BufferLoad(e.buffer, (idx,))
        if not self._needs_check(e.buffer, idx):
            return load
        ok = _in_bounds(idx, self.known[e.buffer])
        bad = E.logical_not(ok)
        for c in self.path:
            bad = E.logical_and(c, bad)
        self.pending.append(S.IfThenElse(bad, self._report(e.buffer, "load", idx)))
        return E.Select(ok, load, E.const(0, e.dtype))

    def _exprs(self, s, fields):
        """`s` with its expression fields checked, and the record statements they need."""
        saved, self.pending = self.pending, []
        new = {f: self.visit(getattr(s, f)) for f in fields}
        pre, self.pending = self.pending, saved
        changed = {f: v for f, v in new.items() if v is not getattr(s, f)}
        return (dataclasses.replace(s, **changed) if changed else s), pre

    # statements ---------------------------------------------------------------------
    def visit_BufferStore(self, s):
        saved, self.pending = self.pending, []
        value = self.visit(s.value)
        idx = self.visit(s.indices[0])
        pre, self.pending = self.pending, saved
        store = dataclasses.replace(s, value=value, indices=(idx,))
        if self._needs_check(s.buffer, idx):
            store = S.IfThenElse(_in_bounds(idx, self.known[s.buffer]), store,
                                 self._report(s.buffer, "store", idx))
        return S.seq(*pre, store)

    def visit_Evaluate(self, s):
        new, pre = self._exprs(s, ("value",))
        return S.seq(*pre, new)

    def visit_Prefetch(self, s):
        """Its first and last element inside the buffer, when it names any."""
        saved, self.pending = self.pending, []
        new = S.Prefetch(s.buffer, tuple(self.visit(i) for i in s.indices), self.visit(s.extent))
        pre, self.pending = self.pending, saved
        first = new.indices[0]
        last = arith.simplify(first + new.extent - 1)
        if not (self._needs_check(s.buffer, first) or self._needs_check(s.buffer, last)):
            return S.seq(*pre, new)
        ext = self.known[s.buffer]
        ok = E.logical_or(new.extent <= E.const(0, new.extent.dtype), E.logical_and(
            _in_bounds(first, ext), _in_bounds(last, ext)))
        return S.seq(*pre, S.IfThenElse(ok, new, self._report(s.buffer, "prefetch", first)))

    def visit_LetStmt(self, s):
        value, pre = self._exprs(s, ("value",))
        with self._scope(s.var, Range(s.value, E.const(1, s.value.dtype))):
            body = self.visit(s.body)
        return S.seq(*pre, S.LetStmt(s.var, value.value, body))

    @contextmanager
    def _scope(self, var, rng):
        old = self.ranges.get(var)
        self.ranges[var] = rng
        try:
            yield
        finally:
            if old is None:
                del self.ranges[var]
            else:
                self.ranges[var] = old

    def visit_IfThenElse(self, s):
        cond, pre = self._exprs(s, ("cond",))
        return S.seq(*pre, S.IfThenElse(cond.cond, self.visit(s.then_case),
                                        self.visit(s.else_case)))

    def visit_Allocate(self, s):
        self.known[s.buffer] = _extent(s.buffer)
        return S.Allocate(s.buffer, self.visit(s.body))

    def visit_For(self, s):
        head, pre = self._exprs(s, ("min", "extent"))
        with self._scope(s.var, Range(s.min, s.extent)):
            checked = dataclasses.replace(head, body=self.visit(s.body))
        if s.kind is S.ForKind.VECTORIZED:
            inside = self._all_lanes_inside(s)
            if inside is not None:
                fast, reads = inside
                slow = dataclasses.replace(checked, kind=S.ForKind.SERIAL, pragmas=SLOW_COPY)
                if reads:
                    # the checked copy indexes by the row read once: spelt out again in
                    # each check, record and load (the emitter merges no loads), a
                    # gather's row was most of its kernel's IR
                    slow = _Reuse(reads).visit(slow)
                out = S.IfThenElse(fast, head, slow)
                for var, value in reversed(reads):
                    out = S.LetStmt(var, value, out)
                return S.seq(*pre, out)
        return S.seq(*pre, checked)

    def _all_lanes_inside(self, loop):
        """A condition under which every access of the vector loop `loop` that the checked
        copy checks is inside its buffer (its first and last lane are), or None when an index is not affine in the
        loop variable, reads memory or depends on what the body defines."""
        inner, accesses, stored = set(), [], set()

        def f(n):
            if isinstance(n, (S.For, S.LetStmt)):
                inner.add(n.var)
            elif isinstance(n, (E.BufferLoad, S.BufferStore)) and n.buffer in self.known:
                accesses.append(n)
            elif isinstance(n, S.Allocate):
                inner.add(None)
            if isinstance(n, S.BufferStore):
                stored.add(n.buffer)
        walk(loop.body, f)
        if None in inner:
            return None
        last = loop.min + loop.extent - 1
        every_pass = _loads_every_pass(loop) if self.data_only else set()
        hoist = _ReadsOnce(loop.var, lambda ld: self._surely_inside(ld) or (
            expr_key(ld) in every_pass and not isinstance(self.known.get(ld.buffer), E.IntImm)))
        conds, lanes = {}, set()
        for a in accesses:
            idx = a.indices[0]
            if self.data_only and not _has_load(idx):
                # unchecked in the checked copy as well: nothing for the condition to
                # decide (against a run-time extent, such terms were most of it)
                continue
            if not _loads_invariant(idx, {loop.var} | inner, stored) or free_vars(idx) & inner \
                    or arith.linear_coeff(_ReadsOpaque(loop.var).visit(idx), loop.var) is None:
                return None
            idx = hoist.visit(idx)
            ext = self.known[a.buffer]
            # an unrolled loop repeats each access per vector, and most accesses share
            # their row: each distinct term once keeps the condition (and the IR and
            # compile time it costs) from growing with the unroll factor
            for v in (loop.min, last):
                lane = arith.simplify(substitute(idx, {loop.var: v}))
                key = (id(a.buffer), expr_key(lane))
                if key in lanes:
                    continue
                lanes.add(key)
                if self._proven_inside(a.buffer, lane):
                    continue
                # one term per lane, not its two comparisons apart: a term that reads
                # memory is emitted behind a branch of its own, and the two would read
                # and compute the lane twice
                conds.setdefault(key, _in_bounds(lane, ext))
        if not conds:
            return None
        terms = list(conds.values())
        out = terms[0]
        for c in terms[1:]:
            out = E.logical_and(out, c)
        return out, hoist.lets

    def _proven_inside(self, buf, idx):
        """Whether the loop ranges prove a load-free lane index inside a buffer of
        constant extent: its term would only cost the condition time. Against a symbolic
        extent the proofs mostly fail and cost more compile time than they save."""
        if _has_load(idx) or not isinstance(self.known[buf], E.IntImm):
            return False
        try:
            return not self._outside(buf, idx, self.ranges)
        except NotIndexExpr:
            return False

    def _surely_inside(self, load):
        """Whether a load with a load-free index is inside its buffer wherever the loop
        is reached (_ReadsOnce may then read it before the condition)."""
        return load.buffer in self.known and load.buffer is not self.record \
            and self._proven_inside(load.buffer, load.indices[0])


def _loads_every_pass(loop):
    """expr_key of each load that `loop` makes in every iteration, whatever the data: not
    under a condition (a Select's branches, an `and`'s or `or`'s right side, an if, a loop
    that may run no iteration). Empty when the loop may itself run no iteration. With
    `data_only` such a load, its index free of loads, is never checked: reading it once
    before the loop reads what its first iteration reads. That is what lets a gather's
    row be read once against a run-time extent, where proofs are not tried."""
    keys = set()
    if not (isinstance(loop.extent, E.IntImm) and loop.extent.value > 0):
        return keys

    def expr(e):
        if isinstance(e, E.BufferLoad):
            keys.add(expr_key(e))
            for i in e.indices:
                expr(i)
        elif isinstance(e, E.Select):
            expr(e.cond)
        elif isinstance(e, (E.And, E.Or)):
            expr(e.a)
        elif isinstance(e, E.BinaryOp):
            expr(e.a)
            expr(e.b)
        elif isinstance(e, (E.Cast, E.Not)):
            expr(e.value if isinstance(e, E.Cast) else e.a)

    def stmt(s):
        if isinstance(s, S.SeqStmt):
            for x in s.stmts:
                stmt(x)
        elif isinstance(s, S.BufferStore):
            expr(s.value)
            for i in s.indices:
                expr(i)
        elif isinstance(s, S.LetStmt):
            expr(s.value)
            stmt(s.body)
        elif isinstance(s, S.IfThenElse):
            expr(s.cond)
        elif isinstance(s, S.For):
            expr(s.min)
            expr(s.extent)
            if isinstance(s.extent, E.IntImm) and s.extent.value > 0:
                stmt(s.body)
        elif isinstance(s, S.Evaluate):
            expr(s.value)
    stmt(loop.body)
    return keys


def bounds_check(func: S.PrimFunc, data_only: bool = False) -> S.PrimFunc:
    """`func` with checked accesses and the record buffer as its last parameter; unchanged
    when it has no access to check or was checked already. `data_only`: only the accesses
    whose index is read from memory."""
    if "bounds_record" in func.attrs:
        return func
    record = S.Buffer(RECORD_NAME, (E.const(1),), "int64")
    table = []
    known = {b: _extent(b) for b in func.params if isinstance(b, S.Buffer)}
    ranges = func.attrs.get("size_ranges", {})
    kernels = func.attrs.get("kernels")
    if kernels is None:
        body = _Checker(func.name, known, record, table, ranges, data_only).visit(func.body)
        new_kernels = None
    else:
        known.update((b, _extent(b)) for b in func.attrs.get("host_buffers", ()))
        body, new_kernels = func.body, []
        for k in kernels:
            n = len(table)
            chk = _Checker(k.name, known, record, table, ranges, data_only)
            chk.known.update((b, _extent(b)) for b in k.shared)
            kbody = chk.visit(k.body)
            params = list(k.params) + ([record] if len(table) > n else [])
            new_kernels.append(dataclasses.replace(k, body=kbody, params=params))
    if not table:
        return func
    # the record's true size is known only now: rename the placeholder buffer everywhere
    sized = S.Buffer(RECORD_NAME, (E.const(1 + 2 * len(table)),), "int64")
    swap = _Rebind(record, sized)
    out = S.PrimFunc(func.name, list(func.params) + [sized], swap.visit(body), dict(func.attrs))
    if new_kernels is not None:
        out.attrs["kernels"] = [dataclasses.replace(
            k, body=swap.visit(k.body), params=[sized if p is record else p for p in k.params])
            for k in new_kernels]
    out.attrs["bounds_record"] = sized
    out.attrs["bounds_checks"] = table
    return out


class _Rebind(Mutator):
    def __init__(self, old, new):
        self.old, self.new = old, new

    def visit_BufferLoad(self, e):
        idx = self.visit(e.indices[0])
        return E.BufferLoad(self.new if e.buffer is self.old else e.buffer, (idx,))

    def visit_BufferStore(self, s):
        b = self.new if s.buffer is self.old else s.buffer
        return dataclasses.replace(s, buffer=b, value=self.visit(s.value),
                                   indices=tuple(self.visit(i) for i in s.indices))
