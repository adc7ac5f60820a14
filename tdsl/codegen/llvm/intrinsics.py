"""Math intrinsics for the LLVM backend, scalar and vector.

`emit_call(em, call)` emits one `Call` node through the expression emitter `em` (see
`exprs.py`). Where LLVM has an intrinsic (`llvm.sqrt`, `llvm.floor`, ...) it is used for
scalars and vectors alike: LLVM either has a vector instruction for it or splits it into
per-lane libm calls. The exceptions are made for speed: float32 `exp`, `exp2`, `log`, `log2`,
`erf`, `tanh` and `sigmoid` are inline range reductions plus polynomials (at most 1-3 ulp,
measured), scalar or vector, so softmax-like kernels stay in vector registers and LLVM's
loop vectorizer can widen scalar loops that use them; `erf` of AVX-512 vectors looks its
polynomial up by interval (`erf_table.py`). `float16` math is done in
float32 and rounded back, as numpy does. Integer intrinsics (bitwise operations, shifts,
popcount, clz) are in `bits.py`.

Every intrinsic takes vector operands, so a vectorized loop that uses one stays vector IR;
where the target has no vector instruction for it, LLVM calls libm per lane.
"""
from __future__ import annotations

import math

from llvmlite import ir

from ... import dtype as dt
from ...errors import BuildError
from . import bits, erf_table, tensor_ops
from .types import (F32, I32, elem_type as _elem, lanes_of, type_suffix as _suffix,
                    with_elem as _with_elem)

# e^r on [-ln2/2, ln2/2]: degree-6 near-minimax polynomial (max rel. error 1.9e-9).
_EXP_POLY = (1.0, 1.0, 0.49999991059303284, 0.16666419804096222, 0.04166815057396889,
             0.008374840021133423, 0.0013840957544744015)
# tanh(x) = x + x^3 * P(x^2) for |x| < 0.625 (max rel. error 1.8e-8).
_TANH_SMALL = 0.625
_TANH_POLY = (-0.333333283662796, 0.13332802057266235, -0.053854942321777344,
              0.0210136529058218, -0.0061177643947303295)
# erf(x) = x * P(x^2) on [0, 1] (rel. error 1.7e-9)
_ERF_SMALL = (1.1283791065216064, -0.376126229763031, 0.11283566802740097,
              -0.026853136718273163, 0.005187164060771465, -0.000800068024545908,
              7.824142812751234e-05)
# erf(x) = 1 - exp(Q(x - 2.5) - x^2) on [1, 4] (Q fits log(erfc(x)) + x^2)
_ERF_LARGE = (-1.556815266609192, -0.35268062353134155, 0.056107938289642334,
              -0.010854062624275684, 0.0021662877406924963, -0.00043010018998757005,
              6.304668931988999e-05, -2.1021798602305353e-05, 1.2911671376514278e-07)
_LN2_HI = 0.693145751953125          # exact in float32, low bits zero
_LN2_LO = 1.428606765330187e-06
_LOG2E = 1.4426950408889634
_LOG2E_HI = 1.4426950216293335        # float32(log2(e))
_LOG2E_LO = 1.92596298909109e-08      # log2(e) - _LOG2E_HI

# name -> LLVM intrinsic stem for float arguments
_LLVM_UNARY = {"sqrt": "sqrt", "floor": "floor", "ceil": "ceil", "trunc": "trunc",
               "round": "roundeven", "nearbyint": "nearbyint", "sin": "sin", "cos": "cos",
               "tan": "tan", "asin": "asin", "acos": "acos", "atan": "atan", "sinh": "sinh",
               "cosh": "cosh", "log": "log", "log2": "log2", "log10": "log10", "exp2": "exp2",
               "exp": "exp", "exp10": "exp10", "fabs": "fabs"}
_LLVM_BINARY = {"atan2": "atan2", "copysign": "copysign", "power": "pow", "pow": "pow"}
# name -> libm stem (float32 variant gets an 'f' suffix): no LLVM intrinsic exists
_LIBM_UNARY = {"tanh": "tanh", "erf": "erf", "log1p": "log1p", "expm1": "expm1",
               "asinh": "asinh", "acosh": "acosh", "atanh": "atanh"}
_CLASSIFY = ("isnan", "isinf", "isfinite")

SUPPORTED = (set(_LLVM_UNARY) | set(_LLVM_BINARY) | set(_LIBM_UNARY) | set(_CLASSIFY)
             | set(bits.INT_OPS) | {"rsqrt", "sigmoid", "abs", "likely", "fmod", "hypot",
                                    "ldexp"})


class Math:
    """Float helpers over one builder; all values share one (possibly vector) type."""

    def __init__(self, em, typ):
        self.em = em
        self.b = em.builder
        self.t = typ

    def c(self, x, typ=None):
        typ = typ or self.t
        if isinstance(typ, ir.VectorType):
            return ir.Constant(typ, [x] * typ.count)
        return ir.Constant(typ, x)

    def intr(self, stem, *args, typ=None):
        typ = typ or self.t
        fn = self.em.mb.intrinsic(f"llvm.{stem}.{_suffix(typ)}", typ, [a.type for a in args])
        return self.b.call(fn, list(args))

    def fma(self, a, b, c):
        return self.intr("fma", a, b, c)

    def horner(self, x, coeffs):
        acc = self.c(coeffs[-1])
        for k in reversed(coeffs[:-1]):
            acc = self.fma(acc, x, self.c(k))
        return acc


def _exp_f32(em, x, base2=False):
    """exp(x) (or 2**x) of float32 values by range reduction and a polynomial."""
    m = Math(em, x.type)
    b = m.b
    ityp = _with_elem(x.type, I32)
    lo, hi = (-150.0, 128.5) if base2 else (-104.0, 89.0)
    avx512 = em.mb.target.has_avx512
    # the 512-bit vscalefps needs AVX-512F only; narrower ones need AVX-512VL (not on
    # every AVX-512 CPU), so they go through llvm.ldexp, which LLVM lowers for each
    scalef = avx512 and lanes_of(x) == 16
    if scalef:
        # ordered compares keep a NaN x, and every step after it carries the NaN through
        xc = b.select(b.fcmp_ordered("<", x, m.c(lo)), m.c(lo), x)
        xc = b.select(b.fcmp_ordered(">", xc, m.c(hi)), m.c(hi), xc)
    else:
        xc = m.intr("maxnum", x, m.c(lo))
        xc = m.intr("minnum", xc, m.c(hi))
    if base2:
        n = m.intr("roundeven", xc)
        r = b.fmul(b.fsub(xc, n), m.c(math.log(2.0)))
    else:
        n = m.intr("roundeven", b.fmul(xc, m.c(_LOG2E)))
        r = m.fma(n, m.c(-_LN2_HI), xc)
        r = m.fma(n, m.c(-_LN2_LO), r)
    p = m.horner(r, _EXP_POLY)
    if scalef:
        # vscalefps: p * 2^n in one instruction, overflow to inf and gradual underflow
        # included (what the integer steps below do in eleven); rounding mode 4: the
        # current one
        mask = ir.IntType(16)
        fn = em.mb.intrinsic("llvm.x86.avx512.mask.scalef.ps.512", x.type,
                             [x.type, x.type, x.type, mask, I32])
        return b.call(fn, [p, n, p, ir.Constant(mask, -1), ir.Constant(I32, 4)])
    ni = b.fptosi(n, ityp)
    isnan = b.fcmp_unordered("uno", x, x)
    if avx512:
        return b.select(isnan, x, _ldexp(em, p, ni))
    n1 = b.ashr(ni, m.c(1, ityp))
    n2 = b.sub(ni, n1)
    s1 = b.bitcast(b.shl(b.add(n1, m.c(127, ityp)), m.c(23, ityp)), x.type)
    s2 = b.bitcast(b.shl(b.add(n2, m.c(127, ityp)), m.c(23, ityp)), x.type)
    res = b.fmul(b.fmul(p, s1), s2)
    return b.select(isnan, x, res)


def _log_f32(em, x, base2=False):
    """log(x) (or log2) of float32 values: x = m * 2^e with m in [sqrt(1/2), sqrt(2)),
    log(m) = 2 atanh(s), s = (m - 1) / (m + 1), as a short series in s^2."""
    m = Math(em, x.type)
    b = m.b
    ityp = _with_elem(x.type, I32)
    isden = b.fcmp_ordered("<", x, m.c(1.17549435e-38))
    xs = b.select(isden, b.fmul(x, m.c(8388608.0)), x)
    bits = b.bitcast(xs, ityp)
    e = b.sub(b.ashr(bits, m.c(23, ityp)), m.c(127, ityp))
    mant = b.bitcast(b.or_(b.and_(bits, m.c(0x007FFFFF, ityp)), m.c(0x3F800000, ityp)), x.type)
    big = b.fcmp_ordered(">", mant, m.c(1.4142135623730951))
    mant = b.select(big, b.fmul(mant, m.c(0.5)), mant)
    e = b.add(e, b.zext(big, ityp))
    e = b.sub(e, b.select(isden, m.c(23, ityp), m.c(0, ityp)))
    f = b.fsub(mant, m.c(1.0))          # exact
    sv = b.fdiv(f, b.fadd(f, m.c(2.0)))
    z = b.fmul(sv, sv)
    r = b.fmul(z, m.horner(z, (2.0 / 3, 2.0 / 5, 2.0 / 7, 2.0 / 9)))
    hfsq = b.fmul(m.c(0.5), b.fmul(f, f))
    # log1p(f) = f - (hfsq - s * (hfsq + R)): the exact f dominates, corrections are small
    logm = b.fsub(f, b.fsub(hfsq, b.fmul(sv, b.fadd(hfsq, r))))
    ef = b.sitofp(e, x.type)
    if base2:
        res = m.fma(logm, m.c(_LOG2E_HI), m.fma(logm, m.c(_LOG2E_LO), ef))
    else:
        res = m.fma(ef, m.c(_LN2_HI), m.fma(ef, m.c(_LN2_LO), logm))
    inf = m.c(float("inf"))
    res = b.select(b.fcmp_ordered("==", x, inf), inf, res)
    res = b.select(b.fcmp_ordered("==", x, m.c(0.0)), m.c(float("-inf")), res)
    bad = b.fcmp_unordered("<", x, m.c(0.0))  # negative or NaN
    return b.select(bad, m.c(float("nan")), res)


def _erf_f32(em, x):
    m = Math(em, x.type)
    if em.mb.target.has_avx512 and erf_table.fits(lanes_of(x)):
        return erf_table.erf(m, x)
    b = m.b
    ax = m.intr("fabs", x)
    x2 = b.fmul(ax, ax)
    # x + x * (P(x^2) - 1): the exact x dominates
    small = m.fma(ax, m.horner(x2, (_ERF_SMALL[0] - 1.0,) + _ERF_SMALL[1:]), ax)
    q = m.horner(b.fsub(ax, m.c(2.5)), _ERF_LARGE)
    large = b.fsub(m.c(1.0), _exp_f32(em, b.fsub(q, x2)))
    r = b.select(b.fcmp_ordered("<", ax, m.c(1.0)), small, large)
    r = b.select(b.fcmp_ordered(">=", ax, m.c(4.0)), m.c(1.0), r)
    return m.intr("copysign", r, x)


def _tanh_f32(em, x):
    m = Math(em, x.type)
    b = m.b
    ax = m.intr("fabs", x)
    # large |x|: 1 - 2 / (exp(2|x|) + 1)
    e = _exp_f32(em, b.fadd(ax, ax))
    large = b.fsub(m.c(1.0), b.fdiv(m.c(2.0), b.fadd(e, m.c(1.0))))
    x2 = b.fmul(ax, ax)
    small = m.fma(b.fmul(ax, x2), m.horner(x2, _TANH_POLY), ax)
    r = b.select(b.fcmp_ordered("<", ax, m.c(_TANH_SMALL)), small, large)
    return m.intr("copysign", r, x)


def _sigmoid(em, x, vector_exp):
    """1 / (1 + e^-x) for x >= 0 and e^x / (1 + e^x) for x < 0, e = exp(-|x|) <= 1, so
    neither branch rounds a huge 1 + e."""
    m = Math(em, x.type)
    b = m.b
    nax = b.fneg(m.intr("fabs", x))
    e = _exp_f32(em, nax) if vector_exp else m.intr("exp", nax)
    num = b.select(b.fcmp_ordered(">=", x, m.c(0.0)), m.c(1.0), e)
    return b.fdiv(num, b.fadd(m.c(1.0), e))


def _libm_call(em, stem, args):
    """A libm call per lane (`tanhf`, `erf`, ...) for float32/float64 values."""
    t = args[0].type
    et = _elem(t)
    name = stem + ("f" if isinstance(et, ir.FloatType) else "")
    fn = em.mb.declare(name, et, [et] * len(args))
    b = em.builder
    if not isinstance(t, ir.VectorType):
        return b.call(fn, list(args))
    out = ir.Constant(t, ir.Undefined)
    for i in range(t.count):
        idx = ir.Constant(I32, i)
        lane_args = [b.extract_element(a, idx) for a in args]
        out = b.insert_element(out, b.call(fn, lane_args), idx)
    return out


def _float_math(em, name, args, dtype):
    """`name` on float values `args` of tdsl dtype `dtype` (float32 or float64)."""
    x = args[0]
    f32 = dtype == "float32"
    m = Math(em, x.type)
    b = em.builder
    # float32: inline polynomials for scalars too, so LLVM's loop vectorizer can widen
    # scalar loops that use them (it cannot widen libm calls)
    if name == "exp" and f32:
        return _exp_f32(em, x)
    if name == "exp2" and f32:
        return _exp_f32(em, x, base2=True)
    if name == "tanh" and f32:
        return _tanh_f32(em, x)
    if name in ("log", "log2") and f32:
        return _log_f32(em, x, base2=name == "log2")
    if name == "erf" and f32:
        return _erf_f32(em, x)
    if name == "sigmoid":
        return _sigmoid(em, x, f32)
    if name == "rsqrt":
        return b.fdiv(m.c(1.0), m.intr("sqrt", x))
    if name == "abs":
        return m.intr("fabs", x)
    if name == "fmod":
        return b.frem(x, args[1])       # C fmod: the sign of x
    if name == "hypot":
        return _hypot(em, x, args[1], f32)
    if name in _LLVM_UNARY:
        return m.intr(_LLVM_UNARY[name], x)
    if name in _LLVM_BINARY:
        return m.intr(_LLVM_BINARY[name], x, args[1])
    if name in _LIBM_UNARY:
        return _libm_call(em, _LIBM_UNARY[name], [x])
    raise BuildError(f"the LLVM backend has no intrinsic {name!r}")  # pragma: no cover


def _hypot(em, x, y, f32):
    """sqrt(x*x + y*y) without overflow or underflow in between, and inf when either is
    infinite (even if the other is NaN), as C's hypot. float32: squares in float64 are
    exact enough; float64: max(|x|,|y|) * sqrt(1 + (min/max)^2)."""
    b = em.builder
    m = Math(em, x.type)
    ax, ay = m.intr("fabs", x), m.intr("fabs", y)
    inf = m.c(float("inf"))
    either_inf = b.or_(b.fcmp_ordered("==", ax, inf), b.fcmp_ordered("==", ay, inf))
    if f32:
        wt = _with_elem(x.type, ir.DoubleType())
        wx, wy = b.fpext(ax, wt), b.fpext(ay, wt)
        s = b.fadd(b.fmul(wx, wx), b.fmul(wy, wy))
        r = b.fptrunc(Math(em, wt).intr("sqrt", s), x.type)
    else:
        hi, lo = m.intr("maxnum", ax, ay), m.intr("minnum", ax, ay)
        t = b.fdiv(lo, hi)
        r = b.fmul(hi, m.intr("sqrt", m.fma(t, t, m.c(1.0))))
        r = b.select(b.fcmp_ordered("==", hi, m.c(0.0)), m.c(0.0), r)
        # NaN operands: maxnum/minnum drop a NaN, so put it back
        r = b.select(b.fcmp_unordered("uno", x, y), m.c(float("nan")), r)
    return b.select(either_inf, inf, r)


def _classify(em, name, x):
    """isnan / isinf / isfinite of float values, as i1 (per lane)."""
    b = em.builder
    if name == "isnan":
        return b.fcmp_unordered("uno", x, x)
    m = Math(em, x.type)
    ax = m.intr("fabs", x)
    if name == "isinf":
        return b.fcmp_ordered("==", ax, m.c(float("inf")))
    return b.fcmp_ordered("!=", ax, m.c(float("inf")))     # ordered: false for NaN


def _ldexp(em, x, n):
    """x * 2**n (n: i32 per lane)."""
    t = x.type
    fn = em.mb.intrinsic(f"llvm.ldexp.{_suffix(t)}.{_suffix(n.type)}", t, [t, n.type])
    return em.builder.call(fn, [x, n])


def emit_call(em, e):
    """Emits the intrinsic call `e` (a tdsl `Call`) through emitter `em`."""
    name = e.name
    if e.extern:
        from .externs import emit_pure
        return emit_pure(em, e, [em.expr(a) for a in e.args])
    if name in tensor_ops.OPS:
        return tensor_ops.emit(em, e)
    if name not in SUPPORTED:
        raise BuildError(f"the LLVM backend does not know the intrinsic {name!r} in {e}; "
                         f"known: {', '.join(sorted(SUPPORTED))}")
    if name == "likely":
        return em.expr(e.args[0])
    args = [em.expr(a) for a in e.args]
    # operands may mix scalars and vectors inside a vectorized loop
    lanes = max(lanes_of(a) for a in args)
    args = [em.splat(a, lanes) if lanes > 1 else a for a in args]
    b = em.builder
    if name in bits.INT_OPS:
        return bits.emit(em, name, args, e)
    src = e.args[0].dtype
    if name in _CLASSIFY or name == "ldexp":
        x = args[0]
        if src == "float16":
            x = b.fpext(x, _with_elem(x.type, F32))
        if name in _CLASSIFY:
            return _classify(em, name, x)
        r = _ldexp(em, x, args[1])
        return b.fptrunc(r, args[0].type) if src == "float16" else r
    dtype = e.dtype
    args = [em.cast(a, a_e.dtype, dtype) for a, a_e in zip(args, e.args)]
    if not dt.is_float(dtype):
        if name == "abs":
            x = args[0]
            if dtype == "bool" or not dt.is_signed(dtype):
                return x
            zero = em.const(dtype, 0, lanes)
            return b.select(b.icmp_signed("<", x, zero), b.sub(zero, x), x)
        if name == "fmod":
            return bits.truncmod(em, *em.unify(args[0], args[1]), dtype)
        raise BuildError(f"{name}() needs a floating-point argument, got {dtype} in {e}")
    if dtype == "float16":
        wide = [b.fpext(a, _with_elem(a.type, F32)) for a in args]
        r = _float_math(em, name, wide, "float32")
        return b.fptrunc(r, args[0].type)
    return _float_math(em, name, args, dtype)
