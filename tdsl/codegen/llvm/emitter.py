"""Statements and loops of the loop IR as LLVM IR: the function emitter.

- Serial loops are plain LLVM loops (a tail that loop partitioning peeled off a loop of
  run-time extent gets `!llvm.loop` metadata keeping LLVM from vectorizing or unrolling it,
  a loop whose bounds read a run-time size metadata keeping LLVM from unrolling it by a
  run-time count, and, where what LLVM would hoist out of it passes half the vector
  registers, its reads of those buffers kept in it: `serial_loop`);
  unrolled loops repeat the body with the loop variable
  as a constant; vectorized loops become one copy of the body in explicit vector IR when
  `lanes.vector_legality` allows it, and run serially otherwise (the reason goes into the
  module's notes).
- A serial loop folding a short run of values into one element (a row reduction's last
  step after rfactor) is a vector and a tree of vector ops (`fold.py`).
- An unrolled loop around a vectorized one that reads a transposed tile reads it as rows
  and transposes it in registers (`transpose.py`).
- Parallel loops are outlined and run on native threads (`parallel.py`); a parallel loop
  nested in another runs serially.
- Lane-varying conditions inside a vectorized loop become masks.
"""
from __future__ import annotations

from llvmlite import ir

from ... import dtype as dt
from ...errors import BuildError, InternalError
from ...ir import expr as E
from ...ir import stmt as S
from . import atomics, externs, fold, irscan, memory, parallel, transpose
from .exprs import ExprEmitter
from .lanes import Lanes, VecCtx, vector_legality
from .types import I1, I32, PTR, int_const_value, lanes_of, sanitize, scalar_type

MAX_UNROLL = 1024
_MISSING = object()


class FunctionEmitter(ExprEmitter):
    """Emits the statements of one LLVM function (and its expressions, see ExprEmitter)."""

    def __init__(self, mb, fn: ir.Function, in_parallel: bool = False):
        super().__init__(mb, fn)
        self.in_parallel = in_parallel
        self.extern_status = None   # extern calls' status slot, made by the first (externs.py)

    def child(self, fn: ir.Function) -> "FunctionEmitter":
        """An emitter for an outlined parallel body `fn` of the same module."""
        return type(self)(self.mb, fn, in_parallel=True)

    def finish(self):
        if not self.builder.block.is_terminated:
            status = self.extern_status
            self.builder.ret(ir.Constant(I32, 0) if status is None else
                             self.builder.load(status))
        self.alloca_builder.branch(self.start_block)

    def fail(self, code):
        """Returns error `code` from the function (current block ends)."""
        self.builder.ret(ir.Constant(I32, code))

    # statements -------------------------------------------------------------------------
    def stmt(self, s):
        meth = _STMT_DISPATCH.get(type(s))
        if meth is None:
            raise BuildError(f"the LLVM backend cannot generate {type(s).__name__}")
        meth(self, s)

    def s_SeqStmt(self, s):
        for c in s.stmts:
            self.stmt(c)

    def s_Evaluate(self, s):
        if not isinstance(s.value, (E.IntImm, E.FloatImm)):
            self.expr(s.value)

    def s_Barrier(self, s):
        pass  # one thread per "block" on the CPU: nothing to synchronise

    def s_AsyncCommit(self, s):
        pass  # copies are synchronous on the CPU

    def s_Prefetch(self, s):
        if self.vec is not None:
            raise InternalError("a prefetch inside a vectorized body reached the emitter")
        memory.prefetch(self, s)

    def s_ExternCall(self, s):
        externs.emit_call(self, s)

    def s_BufferStore(self, s):
        if s.atomic:
            atomics.store(self, s)
        else:
            memory.store(self, s)

    def s_Allocate(self, s):
        memory.allocate(self, s)

    def s_LetStmt(self, s):
        v = self.expr(s.value)
        saved = self.env.get(s.var, _MISSING)
        self.env[s.var] = v
        vec = self.vec
        added = False
        if vec is not None and vec.info.is_varying(s.value):
            prev = vec.info.lets.get(s.var, _MISSING)
            vec.info.add_let(s.var, s.value)
            added = True
        try:
            self.stmt(s.body)
        finally:
            if saved is _MISSING:
                self.env.pop(s.var, None)
            else:
                self.env[s.var] = saved
            if added:
                if prev is _MISSING:
                    vec.info.lets.pop(s.var, None)
                else:
                    vec.info.lets[s.var] = prev

    def s_IfThenElse(self, s):
        bl = self.builder
        c = self.expr(s.cond)
        cc = int_const_value(c)
        if cc is not None:
            if cc:
                self.stmt(s.then_case)
            elif s.else_case is not None:
                self.stmt(s.else_case)
            return
        if lanes_of(c) > 1:
            ctx = self.vec
            old = ctx.mask
            ctx.mask = c if old is None else bl.and_(old, c)
            self.stmt(s.then_case)
            if s.else_case is not None:
                notc = bl.xor(c, self.const("bool", 1, ctx.count))
                ctx.mask = notc if old is None else bl.and_(old, notc)
                self.stmt(s.else_case)
            ctx.mask = old
            return
        tb = self.new_block("if.then")
        end = self.new_block("if.end")
        eb = self.new_block("if.else") if s.else_case is not None else end
        if isinstance(s.cond, E.Call) and s.cond.name == "likely":
            c = self._expect(c, True)
        bl.cbranch(c, tb, eb)
        bl.position_at_end(tb)
        self.stmt(s.then_case)
        if not bl.block.is_terminated:
            bl.branch(end)
        if s.else_case is not None:
            bl.position_at_end(eb)
            self.stmt(s.else_case)
            if not bl.block.is_terminated:
                bl.branch(end)
        bl.position_at_end(end)

    def _expect(self, c, value):
        fn = self.mb.intrinsic("llvm.expect.i1", I1, [I1, I1])
        return self.builder.call(fn, [c, ir.Constant(I1, int(value))])

    # loops ------------------------------------------------------------------------------
    def s_For(self, s):
        kind = s.kind
        if kind == S.ForKind.THREAD_BINDING:
            raise BuildError(f"loop {s.var.name} is bound to {s.thread_tag or 'a GPU thread'}; "
                             "GPU-bound loops cannot be built for the 'llvm' target")
        if self.vec is not None:
            raise InternalError("a loop inside a vectorized body reached the emitter")
        folding = fold.match(s)
        if folding is not None:
            return fold.emit(self, s, *folding)
        if kind == S.ForKind.UNROLLED and isinstance(s.extent, E.IntImm) \
                and s.extent.value <= MAX_UNROLL:
            return self.unrolled_for(s)
        if kind == S.ForKind.VECTORIZED:
            reason = vector_legality(s)
            if reason is None:
                return self.vector_for(s)
            self.mb.notes.append(f"vectorized loop {s.var.name} runs serially: {reason}")
        if kind == S.ForKind.PARALLEL:
            if not self.in_parallel:
                return parallel.emit_parallel_for(self, s)
            self.mb.notes.append(f"parallel loop {s.var.name} inside a parallel loop runs "
                                 "serially")
        lo = self.expr(s.min)
        lo = self.cast(lo, s.min.dtype, s.var.dtype)
        ext = self.cast(self.expr(s.extent), s.extent.dtype, s.var.dtype)
        hi = self.int_arith("add", lo, ext, s.var.dtype)
        over_sizes = self.mb.over_sizes(s)
        self.serial_loop(s.var, lo, hi, s.body, as_written=("tail", True) in s.pragmas,
                         over_sizes=over_sizes, reads_inside=over_sizes)

    def serial_loop(self, var, lo, hi, body, as_written=False, over_sizes=False, reads_inside=False):
        """for var in [lo, hi): body  (lo, hi: LLVM values of var's type); `as_written`:
        LLVM must neither vectorize nor unroll the loop (a peeled tail); `over_sizes`: its
        bounds read the function's run-time sizes, LLVM must not unroll it by a run-time
        count; `reads_inside`: the loads LLVM would hoist out of the loop stay in it
        where they are more than half the vector registers hold.

        Why `reads_inside`: a row loop whose trip count is only known per call (a layer
        norm over a symbolic sequence) reads gamma and beta at the same place every row;
        LLVM's LICM hoists all of them before the loop, 32 vectors for a row of 256 floats,
        and, with no registers left, spills them to the stack and reads them back every
        row: at one row, the common case of one token, that costs more than the row
        (static code, one row unrolled, reads each once where it is used). A few hoisted
        vectors (a dense kernel's bias tile) fit in registers and stay hoisted. Past half
        the register file, each trip reads those buffers through
        `llvm.launder.invariant.group` of their pointer: a copy LLVM cannot hoist, whose
        loads keep the buffer's `noalias` facts (alias analysis sees through it) and
        which costs no instruction."""
        bl = self.builder
        cl, ch = int_const_value(lo), int_const_value(hi)
        if cl is not None and ch is not None:
            if ch <= cl:
                return
            if ch == cl + 1:
                return self._bind_and_emit(var, lo, body)
        signed = dt.is_signed(var.dtype)
        cmp = bl.icmp_signed if signed else bl.icmp_unsigned
        pre = bl.block
        header = self.new_block(f"for.{sanitize(var.name)}")
        exit_ = self.new_block(f"for.{sanitize(var.name)}.end")
        if cl is not None and ch is not None:
            bl.branch(header)
        else:
            bl.cbranch(cmp("<", lo, hi), header, exit_)
        bl.position_at_end(header)
        phi = bl.phi(lo.type, name=sanitize(var.name))
        phi.add_incoming(lo, pre)
        kept = {}
        hoisted = irscan.invariant_reads(var, body) if reads_inside else {}
        t = self.mb.target.description
        if sum(hoisted.values()) > t.vector_registers * t.vector_bits // 8 // 2:
            launder = self.mb.intrinsic("llvm.launder.invariant.group.p0", PTR, [PTR])
            for b in hoisted:
                if b in self.bufs:
                    kept[b] = self.bufs[b]
                    self.bufs[b] = bl.call(launder, [kept[b]])
        self._bind_and_emit(var, phi, body)
        self.bufs.update(kept)
        one = ir.Constant(lo.type, 1)
        nxt = bl.add(phi, one, flags=("nsw",) if signed else ("nuw",))
        latch = bl.block
        br = bl.cbranch(cmp("<", nxt, hi), header, exit_)
        if as_written:
            br.set_metadata("llvm.loop", self.mb.loop_kept_as_written())
        elif over_sizes:
            br.set_metadata("llvm.loop", self.mb.loop_not_runtime_unrolled())
        phi.add_incoming(nxt, latch)
        bl.position_at_end(exit_)

    def _bind_and_emit(self, var, value, body):
        saved = self.env.get(var, _MISSING)
        self.env[var] = value
        try:
            self.stmt(body)
        finally:
            if saved is _MISSING:
                self.env.pop(var, None)
            else:
                self.env[var] = saved

    def unrolled_for(self, s):
        lo = self.cast(self.expr(s.min), s.min.dtype, s.var.dtype)
        loads = transpose.match(s)
        tiles = transpose.read_tiles(self, s, loads) if loads else {}
        outer = self.tile_columns
        try:
            for i in range(s.extent.value):
                if tiles:
                    self.tile_columns = {**outer, **{k: cols[i] for k, cols in tiles.items()}}
                v = self.int_arith("add", lo, self.const(s.var.dtype, i), s.var.dtype)
                self._bind_and_emit(s.var, v, s.body)
        finally:
            self.tile_columns = outer

    def vector_for(self, s):
        n = s.extent.value
        lo = self.cast(self.expr(s.min), s.min.dtype, s.var.dtype)
        if n == 1:
            return self._bind_and_emit(s.var, lo, s.body)
        lane_ids = ir.Constant(ir.VectorType(scalar_type(s.var.dtype), n), list(range(n)))
        lanes_val = self.builder.add(self.splat(lo, n), lane_ids) \
            if int_const_value(lo) != 0 else lane_ids
        self.vec = VecCtx(Lanes(s.var, s.min, n), lo, n)
        try:
            self._bind_and_emit(s.var, lanes_val, s.body)
        finally:
            self.vec = None


_STMT_DISPATCH = {cls: getattr(FunctionEmitter, "s_" + cls.__name__)
                  for cls in (S.SeqStmt, S.Evaluate, S.Barrier, S.AsyncCommit, S.Prefetch,
                              S.LetStmt, S.IfThenElse, S.BufferStore, S.Allocate, S.For,
                              S.ExternCall)}
