"""The LLVM backend: loop IR (`PrimFunc`) -> LLVM IR (llvmlite) -> a callable `Module`.

Entry point: `build(func, target="llvm") -> tdsl.runtime.module.Module`.
`codegen(func, target)` gives the unoptimised LLVM IR text and the call signature without
compiling; `tdsl.runtime.cpu` compiles (O3, new pass manager) and caches by that text.

The ABI of the generated function `tdsl_<name>` (C calling convention):

    int32_t tdsl_<name>(T0 *p0, T1 *p1, ..., int64_t n, double alpha, ...)

one argument per `func.params` entry in order: a buffer is a pointer to its first element
(row-major, contiguous; `bool` is one byte), an integer or bool scalar an `int64_t`, a float
scalar a `double`. The return value is 0, or 1 when a heap allocation failed. Every module
also defines `int32_t __tdsl_num_threads` (threads used by parallel loops; the runtime sets
it) and `const char *__tdsl_signature(void)` (the JSON signature, see
`tdsl.runtime.module.Signature`).

Code generation, briefly:
- Serial loops are plain LLVM loops; unrolled loops repeat the body with the loop variable
  as a constant; vectorized loops become one copy of the body in explicit LLVM vector IR
  (`<L x T>`), with uniform values kept scalar. Accesses whose flat index is linear in the
  lane variable with coefficient 1 are contiguous vector loads/stores, uniform ones scalar
  loads, others gathers/scatters. Lane-varying conditions (`if`, `select`, `&&`, `||`) become
  masks, so guarded memory accesses are masked loads/stores and never touch memory a serial
  loop would not. When the body cannot be vectorized exactly (inner loops, allocations,
  a dependence between lanes through memory) the loop is emitted serially; the reason is
  recorded in `Module.notes` (and `last_notes()`).
- Parallel loops are outlined into a function that takes the captured buffers (noalias)
  and scalars as arguments; a trampoline unpacks a closure and a per-site fork-join splits
  the range into contiguous chunks over `pthread_create`d threads, the calling thread runs
  chunk 0. A parallel loop nested in another runs serially.
- `Allocate`: constant sizes up to 32 KiB are `alloca`s in the entry block (align 64), the
  rest `aligned_alloc(64, ...)` / `free`.
"""
from __future__ import annotations

import json
import re
from typing import Dict, List, Optional

from llvmlite import ir

from .. import dtype as dt
from ..errors import BuildError, InternalError
from ..ir import expr as E
from ..ir import stmt as S
from ..ir.visitor import substitute
from . import llvm_intrinsics
from .target import parse_target, LLVMTarget

I1 = ir.IntType(1)
I8 = ir.IntType(8)
I32 = ir.IntType(32)
I64 = ir.IntType(64)
PTR = ir.PointerType()
_FLOATS = {"float16": ir.HalfType(), "float32": ir.FloatType(), "float64": ir.DoubleType()}
_FM = ("contract", "reassoc")           # fast-math for user arithmetic (no nnan/ninf)
ALLOCA_MAX_BYTES = 32 * 1024
MAX_THREADS = 256
MAX_UNROLL = 1024
MAX_LANES = 256

SIGNATURE_ABI = 1


# ----------------------------------------------------------------------------------------
# types


def scalar_type(dtype: str, mem: bool = False):
    if dtype == "bool":
        return I8 if mem else I1
    if dtype in _FLOATS:
        return _FLOATS[dtype]
    if dt.is_int(dtype):
        return ir.IntType(dt.bits(dtype))
    raise BuildError(f"the LLVM backend does not support dtype {dtype!r}")


def vec_type(dtype: str, lanes: int, mem: bool = False):
    t = scalar_type(dtype, mem)
    return t if lanes == 1 else ir.VectorType(t, lanes)


def abi_type(dtype: str):
    """How a scalar parameter of `dtype` is passed: double for floats, i64 otherwise."""
    return ir.DoubleType() if dt.is_float(dtype) else I64


def lanes_of(v) -> int:
    return v.type.count if isinstance(v.type, ir.VectorType) else 1


def _int_const_value(v):
    if isinstance(v, ir.Constant) and isinstance(v.type, ir.IntType) \
            and isinstance(v.constant, int):
        return v.constant
    return None


def _wrap(value: int, bits: int) -> int:
    value &= (1 << bits) - 1
    return value - (1 << bits) if value >= 1 << (bits - 1) else value


def _sanitize(name: str) -> str:
    s = re.sub(r"[^A-Za-z0-9_]", "_", name or "main")
    return s if s else "main"


# ----------------------------------------------------------------------------------------
# structural helpers over the IR


def _structural_key(e):
    """A hashable key equal for structurally equal expressions (Vars/Buffers by identity)."""
    if isinstance(e, E.Var):
        return ("V", id(e))
    if isinstance(e, (E.IntImm, E.FloatImm)):
        return (type(e).__name__, e.dtype, e.value)
    if isinstance(e, E.BufferLoad):
        return ("L", id(e.buffer)) + tuple(_structural_key(i) for i in e.indices)
    if isinstance(e, E.BinaryOp):
        return (type(e).__name__, _structural_key(e.a), _structural_key(e.b))
    if isinstance(e, E.Not):
        return ("Not", _structural_key(e.a))
    if isinstance(e, E.Cast):
        return ("Cast", e.dtype, _structural_key(e.value))
    if isinstance(e, E.Select):
        return ("Sel", _structural_key(e.cond), _structural_key(e.t), _structural_key(e.f))
    if isinstance(e, E.Call):
        return ("Call", e.name, e.dtype) + tuple(_structural_key(a) for a in e.args)
    return ("id", id(e))


def _iter_children(e):
    if isinstance(e, E.BinaryOp):
        return (e.a, e.b)
    if isinstance(e, E.Not):
        return (e.a,)
    if isinstance(e, E.Select):
        return (e.cond, e.t, e.f)
    if isinstance(e, E.Cast):
        return (e.value,)
    if isinstance(e, E.Call):
        return e.args
    if isinstance(e, E.BufferLoad):
        return e.indices
    return ()


def _expr_vars(e, out: set):
    stack = [e]
    while stack:
        x = stack.pop()
        if isinstance(x, E.Var):
            out.add(x)
        else:
            stack.extend(_iter_children(x))
    return out


def _has_load(e) -> bool:
    stack = [e]
    while stack:
        x = stack.pop()
        if isinstance(x, E.BufferLoad):
            return True
        stack.extend(_iter_children(x))
    return False


def _collect_refs(stmt, vars_: dict, bufs: dict):
    """Vars and Buffers referenced under `stmt` (dicts used as ordered sets)."""
    def ex(e):
        stack = [e]
        while stack:
            x = stack.pop()
            if isinstance(x, E.Var):
                vars_[x] = None
            elif isinstance(x, E.BufferLoad):
                bufs[x.buffer] = None
                stack.extend(x.indices)
            else:
                stack.extend(_iter_children(x))

    def st(s):
        if isinstance(s, S.SeqStmt):
            for c in s.stmts:
                st(c)
        elif isinstance(s, S.For):
            ex(s.min); ex(s.extent); st(s.body)
        elif isinstance(s, S.LetStmt):
            ex(s.value); st(s.body)
        elif isinstance(s, S.IfThenElse):
            ex(s.cond); st(s.then_case)
            if s.else_case is not None:
                st(s.else_case)
        elif isinstance(s, S.BufferStore):
            bufs[s.buffer] = None
            ex(s.value)
            for i in s.indices:
                ex(i)
        elif isinstance(s, S.Allocate):
            for d in s.buffer.shape:
                ex(d)
            st(s.body)
        elif isinstance(s, S.Evaluate):
            ex(s.value)
    st(stmt)


def _stored_buffers(stmt) -> set:
    out = set()

    def st(s):
        if isinstance(s, S.SeqStmt):
            for c in s.stmts:
                st(c)
        elif isinstance(s, (S.For, S.LetStmt, S.Allocate)):
            st(s.body)
        elif isinstance(s, S.IfThenElse):
            st(s.then_case)
            if s.else_case is not None:
                st(s.else_case)
        elif isinstance(s, S.BufferStore):
            out.add(s.buffer)
    st(stmt)
    return out


# ----------------------------------------------------------------------------------------
# lane analysis for vectorized loops


def _local_linear(e, v):
    """Coefficient of `v` in integer expression `e` if `e` is affine in `v`, else None."""
    if e is v:
        return 1
    if isinstance(e, (E.IntImm, E.Var)):
        return 0
    if isinstance(e, E.Add):
        a, b = _local_linear(e.a, v), _local_linear(e.b, v)
        return None if a is None or b is None else a + b
    if isinstance(e, E.Sub):
        a, b = _local_linear(e.a, v), _local_linear(e.b, v)
        return None if a is None or b is None else a - b
    if isinstance(e, E.Mul):
        a, b = _local_linear(e.a, v), _local_linear(e.b, v)
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
            return _local_linear(e.value, v)
    if v in _expr_vars(e, set()):
        return None
    return 0


def _arith_linear(e, v, lo, extent):
    """Ask tdsl.arith (when it exists) for the coefficient; None when it cannot tell."""
    try:
        from ..arith import linear_coeff  # noqa: WPS433 (optional dependency)
    except Exception:
        return None
    try:
        res = linear_coeff(e, v, {v: E.Range(lo, extent)})
    except Exception:
        return None
    if res is None:
        return None
    c = res[0] if isinstance(res, tuple) else res
    try:
        return int(c)
    except (TypeError, ValueError):
        return None


class _Lanes:
    """What varies across the lanes of a vectorized loop: the lane variable and the let
    variables whose values depend on it (with their definitions inlined)."""

    def __init__(self, var: E.Var, lo: E.Expr, lanes: int):
        self.var = var
        self.lo = lo
        self.lanes = lanes
        self.lets: Dict[E.Var, E.Expr] = {}
        self._coeff_cache = {}

    def is_varying(self, e) -> bool:
        fv = _expr_vars(e, set())
        return self.var in fv or any(x in self.lets for x in fv)

    def inline(self, e):
        if not self.lets:
            return e
        fv = _expr_vars(e, set())
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
        c = _local_linear(e, self.var)
        if c is None:
            c = _arith_linear(e, self.var, self.lo, E.IntImm(self.lanes, self.var.dtype))
        self._coeff_cache[key] = (e, c)
        return c


def vector_legality(loop: S.For) -> Optional[str]:
    """None when `loop` (VECTORIZED, constant extent) can be emitted as vector IR exactly;
    otherwise the reason it runs as a scalar loop."""
    if not isinstance(loop.extent, E.IntImm):
        return "the extent is not a constant"
    if not 1 <= loop.extent.value <= MAX_LANES:
        return f"the extent {loop.extent.value} is not in [1, {MAX_LANES}]"
    lanes = _Lanes(loop.var, loop.min, loop.extent.value)
    accesses = []  # (buffer, is_store, index key, index varying, value varying, masked)
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
                accesses.append((x.buffer, False, _structural_key(idx), lanes.index_varies(idx),
                                 False, masked, idx))
            stack.extend(_iter_children(x))

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
            loads(s.value, masked)
            loads(s.indices[0], masked)
            idx = lanes.inline(s.indices[0])
            accesses.append((s.buffer, True, _structural_key(idx), lanes.index_varies(idx),
                             lanes.is_varying(s.value), masked, idx))
        elif isinstance(s, S.Evaluate):
            loads(s.value, masked)
        elif isinstance(s, S.For):
            problems.append("the body contains a loop")
        elif isinstance(s, S.Allocate):
            problems.append("the body allocates")
        elif isinstance(s, S.Barrier):
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
        if len(keys) > 1:
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


# ----------------------------------------------------------------------------------------
# module-level state


class _ModuleBuilder:
    def __init__(self, func: S.PrimFunc, target: LLVMTarget):
        self.func = func
        self.target = target
        self.symbol = "tdsl_" + _sanitize(func.name)
        self.module = ir.Module(name=self.symbol)
        self.module.triple = target.triple
        self.module.data_layout = target.data_layout
        self._decls = {}
        self._counter = 0
        self.notes: List[str] = []
        self._threads = None
        from ..runtime import threadpool
        self.use_pool = threadpool.load_into_jit()

    def fresh(self, stem):
        self._counter += 1
        return f"{self.symbol}_{stem}{self._counter}"

    def add_fn_attrs(self, fn, internal=False):
        fn.attributes.add("nounwind")
        # llvmlite only knows enum attributes; string attributes go into the set directly.
        set.add(fn.attributes, f'"target-cpu"="{self.target.cpu}"')
        if self.target.features:
            set.add(fn.attributes, f'"target-features"="{self.target.features}"')
        if self.target.has_avx512:
            set.add(fn.attributes, '"prefer-vector-width"="512"')
            set.add(fn.attributes, '"min-legal-vector-width"="512"')
        if internal:
            fn.linkage = "internal"

    def declare(self, name, ret, args):
        fn = self._decls.get(name)
        if fn is None:
            existing = self.module.globals.get(name)
            if existing is not None:
                fn = existing
            else:
                fn = ir.Function(self.module, ir.FunctionType(ret, list(args)), name)
            self._decls[name] = fn
        return fn

    intrinsic = declare

    @property
    def num_threads_global(self):
        if self._threads is None:
            g = ir.GlobalVariable(self.module, I32, "__tdsl_num_threads")
            g.initializer = ir.Constant(I32, 1)
            g.align = 4
            self._threads = g
        return self._threads

    def add_signature(self, text: str):
        data = bytearray(text.encode("utf-8") + b"\0")
        arr = ir.ArrayType(I8, len(data))
        g = ir.GlobalVariable(self.module, arr, "__tdsl_signature_data")
        g.initializer = ir.Constant(arr, data)
        g.global_constant = True
        g.linkage = "internal"
        fn = ir.Function(self.module, ir.FunctionType(PTR, []), "__tdsl_signature")
        fn.attributes.add("nounwind")
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        b.ret(b.bitcast(g, PTR))


class _VecCtx:
    def __init__(self, lanes_info: _Lanes, lo_val, count: int):
        self.info = lanes_info
        self.lo_val = lo_val          # scalar LLVM value of the loop min (lane 0)
        self.count = count
        self.mask = None              # None (all lanes) or <count x i1>


# ----------------------------------------------------------------------------------------
# function emitter


class FunctionEmitter:
    """Emits statements and expressions of one LLVM function."""

    def __init__(self, mb: _ModuleBuilder, fn: ir.Function, in_parallel: bool = False):
        self.mb = mb
        self.fn = fn
        self.in_parallel = in_parallel
        self.entry = fn.append_basic_block("entry")
        start = fn.append_basic_block("start")
        self.alloca_builder = ir.IRBuilder(self.entry)
        self.builder = ir.IRBuilder(start)
        self._start = start
        self.env: Dict[E.Var, ir.Value] = {}
        self.bufs: Dict[S.Buffer, ir.Value] = {}
        self.vec: Optional[_VecCtx] = None
        self._nsw = False

    def finish(self):
        if not self.builder.block.is_terminated:
            self.builder.ret(ir.Constant(I32, 0))
        self.alloca_builder.branch(self._start)

    # small helpers --------------------------------------------------------------------
    def const(self, dtype, value, lanes=1):
        t = scalar_type(dtype)
        if dt.is_float(dtype):
            value = float(value)
        elif dtype == "bool":
            value = int(bool(value))
        else:
            value = _wrap(int(value), dt.bits(dtype))
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
        c = _int_const_value(v)
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
        return self.to_i64(self.index_value(idx), idx.dtype)

    def new_block(self, name):
        return self.fn.append_basic_block(name)

    def fail(self, code):
        """Returns error `code` from the function (current block ends)."""
        self.builder.ret(ir.Constant(I32, code))

    # casts ------------------------------------------------------------------------------
    def cast(self, v, src: str, dst: str):
        if src == dst:
            return v
        b = self.builder
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
        c = _int_const_value(v)
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

    def _int_arith(self, op, a, b, dtype):
        ca, cb = _int_const_value(a), _int_const_value(b)
        bits = dt.bits(dtype) if dtype != "bool" else 1
        if ca is not None and cb is not None:
            val = {"add": ca + cb, "sub": ca - cb, "mul": ca * cb}[op]
            return ir.Constant(a.type, _wrap(val, bits) if bits > 1 else val & 1)
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
            return getattr(self.builder, fop)(a, b, flags=_FM)
        return self._int_arith(iop, a, b, e.dtype)

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
        return self.builder.fdiv(a, b)

    def e_FloorDiv(self, e):
        a, b = self.unify(self.expr(e.a), self.expr(e.b))
        if dt.is_float(e.dtype):
            q = self.builder.fdiv(a, b)
            return llvm_intrinsics._Math(self, q.type).intr("floor", q)
        return self.floordiv(a, b, e.dtype, e.b)

    def e_FloorMod(self, e):
        a, b = self.unify(self.expr(e.a), self.expr(e.b))
        if dt.is_float(e.dtype):
            bl = self.builder
            q = llvm_intrinsics._Math(self, a.type).intr("floor", bl.fdiv(a, b))
            return bl.fsub(a, bl.fmul(b, q))
        return self.floormod(a, b, e.dtype, e.b)

    def floordiv(self, a, b, dtype, bexpr=None):
        bl = self.builder
        lanes = lanes_of(a)
        c = bexpr.value if isinstance(bexpr, E.IntImm) else _int_const_value(b)
        signed = dt.is_signed(dtype)
        ca = _int_const_value(a)
        if c is not None and ca is not None and c != 0:
            return self.const(dtype, ca // c if signed else (ca % (1 << dt.bits(dtype))) // c)
        if c is not None and c > 0 and c & (c - 1) == 0:
            k = c.bit_length() - 1
            if k == 0:
                return a
            sh = self.const(dtype, k, lanes)
            return bl.ashr(a, sh) if signed else bl.lshr(a, sh)
        if not signed:
            if c is not None and c != 0:
                return bl.udiv(a, b)
            zero = self.const(dtype, 0, lanes)
            is0 = bl.icmp_unsigned("==", b, zero)
            safe = bl.select(is0, self.const(dtype, 1, lanes), b)
            return bl.select(is0, zero, bl.udiv(a, safe))
        if c is not None and c not in (0, -1):
            q = bl.sdiv(a, b)
            r = bl.srem(a, b)
            zero = self.const(dtype, 0, lanes)
            if c > 0:
                adj = bl.icmp_signed("<", r, zero)
            else:
                adj = bl.icmp_signed(">", r, zero)
            return bl.sub(q, bl.zext(adj, q.type))
        # general divisor: guard 0 (-> 0, as numpy) and -1 (INT_MIN / -1 traps)
        zero = self.const(dtype, 0, lanes)
        one = self.const(dtype, 1, lanes)
        m1 = self.const(dtype, -1, lanes)
        is0 = bl.icmp_signed("==", b, zero)
        ism1 = bl.icmp_signed("==", b, m1)
        safe = bl.select(bl.or_(is0, ism1), one, b)
        q = bl.sdiv(a, safe)
        r = bl.srem(a, safe)
        adj = bl.and_(bl.icmp_signed("!=", r, zero),
                      bl.icmp_signed("<", bl.xor(r, safe), zero))
        q = bl.sub(q, bl.zext(adj, q.type))
        q = bl.select(ism1, bl.sub(zero, a), q)
        return bl.select(is0, zero, q)

    def floormod(self, a, b, dtype, bexpr=None):
        bl = self.builder
        lanes = lanes_of(a)
        c = bexpr.value if isinstance(bexpr, E.IntImm) else _int_const_value(b)
        signed = dt.is_signed(dtype)
        ca = _int_const_value(a)
        if c is not None and ca is not None and c != 0:
            return self.const(dtype, ca % c if signed else (ca % (1 << dt.bits(dtype))) % c)
        if c is not None and c > 0 and c & (c - 1) == 0:
            return bl.and_(a, self.const(dtype, c - 1, lanes))
        zero = self.const(dtype, 0, lanes)
        if not signed:
            if c is not None and c != 0:
                return bl.urem(a, b)
            is0 = bl.icmp_unsigned("==", b, zero)
            safe = bl.select(is0, self.const(dtype, 1, lanes), b)
            return bl.select(is0, zero, bl.urem(a, safe))
        if c is not None and c not in (0, -1):
            r = bl.srem(a, b)
            adj = bl.icmp_signed("<", r, zero) if c > 0 else bl.icmp_signed(">", r, zero)
            return bl.add(r, bl.select(adj, b, zero))
        is0 = bl.icmp_signed("==", b, zero)
        ism1 = bl.icmp_signed("==", b, self.const(dtype, -1, lanes))
        bad = bl.or_(is0, ism1)
        safe = bl.select(bad, self.const(dtype, 1, lanes), b)
        r = bl.srem(a, safe)
        adj = bl.and_(bl.icmp_signed("!=", r, zero),
                      bl.icmp_signed("<", bl.xor(r, safe), zero))
        r = bl.add(r, bl.select(adj, safe, zero))
        return bl.select(bad, zero, r)

    def _minmax(self, e, is_max):
        a, b = self.unify(self.expr(e.a), self.expr(e.b))
        bl = self.builder
        if dt.is_float(e.dtype):
            # numpy.maximum/minimum: NaN in either operand propagates
            c = bl.fcmp_ordered(">=" if is_max else "<=", a, b)
            c = bl.or_(c, bl.fcmp_unordered("uno", a, a))
            return bl.select(c, a, b)
        if e.dtype == "bool" or not dt.is_signed(e.dtype):
            c = bl.icmp_unsigned(">" if is_max else "<", a, b)
        else:
            c = bl.icmp_signed(">" if is_max else "<", a, b)
        return bl.select(c, a, b)

    def e_Min(self, e):
        return self._minmax(e, False)

    def e_Max(self, e):
        return self._minmax(e, True)

    _CMP = {E.EQ: "==", E.NE: "!=", E.LT: "<", E.LE: "<=", E.GT: ">", E.GE: ">="}

    def e_Cmp(self, e):
        op = self._CMP[type(e)]
        a, b = self.unify(self.expr(e.a), self.expr(e.b))
        bl = self.builder
        t = e.a.dtype
        if dt.is_float(t):
            if op == "!=":
                return bl.fcmp_unordered("!=", a, b)
            return bl.fcmp_ordered(op, a, b)
        if t == "bool" or not dt.is_signed(t):
            return bl.icmp_unsigned(op, a, b)
        ca, cb = _int_const_value(a), _int_const_value(b)
        if ca is not None and cb is not None:
            import operator
            f = {"==": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le,
                 ">": operator.gt, ">=": operator.ge}[op]
            return ir.Constant(I1, int(f(ca, cb)))
        return bl.icmp_signed(op, a, b)

    def e_And(self, e):
        if _has_load(e.b):
            return self.lazy_select(e.a, e.b, E.IntImm(0, "bool"))
        a, b = self.unify(self.expr(e.a), self.expr(e.b))
        return self.builder.and_(a, b)

    def e_Or(self, e):
        if _has_load(e.b):
            return self.lazy_select(e.a, E.IntImm(1, "bool"), e.b)
        a, b = self.unify(self.expr(e.a), self.expr(e.b))
        return self.builder.or_(a, b)

    def e_Not(self, e):
        a = self.expr(e.a)
        return self.builder.xor(a, self.const("bool", 1, lanes_of(a)))

    def e_Cast(self, e):
        return self.cast(self.expr(e.value), e.value.dtype, e.dtype)

    def e_Call(self, e):
        return llvm_intrinsics.emit_call(self, e)

    def e_Select(self, e):
        if _has_load(e.t) or _has_load(e.f):
            return self.lazy_select(e.cond, e.t, e.f)
        c = self.expr(e.cond)
        t, f = self.unify(self.expr(e.t), self.expr(e.f))
        if lanes_of(c) > 1 and lanes_of(t) == 1:
            t, f = self.splat(t, lanes_of(c)), self.splat(f, lanes_of(c))
        elif lanes_of(t) > 1 and lanes_of(c) == 1:
            pass  # scalar condition selects whole vectors
        return self.builder.select(c, t, f)

    def lazy_select(self, cond, t_expr, f_expr):
        """`cond ? t : f` evaluating only the chosen side (memory reads stay guarded)."""
        c = self.expr(cond)
        cc = _int_const_value(c)
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

    # memory -----------------------------------------------------------------------------
    def buffer_ptr(self, buf):
        p = self.bufs.get(buf)
        if p is None:
            raise BuildError(f"buffer {buf.name!r} is accessed but is neither a parameter "
                             "nor allocated in an enclosing Allocate")
        return p

    def elem_ptr(self, buf, idx64):
        return self.builder.gep(self.buffer_ptr(buf), [idx64],
                                source_etype=scalar_type(buf.dtype, mem=True), inbounds=True)

    def _flat_index(self, node, indices):
        if len(indices) != 1:
            raise BuildError(f"{node} reached the LLVM backend with {len(indices)} indices; "
                             "buffers must be flattened to one index first")
        return indices[0]

    def _from_mem(self, v, dtype):
        if dtype == "bool":
            return self.builder.icmp_unsigned("!=", v, ir.Constant(v.type, None))
        return v

    def _to_mem(self, v, dtype):
        if dtype == "bool":
            t = v.type
            return self.builder.zext(v, ir.VectorType(I8, t.count)
                                     if isinstance(t, ir.VectorType) else I8)
        return v

    def e_BufferLoad(self, e):
        idx = self._flat_index(e, e.indices)
        if self.vec is not None:
            return self.vector_load(e.buffer, idx)
        iv = self.index(idx)
        buf = e.buffer
        v = self.builder.load(self.elem_ptr(buf, iv), typ=scalar_type(buf.dtype, True),
                              align=dt.itemsize(buf.dtype))
        return self._from_mem(v, buf.dtype)

    def _at_lane0(self, idx):
        ctx = self.vec
        var = ctx.info.var
        saved = self.env.get(var)
        self.vec = None
        self.env[var] = ctx.lo_val
        try:
            return self.index(idx)
        finally:
            self.env[var] = saved
            self.vec = ctx

    def _any_lane(self, mask):
        n = mask.type.count
        fn = self.mb.intrinsic(f"llvm.vector.reduce.or.v{n}i1", I1, [mask.type])
        return self.builder.call(fn, [mask])

    def _vector_ptrs(self, buf, idx):
        vi = self.to_i64(self.splat(self.index_value(idx), self.vec.count), idx.dtype)
        g = self.builder.gep(self.buffer_ptr(buf), [vi],
                             source_etype=scalar_type(buf.dtype, True), inbounds=True)
        g.type = ir.VectorType(PTR, self.vec.count)
        return g

    def vector_load(self, buf, idx):
        ctx = self.vec
        bl = self.builder
        n = ctx.count
        idx = ctx.info.inline(idx)
        mt = scalar_type(buf.dtype, True)
        align = ir.Constant(I32, dt.itemsize(buf.dtype))
        vt = ir.VectorType(mt, n)
        if not ctx.info.index_varies(idx):
            if ctx.mask is None:
                v = bl.load(self.elem_ptr(buf, self._at_lane0(idx)), typ=mt,
                            align=dt.itemsize(buf.dtype))
                return self._from_mem(v, buf.dtype)
            # a uniform read under a mask: read only if some lane is active
            anyl = self._any_lane(ctx.mask)
            rb, jb = self.new_block("ld.any"), self.new_block("ld.join")
            pre = bl.block
            bl.cbranch(anyl, rb, jb)
            bl.position_at_end(rb)
            v = bl.load(self.elem_ptr(buf, self._at_lane0(idx)), typ=mt,
                        align=dt.itemsize(buf.dtype))
            r_end = bl.block
            bl.branch(jb)
            bl.position_at_end(jb)
            phi = bl.phi(mt)
            phi.add_incoming(v, r_end)
            phi.add_incoming(ir.Constant(mt, None), pre)
            return self._from_mem(phi, buf.dtype)
        c = ctx.info.coeff(idx)
        if c == 1:
            base = self._at_lane0(idx)
            p = self.elem_ptr(buf, base)
            if ctx.mask is None:
                v = bl.load(p, typ=vt, align=dt.itemsize(buf.dtype))
            else:
                fn = self.mb.intrinsic(f"llvm.masked.load.v{n}{_esuf(mt)}.p0", vt,
                                       [PTR, I32, ctx.mask.type, vt])
                v = bl.call(fn, [p, align, ctx.mask, ir.Constant(vt, None)])
            return self._from_mem(v, buf.dtype)
        ptrs = self._vector_ptrs(buf, idx)
        mask = ctx.mask if ctx.mask is not None else self.const("bool", 1, n)
        fn = self.mb.intrinsic(f"llvm.masked.gather.v{n}{_esuf(mt)}.v{n}p0", vt,
                               [ptrs.type, I32, mask.type, vt])
        v = bl.call(fn, [ptrs, align, mask, ir.Constant(vt, None)])
        return self._from_mem(v, buf.dtype)

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
        cc = _int_const_value(c)
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

    def s_BufferStore(self, s):
        buf = s.buffer
        idx = self._flat_index(s, s.indices)
        val = self.expr(s.value)
        val = self.cast(val, s.value.dtype, buf.dtype)
        if self.vec is not None:
            return self.vector_store(buf, idx, val)
        iv = self.index(idx)
        self.builder.store(self._to_mem(val, buf.dtype), self.elem_ptr(buf, iv),
                           align=dt.itemsize(buf.dtype))

    def vector_store(self, buf, idx, val):
        ctx = self.vec
        bl = self.builder
        n = ctx.count
        idx = ctx.info.inline(idx)
        mt = scalar_type(buf.dtype, True)
        align = dt.itemsize(buf.dtype)
        if not ctx.info.index_varies(idx):
            if lanes_of(val) > 1:  # the serial loop's last iteration wins
                val = bl.extract_element(val, ir.Constant(I32, n - 1))
            bl.store(self._to_mem(val, buf.dtype), self.elem_ptr(buf, self._at_lane0(idx)),
                     align=align)
            return
        val = self._to_mem(self.splat(val, n), buf.dtype)
        vt = ir.VectorType(mt, n)
        c = ctx.info.coeff(idx)
        if c == 1:
            p = self.elem_ptr(buf, self._at_lane0(idx))
            if ctx.mask is None:
                bl.store(val, p, align=align)
            else:
                fn = self.mb.intrinsic(f"llvm.masked.store.v{n}{_esuf(mt)}.p0", ir.VoidType(),
                                       [vt, PTR, I32, ctx.mask.type])
                bl.call(fn, [val, p, ir.Constant(I32, align), ctx.mask])
            return
        ptrs = self._vector_ptrs(buf, idx)
        mask = ctx.mask if ctx.mask is not None else self.const("bool", 1, n)
        fn = self.mb.intrinsic(f"llvm.masked.scatter.v{n}{_esuf(mt)}.v{n}p0", ir.VoidType(),
                               [vt, ptrs.type, I32, mask.type])
        bl.call(fn, [val, ptrs, ir.Constant(I32, align), mask])

    def s_Allocate(self, s):
        buf = s.buffer
        mt = scalar_type(buf.dtype, True)
        size = 1
        const = True
        for d in buf.shape:
            if isinstance(d, E.IntImm):
                size *= d.value
            else:
                const = False
        nbytes = size * dt.itemsize(buf.dtype)
        saved = self.bufs.get(buf)
        if const and nbytes <= ALLOCA_MAX_BYTES:
            a = self.alloca_builder.alloca(ir.ArrayType(mt, max(size, 1)), name=_sanitize(buf.name))
            a.align = 64
            a.type = PTR  # llvmlite types allocas as typed pointers; ours are opaque
            self.bufs[buf] = a
            self.stmt(s.body)
            self._restore_buf(buf, saved)
            return
        bl = self.builder
        if const:
            nb = ir.Constant(I64, max(nbytes, 1))
        else:
            nb = ir.Constant(I64, dt.itemsize(buf.dtype))
            for d in buf.shape:
                dv = self.to_i64(self.expr(d), d.dtype)
                nb = self._int_arith("mul", nb, dv, "int64")
            nb = bl.select(bl.icmp_signed("<", nb, ir.Constant(I64, 1)), ir.Constant(I64, 1), nb)
        # aligned_alloc wants a multiple of the alignment
        nb = bl.and_(bl.add(nb, ir.Constant(I64, 63)), ir.Constant(I64, -64)) \
            if not isinstance(nb, ir.Constant) else ir.Constant(I64, (nb.constant + 63) // 64 * 64)
        alloc = self.mb.declare("aligned_alloc", PTR, [I64, I64])
        p = bl.call(alloc, [ir.Constant(I64, 64), nb], name=_sanitize(buf.name))
        okb, failb = self.new_block("alloc.ok"), self.new_block("alloc.fail")
        isnull = bl.icmp_unsigned("==", p, ir.Constant(PTR, None))
        bl.cbranch(isnull, failb, okb)
        bl.position_at_end(failb)
        self.fail(1)
        bl.position_at_end(okb)
        self.bufs[buf] = p
        self.stmt(s.body)
        if not bl.block.is_terminated:
            free = self.mb.declare("free", ir.VoidType(), [PTR])
            bl.call(free, [p])
        self._restore_buf(buf, saved)

    def _restore_buf(self, buf, saved):
        if saved is None:
            self.bufs.pop(buf, None)
        else:
            self.bufs[buf] = saved

    # loops ------------------------------------------------------------------------------
    def s_For(self, s):
        kind = s.kind
        if kind == S.ForKind.THREAD_BINDING:
            raise BuildError(f"loop {s.var.name} is bound to {s.thread_tag or 'a GPU thread'}; "
                             "GPU-bound loops cannot be built for the 'llvm' target")
        if self.vec is not None:
            raise InternalError("a loop inside a vectorized body reached the emitter")
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
                from . import llvm_parallel
                return llvm_parallel.emit_parallel_for(self, s)
            self.mb.notes.append(f"parallel loop {s.var.name} inside a parallel loop runs "
                                 "serially")
        lo = self.expr(s.min)
        lo = self.cast(lo, s.min.dtype, s.var.dtype)
        ext = self.cast(self.expr(s.extent), s.extent.dtype, s.var.dtype)
        hi = self._int_arith("add", lo, ext, s.var.dtype)
        self.serial_loop(s.var, lo, hi, s.body)

    def serial_loop(self, var, lo, hi, body):
        """for var in [lo, hi): body  (lo, hi: LLVM values of var's type)."""
        bl = self.builder
        cl, ch = _int_const_value(lo), _int_const_value(hi)
        if cl is not None and ch is not None:
            if ch <= cl:
                return
            if ch == cl + 1:
                return self._bind_and_emit(var, lo, body)
        signed = dt.is_signed(var.dtype)
        cmp = bl.icmp_signed if signed else bl.icmp_unsigned
        pre = bl.block
        header = self.new_block(f"for.{_sanitize(var.name)}")
        exit_ = self.new_block(f"for.{_sanitize(var.name)}.end")
        if cl is not None and ch is not None:
            bl.branch(header)
        else:
            bl.cbranch(cmp("<", lo, hi), header, exit_)
        bl.position_at_end(header)
        phi = bl.phi(lo.type, name=_sanitize(var.name))
        phi.add_incoming(lo, pre)
        self._bind_and_emit(var, phi, body)
        one = ir.Constant(lo.type, 1)
        nxt = bl.add(phi, one, flags=("nsw",) if signed else ("nuw",))
        latch = bl.block
        bl.cbranch(cmp("<", nxt, hi), header, exit_)
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
        for i in range(s.extent.value):
            v = self._int_arith("add", lo, self.const(s.var.dtype, i), s.var.dtype)
            self._bind_and_emit(s.var, v, s.body)

    def vector_for(self, s):
        n = s.extent.value
        lo = self.cast(self.expr(s.min), s.min.dtype, s.var.dtype)
        if n == 1:
            return self._bind_and_emit(s.var, lo, s.body)
        lane_ids = ir.Constant(ir.VectorType(scalar_type(s.var.dtype), n), list(range(n)))
        lanes_val = self.builder.add(self.splat(lo, n), lane_ids) \
            if _int_const_value(lo) != 0 else lane_ids
        info = _Lanes(s.var, s.min, n)
        self.vec = _VecCtx(info, lo, n)
        try:
            self._bind_and_emit(s.var, lanes_val, s.body)
        finally:
            self.vec = None


_MISSING = object()


def _esuf(t):
    if isinstance(t, ir.HalfType):
        return "f16"
    if isinstance(t, ir.FloatType):
        return "f32"
    if isinstance(t, ir.DoubleType):
        return "f64"
    return f"i{t.width}"


_EXPR_DISPATCH = {}
for _cls in (E.IntImm, E.FloatImm, E.Var, E.Add, E.Sub, E.Mul, E.Div, E.FloorDiv, E.FloorMod,
             E.Min, E.Max, E.And, E.Or, E.Not, E.Cast, E.Call, E.Select, E.BufferLoad):
    _EXPR_DISPATCH[_cls] = getattr(FunctionEmitter, "e_" + _cls.__name__)
for _cls in (E.EQ, E.NE, E.LT, E.LE, E.GT, E.GE):
    _EXPR_DISPATCH[_cls] = FunctionEmitter.e_Cmp
_STMT_DISPATCH = {cls: getattr(FunctionEmitter, "s_" + cls.__name__)
                  for cls in (S.SeqStmt, S.Evaluate, S.Barrier, S.LetStmt, S.IfThenElse,
                              S.BufferStore, S.Allocate, S.For)}


# ----------------------------------------------------------------------------------------
# signature


def _dim_code(d, param_index):
    """A buffer dimension as JSON: an int, ["p", i] for scalar param i, or [op, a, b]."""
    if isinstance(d, int):
        return d
    if isinstance(d, E.IntImm):
        return int(d.value)
    if isinstance(d, E.Var):
        i = param_index.get(d)
        if i is None:
            raise BuildError(f"the size {d.name!r} in a buffer shape is not a parameter of the "
                             "function; lowering must append size variables to the params")
        return ["p", i]
    ops = {E.Add: "+", E.Sub: "-", E.Mul: "*", E.FloorDiv: "//", E.FloorMod: "%",
           E.Min: "min", E.Max: "max"}
    op = ops.get(type(d))
    if op is not None:
        return [op, _dim_code(d.a, param_index), _dim_code(d.b, param_index)]
    if isinstance(d, E.Cast):
        return _dim_code(d.value, param_index)
    raise BuildError(f"the buffer dimension {d} cannot be checked at call time")


def make_signature(func: S.PrimFunc, symbol: str) -> dict:
    params = list(func.params)
    param_index = {p: i for i, p in enumerate(params) if isinstance(p, E.Var)}
    nua = func.attrs.get("num_user_args", len(params))
    if not 0 <= nua <= len(params):
        raise BuildError(f"num_user_args={nua} but the function has {len(params)} params")
    written = _stored_buffers(func.body)
    out = []
    seen = set()
    for i, p in enumerate(params):
        if id(p) in seen:
            raise BuildError(f"parameter {p} appears twice in the parameter list")
        seen.add(id(p))
        if isinstance(p, S.Buffer):
            dtype = dt.check(p.dtype)
            out.append({"kind": "buffer", "name": p.name, "dtype": dtype,
                        "shape": [_dim_code(d, param_index) for d in p.shape],
                        "shape_text": [str(d) for d in p.shape],
                        "written": p in written})
        elif isinstance(p, E.Var):
            out.append({"kind": "scalar", "name": p.name, "dtype": dt.check(p.dtype)})
        else:
            raise BuildError(f"parameter {i} is a {type(p).__name__}; params must be "
                             "Buffers or Vars")
    return {"abi": SIGNATURE_ABI, "name": func.name, "symbol": symbol,
            "num_user_args": nua, "params": out}


# ----------------------------------------------------------------------------------------
# entry points

_last_notes: List[str] = []


def last_notes() -> List[str]:
    """Notes from the most recent codegen (loops that fell back to serial, ...)."""
    return list(_last_notes)


def codegen(func: S.PrimFunc, target="llvm"):
    """Returns (unoptimised LLVM IR text, signature dict, notes) for `func`."""
    if not isinstance(func, S.PrimFunc):
        raise BuildError(f"build() needs a PrimFunc, got {type(func).__name__}")
    tgt = parse_target(target)
    mb = _ModuleBuilder(func, tgt)
    sig = make_signature(func, mb.symbol)
    arg_types = []
    for p in func.params:
        arg_types.append(PTR if isinstance(p, S.Buffer) else abi_type(p.dtype))
    fn = ir.Function(mb.module, ir.FunctionType(I32, arg_types), mb.symbol)
    mb.add_fn_attrs(fn)
    em = FunctionEmitter(mb, fn)
    for p, a in zip(func.params, fn.args):
        a.name = _sanitize(p.name)
        if isinstance(p, S.Buffer):
            a.add_attribute("noalias")
            em.bufs[p] = a
        else:
            v = a
            if dt.is_float(p.dtype):
                if p.dtype != "float64":
                    v = em.builder.fptrunc(a, scalar_type(p.dtype))
            elif p.dtype == "bool":
                v = em.builder.icmp_unsigned("!=", a, ir.Constant(I64, 0))
            elif dt.bits(p.dtype) < 64:
                v = em.builder.trunc(a, scalar_type(p.dtype))
            em.env[p] = v
    try:
        em.stmt(func.body)
    except (TypeError, ValueError, AssertionError, AttributeError, KeyError) as e:
        if isinstance(e, BuildError):
            raise
        raise InternalError(f"the LLVM backend failed on function {func.name!r}: "
                            f"{type(e).__name__}: {e}. This is a tdsl bug; please report it "
                            "with the code that built this function.") from e
    em.finish()
    mb.num_threads_global  # always present: the runtime sets it
    mb.add_signature(json.dumps(sig, separators=(",", ":")))
    global _last_notes
    _last_notes = list(mb.notes)
    return str(mb.module), sig, mb.notes


def build(func: S.PrimFunc, target="llvm"):
    """Compiles `func` for the CPU and returns a callable `tdsl.runtime.module.Module`."""
    from ..runtime import cpu
    from ..runtime.module import Module
    tgt = parse_target(target)
    ir_text, sig, notes = codegen(func, tgt)
    art = cpu.compile_ir(ir_text, tgt, sig["symbol"])
    mod = Module(sig, cpu.JITBackend(art, sig))
    mod.notes = list(notes)
    return mod
