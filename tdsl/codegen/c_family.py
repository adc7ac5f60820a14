"""One C-family source printer for the loop IR, with thin target classes (DESIGN.md §8).

`CFamilyPrinter` prints statements and expressions the way all three targets share;
`CUDAPrinter`, `OpenCLPrinter` and `CPrinter` only say how a target spells things: kernel
and address-space keywords, thread indices, barriers, type names, math functions, vector
loads and stores.

- Kernels (CUDA, OpenCL): `print_kernels(func)` prints every kernel recorded by the
  `split_kernels` pass in one translation unit. A loop bound to a thread tag becomes
  `int v = threadIdx.x;` (`get_local_id(0)`), nested loops on one tag share the index;
  shared buffers are declared once at kernel scope (`__shared__` / `__local`), local ones
  as arrays where they are allocated.
- Plain C (`print_c_function(func)`): one function with the CPU ABI of the LLVM backend
  (buffers as pointers, integer scalars as int64_t, float scalars as double, returns 0),
  compiled by the system C compiler.
- Integer `//` and `%` are Python's floor division: printed as C's `/` and `%` only where
  both operands are proven non-negative (tdsl.arith, under the ranges of the enclosing
  loops); otherwise through small helper functions emitted once per type.
- Vectorized loops: a loop whose body is one float32 store with contiguous, 4-aligned
  indices becomes 4-wide vector loads/stores (CUDA `float4`, OpenCL `vload4/vstore4`);
  other vectorized loops are printed as unrolled loops.
"""
from __future__ import annotations

import math
import re
from typing import Dict, List

from .. import arith
from .. import dtype as dt
from ..errors import BuildError
from ..ir import expr as E
from ..ir import stmt as S
from ..ir.expr import Range
from ..ir.printer import Namer

_BIN = {E.Add: "+", E.Sub: "-", E.Mul: "*", E.Div: "/", E.EQ: "==", E.NE: "!=", E.LT: "<",
        E.LE: "<=", E.GT: ">", E.GE: ">=", E.And: "&&", E.Or: "||"}
_F32_MATH = {"exp": "expf", "log": "logf", "sqrt": "sqrtf", "tanh": "tanhf", "erf": "erff",
             "floor": "floorf", "ceil": "ceilf", "round": "rintf", "power": "powf",
             "sin": "sinf", "cos": "cosf", "exp2": "exp2f", "log2": "log2f", "trunc": "truncf",
             "abs": "fabsf", "exp10": "exp10f", "log10": "log10f", "log1p": "log1pf",
             "expm1": "expm1f", "tan": "tanf", "asin": "asinf", "acos": "acosf",
             "atan": "atanf", "sinh": "sinhf", "cosh": "coshf", "asinh": "asinhf",
             "acosh": "acoshf", "atanh": "atanhf", "atan2": "atan2f", "hypot": "hypotf",
             "copysign": "copysignf", "fmod": "fmodf", "ldexp": "ldexpf",
             "nearbyint": "nearbyintf"}
_BITWISE = {"bitwise_and": "&", "bitwise_or": "|", "bitwise_xor": "^"}
_INT_OPS = ("bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not", "shift_left",
            "shift_right", "popcount", "clz")
_CLASSIFY = ("isnan", "isinf", "isfinite")
_F64_MATH = {k: v[:-1] for k, v in _F32_MATH.items()}
_F64_MATH["abs"] = "fabs"
_F64_MATH["power"] = "pow"
_F64_MATH["round"] = "rint"


def _sanitize(name):
    s = re.sub(r"[^0-9A-Za-z_]", "_", name)
    if not s or s[0].isdigit():
        s = "v_" + s
    return s


_RESERVED = {"int", "float", "double", "char", "short", "long", "half", "bool", "if", "else",
             "for", "while", "do", "return", "void", "const", "static", "inline", "kernel",
             "global", "local", "shared", "signed", "unsigned", "struct", "union", "switch",
             "case", "default", "break", "continue", "goto", "sizeof", "volatile", "register",
             "restrict", "auto", "extern", "typedef", "enum", "min", "max", "exp", "log",
             "sqrt", "abs", "uint", "uchar", "ushort", "ulong", "float4", "int4", "select",
             "dim3", "threadIdx", "blockIdx", "blockDim", "gridDim", "printf", "main"}


def _Names():
    return Namer(_sanitize, _RESERVED)


class CFamilyPrinter:
    """Shared printing; subclasses override the target hooks below."""

    target = "c"
    has_threads = False
    vector_width = 0     # 4: float4 loads/stores for vectorized float32 loops

    def __init__(self, size_ranges=None):
        self.helpers: Dict[str, str] = {}
        self.features = set()
        self.base_ranges = dict(size_ranges or {})

    # ------------------------------------------------------------------ target hooks
    def type_name(self, dtype) -> str:
        return {"float32": "float", "float64": "double", "float16": "_Float16",
                "int8": "int8_t", "int16": "int16_t", "int32": "int32_t", "int64": "int64_t",
                "uint8": "uint8_t", "uint16": "uint16_t", "uint32": "uint32_t",
                "uint64": "uint64_t", "bool": "bool"}[dtype]

    def mem_type(self, dtype) -> str:
        """The element type of a buffer in memory (bool is one byte)."""
        if dtype == "bool":
            return self.type_name("uint8")
        return self.type_name(dtype)

    def helper_qual(self) -> str:
        return "static inline"

    def thread_index(self, tag) -> str:
        raise BuildError(f"the {self.target} target has no GPU threads (loop bound to {tag})")

    def barrier(self) -> str:
        return ""

    def shared_decl(self, type_name, name, size) -> str:
        raise BuildError(f"the {self.target} target has no shared memory")

    def int_literal(self, value, dtype):
        if dtype in ("int64",):
            return f"{value}LL" if -2**63 < value else "(-9223372036854775807LL - 1)"
        if dtype == "uint64":
            return f"{value}ULL"
        if dtype == "uint32":
            return f"{value}u"
        if dtype == "int32" and value == -2**31:
            return "(-2147483647 - 1)"
        return str(value)

    def float_literal(self, value, dtype):
        if math.isinf(value):
            inf = self.infinity(dtype)
            return inf if value > 0 else f"(-{inf})"
        if math.isnan(value):
            return self.nan(dtype)
        text = repr(float(value))
        if dtype == "float32":
            return text + "f"
        if dtype == "float16":
            return self.cast_text(text + "f", "float32", "float16")
        return text

    def infinity(self, dtype):
        return "INFINITY" if dtype != "float64" else "((double)INFINITY)"

    def nan(self, dtype):
        return "NAN" if dtype != "float64" else "((double)NAN)"

    def math_name(self, name, dtype):
        table = _F64_MATH if dtype == "float64" else _F32_MATH
        return table.get(name)

    def cast_text(self, x, src, dst):
        if dst == "bool":
            return f"(({x}) != 0)"
        return f"(({self.type_name(dst)})({x}))"

    def minmax_text(self, is_max, a, b, dtype):
        if dt.is_float(dtype):
            f = ("fmax" if is_max else "fmin") + ("f" if dtype == "float32" else "")
            if dtype == "float16":
                return self.cast_text(f"fmaxf((float)({a}), (float)({b}))" if is_max else
                                      f"fminf((float)({a}), (float)({b}))", "float32", "float16")
            return f"{f}({a}, {b})"
        name = self.helper_minmax(is_max, dtype)
        return f"{name}({a}, {b})"

    def vector_load(self, vec_type, ptr) -> str:
        raise NotImplementedError

    def vector_store(self, vec_type, ptr, lanes) -> str:
        raise NotImplementedError

    # ------------------------------------------------------------------ helpers
    def _add_helper(self, name, text):
        if name not in self.helpers:
            self.helpers[name] = text
        return name

    def helper_floordiv(self, dtype, mod):
        t = self.type_name(dtype)
        q = self.helper_qual()
        if mod:
            name = f"tdsl_floormod_{dtype}"
            return self._add_helper(name, (
                f"{q} {t} {name}({t} a, {t} b) {{\n"
                f"  {t} r = a % b;\n"
                f"  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;\n}}\n"))
        name = f"tdsl_floordiv_{dtype}"
        return self._add_helper(name, (
            f"{q} {t} {name}({t} a, {t} b) {{\n"
            f"  {t} q = a / b;\n"
            f"  return (q * b != a && ((a < 0) != (b < 0))) ? q - 1 : q;\n}}\n"))

    def helper_minmax(self, is_max, dtype):
        t = self.type_name(dtype)
        name = f"tdsl_{'max' if is_max else 'min'}_{dtype}"
        op = ">" if is_max else "<"
        return self._add_helper(name, f"{self.helper_qual()} {t} {name}({t} a, {t} b) "
                                      f"{{ return a {op} b ? a : b; }}\n")

    def helper_shift(self, left, dtype):
        """numpy's shifts: an amount outside [0, bits) shifts everything out (C leaves it
        undefined, OpenCL takes it modulo the width)."""
        t = self.type_name(dtype)
        u = self.type_name("u" + dtype if dtype.startswith("int") else dtype)
        bits = dt.bits(dtype)
        name = f"tdsl_{'shl' if left else 'shr'}_{dtype}"
        if left:    # through the unsigned type: a left shift of a negative value is UB in C
            body = f"return ({u})s >= {bits}u ? ({t})0 : ({t})(({u})a << s);"
        elif dt.is_signed(dtype):
            body = f"return ({u})s >= {bits}u ? ({t})(a < 0 ? -1 : 0) : ({t})(a >> s);"
        else:
            body = f"return ({u})s >= {bits}u ? ({t})0 : ({t})(a >> s);"
        return self._add_helper(name, f"{self.helper_qual()} {t} {name}({t} a, {t} s) "
                                      f"{{ {body} }}\n")

    def helper_truncmod(self, dtype):
        """C's % with numpy.fmod's answer for a zero divisor (0), and 0 for INT_MIN % -1."""
        t = self.type_name(dtype)
        name = f"tdsl_truncmod_{dtype}"
        bad = "b == 0 || b == -1" if dt.is_signed(dtype) else "b == 0"
        return self._add_helper(name, f"{self.helper_qual()} {t} {name}({t} a, {t} b) "
                                      f"{{ return ({bad}) ? 0 : a % b; }}\n")

    def unsigned_of(self, x, dtype):
        """`x` as the unsigned type of its width (bit patterns kept)."""
        if dtype.startswith("int"):
            return f"(({self.type_name('u' + dtype)})({x}))"
        return x

    def popcount_text(self, x, dtype):
        ux = self.unsigned_of(x, dtype)
        if dt.bits(dtype) == 64:
            return f"__builtin_popcountll({ux})"
        return f"__builtin_popcount((unsigned int){ux})"

    def clz_text(self, x, dtype):
        ux = self.unsigned_of(x, dtype)
        bits = dt.bits(dtype)
        if bits == 64:
            return f"({ux} == 0 ? 64 : __builtin_clzll({ux}))"
        return f"({ux} == 0 ? {bits} : __builtin_clz((unsigned int){ux}) - {32 - bits})"

    def classify_text(self, name, x):
        return f"({name}({x}) != 0)"

    def helper_abs(self, dtype):
        t = self.type_name(dtype)
        name = f"tdsl_abs_{dtype}"
        return self._add_helper(name, f"{self.helper_qual()} {t} {name}({t} a) "
                                      f"{{ return a < 0 ? -a : a; }}\n")

    # ------------------------------------------------------------------ state per function
    def _begin(self, names=None):
        self.names = names or _Names()
        self.lines: List[str] = []
        self.ind = 1
        self.ranges = dict(self.base_ranges)
        self.var_text = {}
        self.node_text = {}
        self.buf_alias = {}

    def emit(self, text):
        self.lines.append("  " * self.ind + text)

    def bufname(self, buf):
        buf = self.buf_alias.get(buf, buf)
        return self.names(buf, buf.name)

    # ------------------------------------------------------------------ expressions
    def expr(self, e) -> str:
        t = type(e)
        txt = self.node_text.get(id(e))
        if txt is not None:
            return txt
        if t is E.IntImm:
            if e.dtype == "bool":
                return "true" if e.value else "false"
            return self.int_literal(e.value, e.dtype)
        if t is E.FloatImm:
            return self.float_literal(e.value, e.dtype)
        if t is E.Var:
            v = self.var_text.get(e)
            return v if v is not None else self.names(e, e.name)
        if t in (E.FloorDiv, E.FloorMod):
            return self.floordiv(e, t is E.FloorMod)
        if t in (E.Min, E.Max):
            return self.minmax_text(t is E.Max, self.expr(e.a), self.expr(e.b), e.a.dtype)
        if t in _BIN:
            return f"({self.expr(e.a)} {_BIN[t]} {self.expr(e.b)})"
        if t is E.Not:
            return f"(!{self.expr(e.a)})"
        if t is E.Select:
            return f"({self.expr(e.cond)} ? {self.expr(e.t)} : {self.expr(e.f)})"
        if t is E.Cast:
            return self.cast_text(self.expr(e.value), e.value.dtype, e.dtype)
        if t is E.Call:
            return self.call(e)
        if t is E.BufferLoad:
            return f"{self.bufname(e.buffer)}[{self.index(e.indices)}]"
        raise BuildError(f"the {self.target} code generator cannot print {type(e).__name__} "
                         f"({e}); this node should have been lowered")

    def index(self, indices):
        if len(indices) != 1:
            raise BuildError("buffer accesses must be flattened before code generation")
        return self.expr(indices[0])

    def _nonneg(self, e):
        try:
            return arith.can_prove(E.GE(e, E.const(0, e.dtype)), self.ranges)
        except arith.NotIndexExpr:
            return False

    def floordiv(self, e, mod):
        a, b = self.expr(e.a), self.expr(e.b)
        if not dt.is_int(e.dtype) or e.dtype.startswith("uint"):
            return f"({a} {'%' if mod else '/'} {b})"
        if self._nonneg(e.a) and (isinstance(e.b, E.IntImm) and e.b.value > 0
                                  or self._nonneg(e.b)):
            return f"({a} {'%' if mod else '/'} {b})"
        return f"{self.helper_floordiv(e.dtype, mod)}({a}, {b})"

    def call(self, e):
        name, args, dtype = e.name, e.args, e.dtype
        if name == "likely":
            return self.expr(args[0])
        if name in _INT_OPS:
            return self.int_call(e)
        if name in _CLASSIFY or name == "ldexp":
            src = args[0].dtype
            x = self.expr(args[0])
            if src == "float16":
                x, src = self.cast_text(x, "float16", "float32"), "float32"
            if name in _CLASSIFY:
                return self.classify_text(name, x)
            r = f"{self.math_name('ldexp', src)}({x}, {self.expr(args[1])})"
            return self.cast_text(r, "float32", "float16") if args[0].dtype == "float16" else r
        if not dt.is_float(dtype):
            if name == "abs":
                return f"{self.helper_abs(dtype)}({self.expr(args[0])})"
            if name == "fmod":
                return f"{self.helper_truncmod(dtype)}({self.expr(args[0])}, {self.expr(args[1])})"
            raise BuildError(f"{name}() on {dtype} is not supported by the {self.target} target")
        if dtype == "float16":
            # half math through float
            inner = E.Call(name, tuple(E.Cast("float32", a) for a in args), "float32")
            return self.cast_text(self.call(inner), "float32", "float16")
        xs = [self.expr(a) for a in args]
        one = "1.0f" if dtype == "float32" else "1.0"
        if name == "sigmoid":
            return f"({one} / ({one} + {self.math_name('exp', dtype)}(-({xs[0]}))))"
        if name == "rsqrt":
            r = self.rsqrt_name(dtype)
            if r:
                return f"{r}({xs[0]})"
            return f"({one} / {self.math_name('sqrt', dtype)}({xs[0]}))"
        fn = self.math_name(name, dtype)
        if fn is None:
            raise BuildError(f"the intrinsic {name}() is not supported by the {self.target} target")
        return f"{fn}({', '.join(xs)})"

    def rsqrt_name(self, dtype):
        return None

    def int_call(self, e):
        """Bitwise operations, shifts, popcount and clz; results cast back to the operand
        type, as C promotes narrow integers to int."""
        name, dtype = e.name, e.args[0].dtype
        t = self.type_name(dtype)
        x = self.expr(e.args[0])
        if name == "bitwise_not":
            return f"(({t})(~{x}))"
        if name == "popcount":
            return f"(({t}){self.popcount_text(x, dtype)})"
        if name == "clz":
            return f"((int)({self.clz_text(x, dtype)}))"
        y = self.expr(e.args[1])
        if name in _BITWISE:
            return f"(({t})({x} {_BITWISE[name]} {y}))"
        return f"{self.helper_shift(name == 'shift_left', dtype)}({x}, {y})"

    # ------------------------------------------------------------------ statements
    def stmt(self, s):
        getattr(self, "s_" + type(s).__name__)(s)

    def s_SeqStmt(self, s):
        for x in s.stmts:
            self.stmt(x)

    def s_Evaluate(self, s):
        self.emit(f"(void)({self.expr(s.value)});")

    def s_Barrier(self, s):
        b = self.barrier()
        if b:
            self.emit(b)

    def _push_range(self, var, rng):
        old = self.ranges
        self.ranges = dict(old)
        self.ranges[var] = rng
        return old

    def s_LetStmt(self, s):
        name = self.names(s.var, s.var.name)
        self.emit("{")
        self.ind += 1
        self.emit(f"const {self.type_name(s.var.dtype)} {name} = {self.expr(s.value)};")
        old = self.ranges
        if dt.is_int(s.var.dtype):
            old = self._push_range(s.var, Range(s.value, E.const(1, s.value.dtype)))
        self.stmt(s.body)
        self.ranges = old
        self.ind -= 1
        self.emit("}")

    def s_IfThenElse(self, s):
        self.emit(f"if ({self.expr(s.cond)}) {{")
        self.ind += 1
        self.stmt(s.then_case)
        self.ind -= 1
        if s.else_case is not None:
            self.emit("} else {")
            self.ind += 1
            self.stmt(s.else_case)
            self.ind -= 1
        self.emit("}")

    def s_BufferStore(self, s):
        self.emit(f"{self.bufname(s.buffer)}[{self.index(s.indices)}] = {self.expr(s.value)};")

    def s_Allocate(self, s):
        buf = self.buf_alias.get(s.buffer, s.buffer)
        if buf.scope == "shared":   # declared at kernel scope
            self.stmt(s.body)
            return
        size = arith.simplify(buf.shape[0]) if len(buf.shape) == 1 else None
        name = self.bufname(buf)
        t = self.mem_type(buf.dtype)
        self.emit("{")
        self.ind += 1
        if isinstance(size, E.IntImm) and (buf.scope == "local" or
                                           size.value * dt.bits(buf.dtype) // 8 <= 32768):
            self.emit(f"{t} {name}[{max(size.value, 1)}];")
            self.stmt(s.body)
        else:
            self.alloc_heap(buf, name, t, size, s.body)
        self.ind -= 1
        self.emit("}")

    def alloc_heap(self, buf, name, t, size, body):
        raise BuildError(f"buffer '{buf.name}' ({buf.scope}) of size {list(buf.shape)} cannot be "
                         f"allocated inside a {self.target} kernel: local buffers need a "
                         "constant size")

    def s_For(self, s):
        v = self.names(s.var, s.var.name)
        if s.kind is S.ForKind.THREAD_BINDING:
            self.emit("{")
            self.ind += 1
            self.emit(f"const {self.type_name(s.var.dtype)} {v} = {self.thread_index(s.thread_tag)};")
            old = self._push_range(s.var, Range(E.const(0), s.extent))
            self.stmt(s.body)
            self.ranges = old
            self.ind -= 1
            self.emit("}")
            return
        if s.kind is S.ForKind.VECTORIZED and self.vector_width and self.vector_for(s):
            return
        if s.kind in (S.ForKind.UNROLLED, S.ForKind.VECTORIZED):
            self.unroll_pragma(s)
        t = self.type_name(s.var.dtype)
        lo = self.expr(s.min)
        hi = self.expr(arith.simplify(s.min + s.extent)) if not E.is_const_int(s.min, 0) \
            else self.expr(s.extent)
        self.emit(f"for ({t} {v} = {lo}; {v} < {hi}; ++{v}) {{")
        self.ind += 1
        old = self._push_range(s.var, Range(s.min, s.extent))
        self.stmt(s.body)
        self.ranges = old
        self.ind -= 1
        self.emit("}")

    def unroll_pragma(self, s):
        self.emit("#pragma unroll")

    # ------------------------------------------------------------------ vector loops
    def vector_for(self, s) -> bool:
        """Prints a vectorized loop with W-wide loads/stores; False when it does not fit."""
        W = self.vector_width
        body = s.body
        ext = s.extent
        if not (isinstance(body, S.BufferStore) and isinstance(ext, E.IntImm)
                and ext.value % W == 0 and body.buffer.dtype == "float32"
                and E.is_const_int(s.min, 0) and len(body.indices) == 1):
            return False
        ranges = dict(self.ranges)
        ranges[s.var] = Range(E.const(0), ext)

        def contiguous(idx):
            try:
                lin = arith.linear_coeff(idx, s.var, ranges)
            except arith.NotIndexExpr:
                return None
            if lin is None:
                return None
            c, base = lin
            if c != 1:
                return ("other", c)
            if not arith.is_divisible(base, E.const(W), ranges):
                return ("other", c)
            return ("vec", base)

        st = contiguous(body.indices[0])
        if st is None or st[0] != "vec":
            return False
        loads = []

        def collect(e):
            if isinstance(e, E.BufferLoad):
                loads.append(e)
            for name in ("a", "b", "cond", "t", "f", "value"):
                x = getattr(e, name, None)
                if isinstance(x, E.Expr):
                    collect(x)
            if isinstance(e, E.Call):
                for x in e.args:
                    collect(x)
        collect(body.value)
        vec_loads = []
        for ld in loads:
            info = contiguous(ld.indices[0]) if ld.buffer.dtype == "float32" else None
            if info is not None and info[0] == "vec":
                vec_loads.append((ld, info[1]))
        comps = "xyzw"
        vt = f"float{W}"
        self.emit("{")
        self.ind += 1
        for chunk in range(ext.value // W):
            names = []
            for k, (ld, base) in enumerate(vec_loads):
                nm = self.names(object(), f"v{k}")
                off = self.expr(arith.simplify(base + chunk * W))
                self.emit(f"const {vt} {nm} = "
                          f"{self.vector_load(vt, f'{self.bufname(ld.buffer)} + {off}')};")
                names.append(nm)
            lanes = []
            for lane in range(W):
                self.var_text[s.var] = str(chunk * W + lane)
                for (ld, _), nm in zip(vec_loads, names):
                    self.node_text[id(ld)] = f"{nm}.{comps[lane]}"
                lanes.append(self.expr(body.value))
            self.var_text.pop(s.var, None)
            for ld, _ in vec_loads:
                self.node_text.pop(id(ld), None)
            off = self.expr(arith.simplify(st[1] + chunk * W))
            self.emit(self.vector_store(vt, f"{self.bufname(body.buffer)} + {off}", lanes) + ";")
        self.ind -= 1
        self.emit("}")
        return True

    # ------------------------------------------------------------------ kernels
    def kernel_signature(self, kernel, params_text) -> str:
        raise NotImplementedError

    def param_text(self, p, written):
        if isinstance(p, S.Buffer):
            const = "" if written else "const "
            return f"{self.global_qual()}{const}{self.mem_type(p.dtype)}* {self.restrict()} " \
                   f"{self.names(p, p.name)}"
        return f"{self.type_name(p.dtype)} {self.names(p, p.name)}"

    def global_qual(self):
        return ""

    def restrict(self):
        return "__restrict__"

    def print_kernel(self, kernel, written) -> str:
        self._begin()
        for p in kernel.params:       # parameter names first: they keep their names
            self.names(p, p.name)
        params = ", ".join(self.param_text(p, p in written) for p in kernel.params)
        for b in kernel.shared:
            size = arith.simplify(b.shape[0])
            self.emit(self.shared_decl(self.mem_type(b.dtype), self.bufname(b), size.value))
        self.stmt(kernel.body)
        head = self.kernel_signature(kernel, params)
        return head + " {\n" + "\n".join(self.lines) + "\n}\n"

    def note_types(self, func):
        from ..ir.visitor import walk

        def f(n):
            d = getattr(n, "dtype", None)
            if d is None and isinstance(n, (S.BufferStore, S.Allocate)):
                d = n.buffer.dtype
            if d == "float16":
                self.features.add("fp16")
            elif d == "float64":
                self.features.add("fp64")
        walk(func.body, f)
        for p in func.params:
            if p.dtype == "float16":
                self.features.add("fp16")
            elif p.dtype == "float64":
                self.features.add("fp64")

    def preamble(self) -> str:
        return ""

    def print_kernels(self, func) -> str:
        """The source of all kernels of a lowered GPU function."""
        kernels = func.attrs.get("kernels")
        if kernels is None:
            raise BuildError("print_kernels needs a function lowered for a GPU target")
        self.note_types(func)
        written = written_buffers(func.body)
        texts = [self.print_kernel(k, written) for k in kernels]
        helpers = "".join(self.helpers.values())
        return self.preamble() + ("\n" + helpers if helpers else "") + "\n" + "\n".join(texts)


def written_buffers(stmt):
    out = set()
    from ..ir.visitor import walk

    def f(n):
        if isinstance(n, S.BufferStore):
            out.add(n.buffer)
    walk(stmt, f)
    return out


# ======================================================================================
# targets


class CUDAPrinter(CFamilyPrinter):
    target = "cuda"
    has_threads = True
    vector_width = 4

    def type_name(self, dtype):
        return {"float32": "float", "float64": "double", "float16": "__half", "int8": "signed char",
                "int16": "short", "int32": "int", "int64": "long long", "uint8": "unsigned char",
                "uint16": "unsigned short", "uint32": "unsigned int",
                "uint64": "unsigned long long", "bool": "bool"}[dtype]

    def helper_qual(self):
        return "static __device__ __forceinline__"

    def thread_index(self, tag):
        return f"(int){tag}"

    def barrier(self):
        return "__syncthreads();"

    def shared_decl(self, t, name, size):
        return f"__shared__ __align__(16) {t} {name}[{max(size, 1)}];"

    def infinity(self, dtype):
        return "__int_as_float(0x7f800000)" if dtype != "float64" else \
            "__longlong_as_double(0x7ff0000000000000LL)"

    def nan(self, dtype):
        return "__int_as_float(0x7fffffff)" if dtype != "float64" else \
            "__longlong_as_double(0x7fffffffffffffffLL)"

    _FAST = {"exp": "__expf", "log": "__logf", "power": "__powf", "sin": "__sinf",
             "cos": "__cosf", "log2": "__log2f"}

    def math_name(self, name, dtype):
        if dtype == "float32" and name in self._FAST:
            return self._FAST[name]
        return super().math_name(name, dtype)

    def rsqrt_name(self, dtype):
        return "rsqrtf" if dtype == "float32" else "rsqrt"

    def cast_text(self, x, src, dst):
        if dst == "float16":
            return f"__float2half((float)({x}))"
        if src == "float16":
            return super().cast_text(f"__half2float({x})", "float32", dst)
        return super().cast_text(x, src, dst)

    def minmax_text(self, is_max, a, b, dtype):
        if dtype == "float16":
            return f"{'__hmax' if is_max else '__hmin'}({a}, {b})"
        if dtype in ("float32", "float64", "int32", "int64", "uint32", "uint64"):
            return f"{'max' if is_max else 'min'}({a}, {b})"
        return super().minmax_text(is_max, a, b, dtype)

    def popcount_text(self, x, dtype):
        ux = self.unsigned_of(x, dtype)
        if dt.bits(dtype) == 64:
            return f"__popcll({ux})"
        return f"__popc((unsigned int){ux})"

    def clz_text(self, x, dtype):
        ux = self.unsigned_of(x, dtype)
        bits = dt.bits(dtype)
        if bits == 64:
            return f"__clzll((long long){ux})"      # 64 for 0
        return f"(__clz((int)(unsigned int){ux}) - {32 - bits})"

    def classify_text(self, name, x):
        return f"{name}({x})"

    def vector_load(self, vt, ptr):
        return f"*(const {vt}*)({ptr})"

    def vector_store(self, vt, ptr, lanes):
        return f"*({vt}*)({ptr}) = make_{vt}({', '.join(lanes)})"

    def preamble(self):
        lines = ["// generated by tdsl (target cuda)"]
        if "fp16" in self.features:
            lines.append("#include <cuda_fp16.h>")
        return "\n".join(lines) + "\n"

    def kernel_signature(self, kernel, params):
        nt = 1
        for x in kernel.block:
            nt *= x
        return f'extern "C" __global__ void __launch_bounds__({nt}) {kernel.name}({params})'


class OpenCLPrinter(CFamilyPrinter):
    target = "opencl"
    has_threads = True
    vector_width = 4

    def type_name(self, dtype):
        return {"float32": "float", "float64": "double", "float16": "half", "int8": "char",
                "int16": "short", "int32": "int", "int64": "long", "uint8": "uchar",
                "uint16": "ushort", "uint32": "uint", "uint64": "ulong", "bool": "bool"}[dtype]

    def int_literal(self, value, dtype):
        if dtype == "int64":
            return f"{value}L" if -2**63 < value else "(-9223372036854775807L - 1)"
        if dtype == "uint64":
            return f"{value}UL"
        return super().int_literal(value, dtype)

    def helper_qual(self):
        return "static inline"

    _INDEX = {"blockIdx": "get_group_id", "threadIdx": "get_local_id"}

    def thread_index(self, tag):
        kind, d = tag.split(".")
        return f"(int){self._INDEX[kind]}({'xyz'.index(d)})"

    def barrier(self):
        return "barrier(CLK_LOCAL_MEM_FENCE);"

    def shared_decl(self, t, name, size):
        return f"__local {t} {name}[{max(size, 1)}] __attribute__((aligned(16)));"

    def global_qual(self):
        return "__global "

    def restrict(self):
        return "restrict"

    def math_name(self, name, dtype):
        table = {"round": "rint", "nearbyint": "rint", "power": "pow", "abs": "fabs"}
        return table.get(name, name)

    def popcount_text(self, x, dtype):
        return f"popcount({x})"

    def clz_text(self, x, dtype):
        return f"clz({x})"          # the width for 0

    def rsqrt_name(self, dtype):
        return "rsqrt"

    def infinity(self, dtype):
        return "INFINITY" if dtype != "float64" else "((double)INFINITY)"

    def minmax_text(self, is_max, a, b, dtype):
        if dt.is_float(dtype):
            return f"{'fmax' if is_max else 'fmin'}({a}, {b})"
        return f"{'max' if is_max else 'min'}({a}, {b})"

    def cast_text(self, x, src, dst):
        if dst == "bool":
            return f"(({x}) != 0)"
        return f"(({self.type_name(dst)})({x}))"

    def vector_load(self, vt, ptr):
        return f"vload{vt[-1]}(0, {ptr})"

    def vector_store(self, vt, ptr, lanes):
        return f"vstore{vt[-1]}(({vt})({', '.join(lanes)}), 0, {ptr})"

    def preamble(self):
        lines = ["// generated by tdsl (target opencl)"]
        if "fp16" in self.features:
            lines.append("#pragma OPENCL EXTENSION cl_khr_fp16 : enable")
        if "fp64" in self.features:
            lines.append("#pragma OPENCL EXTENSION cl_khr_fp64 : enable")
        return "\n".join(lines) + "\n"

    def kernel_signature(self, kernel, params):
        bx, by, bz = kernel.block
        return (f"__kernel __attribute__((reqd_work_group_size({bx}, {by}, {bz}))) "
                f"void {kernel.name}({params})")


class CPrinter(CFamilyPrinter):
    """Plain C for the host CPU: the whole function, with the LLVM backend's ABI."""

    target = "c"

    def restrict(self):
        return "restrict"

    def unroll_pragma(self, s):
        if isinstance(s.extent, E.IntImm) and s.extent.value <= 64:
            self.emit(f"#pragma GCC unroll {s.extent.value}")

    def alloc_heap(self, buf, name, t, size, body):
        n = self.expr(arith.simplify(buf.shape[0])) if len(buf.shape) == 1 else None
        if n is None:
            raise BuildError(f"buffer '{buf.name}' was not flattened")
        self.emit(f"{t}* {name} = ({t}*)malloc(sizeof({t}) * (size_t)({n} > 0 ? {n} : 1));")
        self.emit(f"if (!{name}) return 1;")
        self.stmt(body)
        self.emit(f"free({name});")

    def preamble(self):
        # _GNU_SOURCE: exp10f and friends are GNU extensions of math.h
        return ("// generated by tdsl (target c)\n#define _GNU_SOURCE\n#include <stdint.h>\n"
                "#include <stdbool.h>\n#include <stdlib.h>\n#include <math.h>\n")

    def print_c_function(self, func, symbol) -> str:
        self.note_types(func)
        self._begin()
        written = written_buffers(func.body)
        for p in func.params:
            self.names(p, p.name)
        params = []
        for p in func.params:
            if isinstance(p, S.Buffer):
                params.append(self.param_text(p, p in written))
            else:
                nm = self.names(p, p.name)
                abi = "double" if dt.is_float(p.dtype) else "int64_t"
                arg = self.names(object(), nm + "_arg")
                params.append(f"{abi} {arg}")
                self.emit(f"const {self.type_name(p.dtype)} {nm} = "
                          f"({self.type_name(p.dtype)}){arg};")
        self.stmt(func.body)
        self.emit("return 0;")
        body = "\n".join(self.lines)
        head = f"int32_t {symbol}({', '.join(params) if params else 'void'})"
        helpers = "".join(self.helpers.values())
        return self.preamble() + ("\n" + helpers if helpers else "") + f"\n{head} {{\n{body}\n}}\n"


PRINTERS = {"cuda": CUDAPrinter, "opencl": OpenCLPrinter, "c": CPrinter}


def printer_for(target, func=None):
    cls = PRINTERS.get(target)
    if cls is None:
        raise BuildError(f"no C-family printer for target {target!r}")
    ranges = func.attrs.get("size_ranges", {}) if func is not None else {}
    return cls(ranges)


# ======================================================================================
# GPU kernels emulated on the CPU in plain C


_EMU_RUNTIME = r"""
/* GPU emulation: the blocks of a grid run one after another; the threads of a block are
   fibers (ucontext) switched at every barrier, so __syncthreads() semantics hold and
   shared memory is a static array of the kernel function. */
#include <ucontext.h>
#define TDSL_EMU_STACK (64 * 1024)
static int tdsl_emu_idx[6];
static ucontext_t tdsl_emu_main;
static ucontext_t *tdsl_emu_ctx;
static int tdsl_emu_cur;
static unsigned char *tdsl_emu_done;
static void (*tdsl_emu_fn)(void);

static void tdsl_emu_barrier(void) {
  swapcontext(&tdsl_emu_ctx[tdsl_emu_cur], &tdsl_emu_main);
}

static void tdsl_emu_tramp(void) {
  tdsl_emu_fn();
  tdsl_emu_done[tdsl_emu_cur] = 1;
}

static int tdsl_emu_run(void (*fn)(void), const int64_t *grid, const int64_t *block) {
  int64_t nt = block[0] * block[1] * block[2];
  ucontext_t *ctx = (ucontext_t *)malloc(sizeof(ucontext_t) * nt);
  char *stacks = (char *)malloc((size_t)TDSL_EMU_STACK * nt);
  unsigned char *done = (unsigned char *)malloc(nt);
  if (!ctx || !stacks || !done) { free(ctx); free(stacks); free(done); return 1; }
  tdsl_emu_ctx = ctx; tdsl_emu_done = done; tdsl_emu_fn = fn;
  for (int64_t bz = 0; bz < grid[2]; ++bz)
  for (int64_t by = 0; by < grid[1]; ++by)
  for (int64_t bx = 0; bx < grid[0]; ++bx) {
    for (int64_t t = 0; t < nt; ++t) {
      getcontext(&ctx[t]);
      ctx[t].uc_stack.ss_sp = stacks + (size_t)TDSL_EMU_STACK * t;
      ctx[t].uc_stack.ss_size = TDSL_EMU_STACK;
      ctx[t].uc_link = &tdsl_emu_main;
      makecontext(&ctx[t], tdsl_emu_tramp, 0);
      done[t] = 0;
    }
    int64_t left = nt;
    while (left > 0) {
      for (int64_t t = 0; t < nt; ++t) {
        if (done[t]) continue;
        tdsl_emu_cur = (int)t;
        tdsl_emu_idx[0] = (int)bx; tdsl_emu_idx[1] = (int)by; tdsl_emu_idx[2] = (int)bz;
        tdsl_emu_idx[3] = (int)(t % block[0]);
        tdsl_emu_idx[4] = (int)((t / block[0]) % block[1]);
        tdsl_emu_idx[5] = (int)(t / (block[0] * block[1]));
        swapcontext(&tdsl_emu_main, &ctx[t]);
        if (done[t]) --left;
      }
    }
  }
  free(ctx); free(stacks); free(done);
  return 0;
}
"""


class CGPUEmuPrinter(CPrinter):
    """Kernels of a GPU schedule as C for the host CPU (target "c" on a schedule that binds
    threads): every kernel `K` gets `int32_t K_launch(void **argv, const int64_t *grid,
    const int64_t *block)`, where argv[i] points to a buffer or to a scalar of the
    parameter's type."""

    has_threads = True
    _IDX = {"blockIdx.x": 0, "blockIdx.y": 1, "blockIdx.z": 2, "threadIdx.x": 3,
            "threadIdx.y": 4, "threadIdx.z": 5}

    def thread_index(self, tag):
        return f"tdsl_emu_idx[{self._IDX[tag]}]"

    def barrier(self):
        return "tdsl_emu_barrier();"

    def shared_decl(self, t, name, size):
        return f"static {t} {name}[{max(size, 1)}];"

    def preamble(self):
        return ("// generated by tdsl (target c, GPU kernels emulated)\n#define _GNU_SOURCE\n"
                "#include <stdint.h>\n#include <stdbool.h>\n#include <stdlib.h>\n"
                "#include <math.h>\n" + _EMU_RUNTIME)

    def print_kernel(self, kernel, written) -> str:
        self._begin()
        for p in kernel.params:
            self.names(p, p.name)
        argv = f"{kernel.name}_argv"
        for k, p in enumerate(kernel.params):
            if isinstance(p, S.Buffer):
                t = self.mem_type(p.dtype)
                self.emit(f"{t}* {self.restrict()} {self.names(p, p.name)} = ({t}*){argv}[{k}];")
            else:
                t = self.type_name(p.dtype)
                self.emit(f"const {t} {self.names(p, p.name)} = *(const {t}*){argv}[{k}];")
        for b in kernel.shared:
            size = arith.simplify(b.shape[0])
            self.emit(self.shared_decl(self.mem_type(b.dtype), self.bufname(b), size.value))
        self.stmt(kernel.body)
        body = "\n".join(self.lines)
        return (f"static void **{argv};\n"
                f"static void {kernel.name}_thread(void) {{\n{body}\n}}\n"
                f"int32_t {kernel.name}_launch(void **argv, const int64_t *grid, "
                f"const int64_t *block) {{\n  {argv} = argv;\n"
                f"  return tdsl_emu_run({kernel.name}_thread, grid, block);\n}}\n")


PRINTERS["c-gpu"] = CGPUEmuPrinter
