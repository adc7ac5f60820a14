"""C-family expressions of the loop IR, shared by every dialect: literals, casts, math
calls, integer operations and the small helper functions some of them need (Python's floor
division, integer min/max, numpy's shifts), each emitted once per type.

`CExprPrinter` is the root of the printers: it holds the per-function state (names, loop
ranges) that statements extend in `base.CFamilyPrinter`; dialects override the spelling
hooks.
"""
from __future__ import annotations

import math
import re
from typing import Dict, List

from ... import arith
from ... import dtype as dt
from ...errors import BuildError
from ...ir import expr as E
from ...ir.printer import Namer
from . import tensor_ops

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


class CExprPrinter:
    """Expressions; subclasses override the spelling hooks below."""

    target = "c"

    def __init__(self, size_ranges=None):
        self.helpers: Dict[str, str] = {}
        self.features = set()
        self.base_ranges = dict(size_ranges or {})

    # ------------------------------------------------------------------ spelling hooks
    def type_name(self, dtype) -> str:
        return {"float32": "float", "float64": "double", "float16": "_Float16",
                "bfloat16": "uint16_t",
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
        if src == "bfloat16":
            return self.cast_text(f"{self.helper_bf16(False)}({x})", "float32", dst)
        if dst == "bfloat16":
            return f"{self.helper_bf16(True)}({self.cast_text(x, src, 'float32')})"
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

    # ------------------------------------------------------------------ helpers
    def add_helper(self, name, text):
        """Emits the helper function `text` once, ahead of the kernels; returns `name`."""
        if name not in self.helpers:
            self.helpers[name] = text
        return name

    def helper_floordiv(self, dtype, mod):
        t = self.type_name(dtype)
        q = self.helper_qual()
        if mod:
            name = f"tdsl_floormod_{dtype}"
            return self.add_helper(name, (
                f"{q} {t} {name}({t} a, {t} b) {{\n"
                f"  {t} r = a % b;\n"
                f"  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;\n}}\n"))
        name = f"tdsl_floordiv_{dtype}"
        return self.add_helper(name, (
            f"{q} {t} {name}({t} a, {t} b) {{\n"
            f"  {t} q = a / b;\n"
            f"  return (q * b != a && ((a < 0) != (b < 0))) ? q - 1 : q;\n}}\n"))

    def helper_bf16(self, from_f32):
        """bfloat16 is its bits in an unsigned short; the conversions are tdsl.dtype's
        (round to nearest even, NaN kept quiet)."""
        u16, u32 = self.type_name("uint16"), self.type_name("uint32")
        q = self.helper_qual()
        pun = f"union {{ {u32} u; float f; }} v;"
        if not from_f32:
            return self.add_helper("tdsl_bf16_to_f32", (
                f"{q} float tdsl_bf16_to_f32({u16} h) {{ {pun} v.u = ({u32})h << 16; "
                "return v.f; }\n"))
        return self.add_helper("tdsl_f32_to_bf16", (
            f"{q} {u16} tdsl_f32_to_bf16(float f) {{\n  {pun} v.f = f;\n"
            f"  if (f != f) return ({u16})((v.u >> 16) | 0x40u);\n"
            f"  return ({u16})((v.u + 0x7fffu + ((v.u >> 16) & 1u)) >> 16);\n}}\n"))

    def helper_minmax(self, is_max, dtype):
        t = self.type_name(dtype)
        name = f"tdsl_{'max' if is_max else 'min'}_{dtype}"
        op = ">" if is_max else "<"
        return self.add_helper(name, f"{self.helper_qual()} {t} {name}({t} a, {t} b) "
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
        return self.add_helper(name, f"{self.helper_qual()} {t} {name}({t} a, {t} s) "
                                      f"{{ {body} }}\n")

    def helper_truncmod(self, dtype):
        """C's % with numpy.fmod's answer for a zero divisor (0), and 0 for INT_MIN % -1."""
        t = self.type_name(dtype)
        name = f"tdsl_truncmod_{dtype}"
        bad = "b == 0 || b == -1" if dt.is_signed(dtype) else "b == 0"
        return self.add_helper(name, f"{self.helper_qual()} {t} {name}({t} a, {t} b) "
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
        return self.add_helper(name, f"{self.helper_qual()} {t} {name}({t} a) "
                                      f"{{ return a < 0 ? -a : a; }}\n")

    # ------------------------------------------------------------------ state per function
    def begin(self, names=None):
        """Starts a function: fresh lines, names and expression texts."""
        self.names = names or _Names()
        self.lines: List[str] = []
        self.ind = 1
        self.ranges = dict(self.base_ranges)
        self.var_text = {}
        self.node_text = {}
        self.buf_alias = {}

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
            return f"{self.bufname(e.buffer)}[{self.index(e.indices, e.buffer)}]"
        raise BuildError(f"the {self.target} code generator cannot print {type(e).__name__} "
                         f"({e}); this node should have been lowered")

    def index(self, indices, buf=None):
        if len(indices) != 1:
            raise BuildError("buffer accesses must be flattened before code generation")
        return self.offset_text(buf, self.expr(indices[0]))

    def offset_text(self, buf, text):
        """The element offset `text` into `buf` as stored: through the XOR of its
        `storage_swizzle` (16-byte chunk c of 128-byte row r at c ^ (r % (width / 16)))."""
        width = getattr(buf, "swizzle", 0)
        if not width:
            return text
        esize = max(1, dt.bits(buf.dtype) // 8)
        cs, rs = (16 // esize).bit_length() - 1, (128 // esize).bit_length() - 1
        return f"(({text}) ^ (((({text}) >> {rs}) & {width // 16 - 1}) << {cs}))"

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
        if e.extern:        # call_pure_extern: the function as named, the target's to have
            return f"{name}({', '.join(self.expr(a) for a in args)})"
        if name == "likely":
            return self.expr(args[0])
        if name == "address_of":        # a tensor intrinsic's pointer (Region.access_ptr)
            return f"(&{self.expr(args[0])})"
        if name in tensor_ops.OPS:
            return tensor_ops.emit(self, e)
        if name == E.WARP_SHUFFLE_DOWN:
            return self.shuffle_down_text(self.expr(args[0]), self.expr(args[1]))
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

    def shuffle_down_text(self, x, offset):
        raise BuildError(f"the {self.target} target has no warp shuffle; lower the schedule "
                         "for this target so that cross-thread reductions use shared memory")

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
