"""Expressions of the loop IR as LLVM values, scalar or vector.

`ExprEmitter` holds the per-function state (the builder, variable and buffer bindings, the
vector context of an enclosing vectorized loop) and emits every expression node. Inside a
vectorized loop, values that vary across lanes are `<L x T>` vectors and uniform ones stay
scalar; binary operations splat a scalar operand to the other's width (`unify`).
Statements and loops are in `emitter.py`, memory accesses in `memory.py`.
"""
from __future__ import annotations

import operator
from typing import Dict, Optional

from llvmlite import ir

from ... import dtype as dt
from ...errors import BuildError, InternalError
from ...ir import expr as E
from ...ir import stmt as S
from . import bf16, intdiv, intrinsics, memory, select_load
from .irscan import has_load
from .lanes import VecCtx
from .cse import ReusingBuilder
from .types import (FAST_MATH, I1, I32, I64, int_const_value, lanes_of, scalar_type, vec_type,
                    wrap)

_CMP = {E.EQ: "==", E.NE: "!=", E.LT: "<", E.LE: "<=", E.GT: ">", E.GE: ">="}
_WIDE_OPS = {E.Add: "add", E.Sub: "sub", E.Mul: "mul"}
# index nodes emitted as integer arithmetic alone, each instruction one the builder reuses
# (cse.py): no loads, calls or blocks
_PURE_INDEX = frozenset((E.Var, E.IntImm, E.Add, E.Sub, E.Mul, E.FloorDiv, E.FloorMod, E.Min,
                         E.Max, E.Cast))
_PY_CMP = {"==": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le,
           ">": operator.gt, ">=": operator.ge}


class ExprEmitter:
    """Emits the expressions of one LLVM function `fn` of module builder `mb`."""

    def __init__(self, mb, fn: ir.Function):
        self.mb = mb
        self.fn = fn
        self.entry = fn.append_basic_block("entry")
        self.start_block = fn.append_basic_block("start")
        self.alloca_builder = ir.IRBuilder(self.entry)
        self.builder = ReusingBuilder(self.start_block)
        self.env: Dict[E.Var, ir.Value] = {}
        self.bufs: Dict[S.Buffer, ir.Value] = {}
        self.vec: Optional[VecCtx] = None
        self.tile_columns: Dict[int, ir.Value] = {}   # transposed tiles' columns (transpose.py)
        self._nsw = False
        self._index_vars = {}     # id(index node) -> (node, its Vars, or None: not pure)
        self._index_memo = {}     # see _wide_index

    # small helpers --------------------------------------------------------------------
    def const(self, dtype, value, lanes=1):
        t = scalar_type(dtype)
        if dt.is_float(dtype):
            value = float(value)
        elif dtype == "bool":
            value = int(bool(value))
        else:
            value = wrap(int(value), dt.bits(dtype))
        if lanes > 1:
            return ir.Constant(ir.VectorType(t, lanes), [value] * lanes)
        return ir.Constant(t, value)

    def splat(self, v, lanes):
        if lanes <= 1 or isinstance(v.type, ir.VectorType):
            return v
        vt = ir.VectorType(v.type, lanes)
        if isinstance(v, ir.Constant) and v.constant is not ir.Undefined \
                and not isinstance(v.constant, (list, tuple)):
            return ir.Constant(vt, [v.constant] * lanes)
        b = self.builder
        undef = ir.Constant(vt, ir.Undefined)
        x = b.insert_element(undef, v, ir.Constant(I32, 0))
        return b.shuffle_vector(x, undef, ir.Constant(ir.VectorType(I32, lanes), [0] * lanes))

    def unify(self, a, b):
        la, lb = lanes_of(a), lanes_of(b)
        if la == lb:
            return a, b
        if la == 1:
            return self.splat(a, lb), b
        if lb == 1:
            return a, self.splat(b, la)
        raise InternalError(f"lane counts {la} and {lb} do not match")

    def to_i64(self, v, dtype):
        """An index value as i64 (sign- or zero-extended, keeping lanes)."""
        t = v.type
        et = t.element if isinstance(t, ir.VectorType) else t
        if not isinstance(et, ir.IntType):
            raise BuildError(f"an index must be an integer, got a value of type {dtype}")
        if et.width == 64:
            return v
        tt = ir.VectorType(I64, t.count) if isinstance(t, ir.VectorType) else I64
        c = int_const_value(v)
        if c is not None:
            if dtype == "bool" or not dt.is_signed(dtype):
                c &= (1 << et.width) - 1
            return ir.Constant(I64, c)
        if dtype == "bool" or not dt.is_signed(dtype):
            return self.builder.zext(v, tt)
        return self.builder.sext(v, tt)

    def index_value(self, idx):
        """Emits an index expression: signed arithmetic gets `nsw` (indices do not
        overflow), which lets LLVM widen and strength-reduce address computations."""
        saved = self._nsw
        self._nsw = True
        try:
            return self.expr(idx)
        finally:
            self._nsw = saved

    def index(self, idx):
        """Index expression `idx` as i64. In a function of run-time sizes the additions
        and multiplications are done in 64 bits, each leaf (loop variable, size, division)
        extended on its own: an i32 sum extended at the end keeps LLVM from splitting it
        into a loop-invariant base and the inner loop's part once reassociation has
        dropped its `nsw` (a sign extension and a recomputed index per load), and no
        partial sum of sizes can wrap at 2^31."""
        if not self.mb.wide_index or not dt.is_signed(idx.dtype) or dt.bits(idx.dtype) >= 64:
            return self.to_i64(self.index_value(idx), idx.dtype)
        saved = self._nsw
        self._nsw = True
        try:
            return self._wide_index(idx)
        finally:
            self._nsw = saved

    def _wide_index(self, e):
        """`e` in 64 bits (see `index`). The unrolled steps of a register tile index with
        the same terms over and over, each walked and emitted again only for the builder to
        find its instructions already there (cse.py): a pure node emitted in this block
        with its variables bound to the same values is that value, not walked again."""
        t = type(e)
        if t is E.Var or t is E.IntImm:      # a leaf: as cheap to emit as to look up
            return self.to_i64(self.expr(e), e.dtype)
        key, bl = None, self.builder
        vs = self._pure_index_vars(e)
        if vs is not None and bl.at_end():
            block = bl.block
            env = self.env
            key = (id(e), id(block), self._nsw, self.vec is None, tuple([id(env.get(v)) for v in vs]))
            hit = self._index_memo.get(key)
            if hit is not None:
                return hit[0]
        op = _WIDE_OPS.get(t)
        if op is None:
            r = self.to_i64(self.expr(e), e.dtype)
        else:
            a, b = self.unify(self._wide_index(e.a), self._wide_index(e.b))
            r = self.int_arith(op, a, b, "int64")
        if key is not None and bl.block is block and bl.at_end():
            # what the key's ids name is kept alive with the value
            self._index_memo[key] = (r, e, block, [self.env.get(v) for v in vs])
        return r

    def _pure_index_vars(self, e):
        """The Vars of index node `e` when it is pure integer arithmetic (_PURE_INDEX),
        else None; once per node."""
        hit = self._index_vars.get(id(e))
        if hit is not None:
            return hit[1]
        vs = set()
        stack = [e]
        while stack:
            x = stack.pop()
            t = type(x)
            if t not in _PURE_INDEX or dt.is_float(x.dtype):
                vs = None
                break
            if t is E.Var:
                vs.add(x)
            elif t is E.Cast:
                stack.append(x.value)
            elif t is not E.IntImm:
                stack += (x.a, x.b)
        out = None if vs is None else tuple(sorted(vs, key=lambda v: v.name))
        self._index_vars[id(e)] = (e, out)
        return out

    def new_block(self, name):
        return self.fn.append_basic_block(name)

    # casts ------------------------------------------------------------------------------
    def cast(self, v, src: str, dst: str):
        if src == dst:
            return v
        b = self.builder
        if src == "bfloat16":
            return self.cast(bf16.to_f32(b, v), "float32", dst)
        if dst == "bfloat16":
            return bf16.from_f32(b, self.cast(v, src, "float32"))
        lanes = lanes_of(v)
        tt = vec_type(dst, lanes)
        if dst == "bool":
            if dt.is_float(src):
                return b.fcmp_unordered("!=", v, self.const(src, 0.0, lanes))
            return b.icmp_unsigned("!=", v, self.const(src, 0, lanes))
        if src == "bool":
            if dt.is_float(dst):
                return b.uitofp(v, tt)
            return b.zext(v, tt)
        if dt.is_float(src) and dt.is_float(dst):
            return b.fpext(v, tt) if dt.bits(dst) > dt.bits(src) else b.fptrunc(v, tt)
        if dt.is_float(src):
            if dt.is_signed(dst):
                return b.fptosi(v, tt)
            if dt.bits(dst) < 64:  # numpy wraps negatives: go through int64
                w = b.fptosi(v, vec_type("int64", lanes))
                return b.trunc(w, tt)
            return b.fptoui(v, tt)
        if dt.is_float(dst):
            return b.sitofp(v, tt) if dt.is_signed(src) else b.uitofp(v, tt)
        sb, db = dt.bits(src), dt.bits(dst)
        c = int_const_value(v)
        if c is not None:
            if not dt.is_signed(src):
                c &= (1 << sb) - 1
            return self.const(dst, c)
        if db == sb:
            return v
        if db < sb:
            return b.trunc(v, tt)
        return b.sext(v, tt) if dt.is_signed(src) else b.zext(v, tt)

    # expressions ------------------------------------------------------------------------
    def expr(self, e):
        meth = _EXPR_DISPATCH.get(type(e))
        if meth is None:
            if isinstance(e, (E.ProducerLoad, E.Reduce)):
                raise BuildError(f"{type(e).__name__} {e} reached the LLVM backend; "
                                 "it must be lowered first (tdsl.lower)")
            raise BuildError(f"the LLVM backend cannot generate {type(e).__name__}: {e}")
        return meth(self, e)

    def e_IntImm(self, e):
        return self.const(e.dtype, e.value)

    def e_FloatImm(self, e):
        return self.const(e.dtype, e.value)

    def e_Var(self, e):
        v = self.env.get(e)
        if v is None:
            raise BuildError(f"variable {e.name!r} is used but not defined (not a parameter, "
                             "loop variable or let variable)")
        return v

    def int_arith(self, op, a, b, dtype):
        ca, cb = int_const_value(a), int_const_value(b)
        bits = dt.bits(dtype) if dtype != "bool" else 1
        if ca is not None and cb is not None:
            val = {"add": ca + cb, "sub": ca - cb, "mul": ca * cb}[op]
            return ir.Constant(a.type, wrap(val, bits) if bits > 1 else val & 1)
        fl = ("nsw",) if self._nsw and dt.is_signed(dtype) and dtype != "bool" else ()
        if op == "add":
            if ca == 0:
                return b
            if cb == 0:
                return a
            return self.builder.add(a, b, flags=fl)
        if op == "sub":
            if cb == 0:
                return a
            return self.builder.sub(a, b, flags=fl)
        if ca == 1:
            return b
        if cb == 1:
            return a
        return self.builder.mul(a, b, flags=fl)

    def _arith(self, e, iop, fop):
        a, b = self.unify(self.expr(e.a), self.expr(e.b))
        if dt.is_float(e.dtype):
            return getattr(self.builder, fop)(a, b, flags=FAST_MATH)
        return self.int_arith(iop, a, b, e.dtype)

    def e_Add(self, e):
        return self._arith(e, "add", "fadd")

    def e_Sub(self, e):
        return self._arith(e, "sub", "fsub")

    def e_Mul(self, e):
        return self._arith(e, "mul", "fmul")

    def e_Div(self, e):
        if not dt.is_float(e.dtype):
            return self.e_FloorDiv(e)
        a, b = self.unify(self.expr(e.a), self.expr(e.b))
        return self.builder.fdiv(a, b, flags=FAST_MATH + ("arcp",))

    def e_FloorDiv(self, e):
        a, b = self.unify(self.expr(e.a), self.expr(e.b))
        if dt.is_float(e.dtype):
            q = self.builder.fdiv(a, b)
            return intrinsics.Math(self, q.type).intr("floor", q)
        return intdiv.floordiv(self, a, b, e.dtype, e.b)

    def e_FloorMod(self, e):
        a, b = self.unify(self.expr(e.a), self.expr(e.b))
        if dt.is_float(e.dtype):
            bl = self.builder
            q = intrinsics.Math(self, a.type).intr("floor", bl.fdiv(a, b))
            return bl.fsub(a, bl.fmul(b, q))
        return intdiv.floormod(self, a, b, e.dtype, e.b)

    def _minmax(self, e, is_max):
        a, b = self.unify(self.expr(e.a), self.expr(e.b))
        bl = self.builder
        if dt.is_float(e.dtype):
            # numpy.maximum/minimum: NaN in either operand propagates
            if _not_nan_constant(a) and not _not_nan_constant(b):
                a, b = b, a
            if _not_nan_constant(b):
                # a clamp's bound: only `a` can be NaN, and maxps(b, a) returns a then; a
                # scalar takes one unordered compare (maxss), not a NaN test of each side
                r = self._x86_minmax(b, a, is_max)
                if r is not None:
                    return r
                return bl.select(bl.fcmp_unordered(">=" if is_max else "<=", a, b), a, b)
            r = self._x86_minmax(b, a, is_max)
            if r is not None:
                # maxps(b, a) is `b > a ? b : a`, a when either is NaN; then b's NaN
                # replaces it: three operations where a NaN test of each operand took
                # four (LLVM folds the generic form back into those four)
                return bl.select(bl.fcmp_unordered("uno", b, b), b, r)
            c = bl.fcmp_ordered(">=" if is_max else "<=", a, b)
            c = bl.or_(c, bl.fcmp_unordered("uno", a, a))
            return bl.select(c, a, b)
        if e.dtype == "bool" or not dt.is_signed(e.dtype):
            c = bl.icmp_unsigned(">" if is_max else "<", a, b)
        else:
            c = bl.icmp_signed(">" if is_max else "<", a, b)
        return bl.select(c, a, b)

    _X86_MINMAX = {16: "llvm.x86.avx512.{}.ps.512", 8: "llvm.x86.avx.{}.ps.256"}   # by lanes

    def _x86_minmax(self, b, a, is_max):
        """x86's maxps/minps of float32 vectors of a whole register, else None."""
        t = self.mb.target
        if t.description.arch != "x86_64" or not isinstance(b.type, ir.VectorType) or \
                b.type.element != ir.FloatType():
            return None
        width = b.type.count * 32
        name = self._X86_MINMAX.get(b.type.count)
        if name is None or width > t.vector_bits:
            return None
        name = name.format("max" if is_max else "min")
        if width == 512:     # with the rounding argument (4: the current mode)
            fn = self.mb.intrinsic(name, b.type, [b.type, b.type, I32])
            return self.builder.call(fn, [b, a, ir.Constant(I32, 4)])
        fn = self.mb.intrinsic(name, b.type, [b.type, b.type])
        return self.builder.call(fn, [b, a])

    def e_Min(self, e):
        return self._minmax(e, False)

    def e_Max(self, e):
        return self._minmax(e, True)

    def e_Cmp(self, e):
        op = _CMP[type(e)]
        a, b = self.unify(self.expr(e.a), self.expr(e.b))
        bl = self.builder
        t = e.a.dtype
        if dt.is_float(t):
            if op == "!=":
                return bl.fcmp_unordered("!=", a, b)
            return bl.fcmp_ordered(op, a, b)
        if t == "bool" or not dt.is_signed(t):
            return bl.icmp_unsigned(op, a, b)
        ca, cb = int_const_value(a), int_const_value(b)
        if ca is not None and cb is not None:
            return ir.Constant(I1, int(_PY_CMP[op](ca, cb)))
        return bl.icmp_signed(op, a, b)

    def e_And(self, e):
        if has_load(e.b):
            return self.lazy_select(e.a, e.b, E.IntImm(0, "bool"))
        a, b = self.unify(self.expr(e.a), self.expr(e.b))
        return self.builder.and_(a, b)

    def e_Or(self, e):
        if has_load(e.b):
            return self.lazy_select(e.a, E.IntImm(1, "bool"), e.b)
        a, b = self.unify(self.expr(e.a), self.expr(e.b))
        return self.builder.or_(a, b)

    def e_Not(self, e):
        a = self.expr(e.a)
        return self.builder.xor(a, self.const("bool", 1, lanes_of(a)))

    def e_Cast(self, e):
        return self.cast(self.expr(e.value), e.value.dtype, e.dtype)

    def e_Call(self, e):
        return intrinsics.emit_call(self, e)

    def e_Select(self, e):
        if has_load(e.t) or has_load(e.f):
            v = select_load.try_emit(self, e)
            if v is not None:
                return v
            return self.lazy_select(e.cond, e.t, e.f)
        c = self.expr(e.cond)
        t, f = self.unify(self.expr(e.t), self.expr(e.f))
        if lanes_of(c) > 1 and lanes_of(t) == 1:
            t, f = self.splat(t, lanes_of(c)), self.splat(f, lanes_of(c))
        # (a scalar condition selects whole vectors)
        return self.builder.select(c, t, f)

    def lazy_select(self, cond, t_expr, f_expr):
        """`cond ? t : f` evaluating only the chosen side (memory reads stay guarded)."""
        c = self.expr(cond)
        cc = int_const_value(c)
        if cc is not None:
            return self.expr(t_expr if cc else f_expr)
        bl = self.builder
        if lanes_of(c) > 1:
            # lane-varying: evaluate each side under its mask
            ctx = self.vec
            old = ctx.mask
            notc = bl.xor(c, self.const("bool", 1, ctx.count))
            ctx.mask = c if old is None else bl.and_(old, c)
            tv = self.splat(self.expr(t_expr), ctx.count)
            ctx.mask = notc if old is None else bl.and_(old, notc)
            fv = self.splat(self.expr(f_expr), ctx.count)
            ctx.mask = old
            return bl.select(c, tv, fv)
        tb, fb, mb = self.new_block("sel.t"), self.new_block("sel.f"), self.new_block("sel.end")
        bl.cbranch(c, tb, fb)
        bl.position_at_end(tb)
        tv = self.expr(t_expr)
        t_end = bl.block
        bl.position_at_end(fb)
        fv = self.expr(f_expr)
        f_end = bl.block
        lanes = max(lanes_of(tv), lanes_of(fv))
        if lanes_of(tv) != lanes:
            bl.position_at_end(t_end)
            tv = self.splat(tv, lanes)
        if lanes_of(fv) != lanes:
            bl.position_at_end(f_end)
            fv = self.splat(fv, lanes)
        bl.position_at_end(t_end)
        bl.branch(mb)
        bl.position_at_end(f_end)
        bl.branch(mb)
        bl.position_at_end(mb)
        phi = bl.phi(tv.type)
        phi.add_incoming(tv, t_end)
        phi.add_incoming(fv, f_end)
        return phi

    def e_BufferLoad(self, e):
        return memory.load(self, e)


_EXPR_DISPATCH = {}
for _cls in (E.IntImm, E.FloatImm, E.Var, E.Add, E.Sub, E.Mul, E.Div, E.FloorDiv, E.FloorMod,
             E.Min, E.Max, E.And, E.Or, E.Not, E.Cast, E.Call, E.Select, E.BufferLoad):
    _EXPR_DISPATCH[_cls] = getattr(ExprEmitter, "e_" + _cls.__name__)
for _cls in _CMP:
    _EXPR_DISPATCH[_cls] = ExprEmitter.e_Cmp


def _not_nan_constant(v) -> bool:
    """Whether LLVM value `v` is a float constant (scalar or vector) with no NaN in it."""
    if not isinstance(v, ir.Constant):
        return False
    c = v.constant
    vals = c if isinstance(c, (list, tuple)) else [c]
    out = []
    for x in vals:
        x = x.constant if isinstance(x, ir.Constant) else x
        if not isinstance(x, (int, float)):
            return False
        out.append(x)
    return bool(out) and all(x == x for x in out)
