"""Value expressions: one grammar shared by tensor expressions (L0) and the loop IR (L2).

Nodes are small frozen dataclasses. Equality (`==`) builds a comparison node, as users
write `A[i] == 0` inside lambdas; hashing is by identity, and `bool()` of a comparison
answers whether both sides are the same object, so nodes still work as dict keys.
Constants (`IntImm`, `FloatImm`) are the exception: they act as the numbers they hold
(`int()`, `range()`, comparisons and hashing with Python numbers), see `_ConstValue`.
Structural questions about integer expressions go through `tdsl.arith` (sympy), never
through these classes.
"""
from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Any, Tuple

from .. import dtype as dt
from ..errors import TdslError


class Expr:
    """Base of all value expressions; gives them Python's operators."""

    __hash__ = object.__hash__
    dtype: str

    # arithmetic -----------------------------------------------------------------
    def __add__(self, o): return _binary(Add, self, o)
    def __radd__(self, o): return _binary(Add, o, self)
    def __sub__(self, o): return _binary(Sub, self, o)
    def __rsub__(self, o): return _binary(Sub, o, self)
    def __mul__(self, o): return _binary(Mul, self, o)
    def __rmul__(self, o): return _binary(Mul, o, self)
    def __truediv__(self, o): return true_div(self, o)
    def __rtruediv__(self, o): return true_div(o, self)
    def __floordiv__(self, o): return _binary(FloorDiv, self, o)
    def __rfloordiv__(self, o): return _binary(FloorDiv, o, self)
    def __mod__(self, o): return _binary(FloorMod, self, o)
    def __rmod__(self, o): return _binary(FloorMod, o, self)
    def __pow__(self, o): return call("power", self, o)
    def __rpow__(self, o): return call("power", o, self)
    def __neg__(self): return _binary(Sub, const(0, self.dtype), self)
    def __pos__(self): return self

    # comparisons and logic --------------------------------------------------------
    def __lt__(self, o): return _binary(LT, self, o)
    def __le__(self, o): return _binary(LE, self, o)
    def __gt__(self, o): return _binary(GT, self, o)
    def __ge__(self, o): return _binary(GE, self, o)
    def __eq__(self, o): return _binary(EQ, self, o)
    def __ne__(self, o): return _binary(NE, self, o)
    # & | ^ ~: logic on booleans, bitwise on integers; << >> on integers
    def __and__(self, o): return _bitwise("&", self, o)
    def __rand__(self, o): return _bitwise("&", o, self)
    def __or__(self, o): return _bitwise("|", self, o)
    def __ror__(self, o): return _bitwise("|", o, self)
    def __xor__(self, o): return _bitwise("^", self, o)
    def __rxor__(self, o): return _bitwise("^", o, self)
    def __invert__(self): return bitwise_not(self)
    def __lshift__(self, o): return _bitwise("<<", self, o)
    def __rlshift__(self, o): return _bitwise("<<", o, self)
    def __rshift__(self, o): return _bitwise(">>", self, o)
    def __rrshift__(self, o): return _bitwise(">>", o, self)

    def equal(self, o):
        """`self == o` as an expression (TVM spelling, e.g. `tx.var.equal(0)`)."""
        return _binary(EQ, self, o)

    def __bool__(self):
        raise TdslError(
            f"cannot use the symbolic expression {self} as a Python bool; "
            "use tdsl.if_then_else / tdsl.select, or & | ~ for logic")

    def astype(self, dtype):
        return cast(self, dtype)

    # __str__ and __repr__ (the text of `tdsl.ir.printer`) are attached by the package
    # tdsl.ir: the printer imports this module, so this module cannot import it


def ir_node(cls):
    """An IR node class: a frozen dataclass compared by identity (`eq=False`), printed by
    tdsl.ir.printer."""
    return dataclass(frozen=True, eq=False, repr=False)(cls)


class _ConstValue:
    """Constants behave like the Python numbers they hold, as TVM's do: `int()`,
    `float()`, `bool()`, `operator.index` (so `range(t.shape[0])` and `np.zeros(t.shape)`
    work), and comparisons with numbers or other constants answer with a Python bool.
    Their hash is the number's, so `{4: ...}[t.shape[0]]` finds it. Against any other
    expression they still build comparison nodes.

    Two constants are `==` only when they are the same constant (type, dtype and value,
    `-0.0` apart from `0.0`): passes keep expressions in dicts, and a dict must not merge
    constants that generate different code."""

    def __int__(self): return int(self.value)
    def __float__(self): return float(self.value)
    def __bool__(self): return bool(self.value)
    def __hash__(self): return hash(self.value)

    @staticmethod
    def _number(o):
        """`o` as a Python number when it is a constant or a number, else None."""
        if isinstance(o, (IntImm, FloatImm)):
            return o.value
        if isinstance(o, (int, float)):
            return o
        if type(o).__module__ == "numpy" and getattr(o, "dtype", None) is not None \
                and getattr(o, "ndim", None) == 0 and o.dtype.kind in "biuf":
            return o.item()
        return None

    def __eq__(self, o):
        if isinstance(o, (IntImm, FloatImm)):
            return (type(o) is type(self) and o.dtype == self.dtype
                    and repr(o.value) == repr(self.value))
        v = self._number(o)
        return Expr.__eq__(self, o) if v is None else self.value == v

    def __ne__(self, o):
        r = self.__eq__(o)
        return not r if isinstance(r, bool) else Expr.__ne__(self, o)

    def _order(self, o, op, symbolic):
        v = self._number(o)
        return symbolic(self, o) if v is None else op(self.value, v)

    def __lt__(self, o): return self._order(o, operator.lt, Expr.__lt__)
    def __le__(self, o): return self._order(o, operator.le, Expr.__le__)
    def __gt__(self, o): return self._order(o, operator.gt, Expr.__gt__)
    def __ge__(self, o): return self._order(o, operator.ge, Expr.__ge__)


@ir_node
class IntImm(_ConstValue, Expr):
    value: int
    dtype: str = "int32"

    def __index__(self): return int(self.value)


@ir_node
class FloatImm(_ConstValue, Expr):
    value: float
    dtype: str = "float32"


@ir_node
class Var(Expr):
    """A scalar variable: a loop variable, a symbolic size or a scalar argument.

    `nonneg` and `multiple_of` are facts the simplifier may use to prove guards away.
    """
    name: str
    dtype: str = "int32"
    nonneg: bool = False
    multiple_of: int = 1


@ir_node
class BinaryOp(Expr):
    a: Expr
    b: Expr

    @property
    def dtype(self):
        return self.a.dtype


class Add(BinaryOp): pass
class Sub(BinaryOp): pass
class Mul(BinaryOp): pass
class Div(BinaryOp):
    """True division of floats (integers use FloorDiv)."""
class FloorDiv(BinaryOp): pass
class FloorMod(BinaryOp): pass
class Min(BinaryOp): pass
class Max(BinaryOp): pass


class CmpOp(BinaryOp):
    dtype = "bool"

    def __bool__(self):
        # Only reached from dict/list membership tests on EQ/NE; identity is the answer.
        if isinstance(self, EQ):
            return self.a is self.b
        if isinstance(self, NE):
            return self.a is not self.b
        return Expr.__bool__(self)


class EQ(CmpOp): pass
class NE(CmpOp): pass
class LT(CmpOp): pass
class LE(CmpOp): pass
class GT(CmpOp): pass
class GE(CmpOp): pass


class And(BinaryOp):
    dtype = "bool"


class Or(BinaryOp):
    dtype = "bool"


@ir_node
class Not(Expr):
    a: Expr
    dtype = "bool"


@ir_node
class Select(Expr):
    """`cond ? t : f`. Code generators evaluate only the chosen side when a side reads
    memory, so `if_then_else(i > 0, A[i - 1], 0)` never reads out of bounds."""
    cond: Expr
    t: Expr
    f: Expr

    @property
    def dtype(self):
        return self.t.dtype


@ir_node
class Cast(Expr):
    dtype: str
    value: Expr


@ir_node
class Call(Expr):
    """A math intrinsic (`exp`, `sqrt`, ...) or a hint such as `likely`; with `extern`, a
    call of the C function `name` itself (`call_pure_extern`), which code generators emit
    as written."""
    name: str
    args: Tuple[Expr, ...]
    dtype: str
    extern: bool = False

    @property
    def op(self):
        """TVM's `call.op`: what lowering rules written for TVM read (`op.op.name`,
        "tir.exp")."""
        return OpRef(self.name if self.extern else "tir." + self.name)


@dataclass(frozen=True)
class OpRef:
    """The op a Call calls, named as TVM names it."""
    name: str


@ir_node
class ProducerLoad(Expr):
    """`T[i, j]` in a tensor expression: a read of another tensor's element."""
    tensor: Any  # te.Tensor
    indices: Tuple[Expr, ...]

    @property
    def dtype(self):
        return self.tensor.dtype


@ir_node
class BufferLoad(Expr):
    """A read of a buffer element in the loop IR (indices as in the buffer's shape)."""
    buffer: Any  # ir.Buffer
    indices: Tuple[Expr, ...]

    @property
    def dtype(self):
        return self.buffer.dtype


@ir_node
class CommReducer:
    """A commutative reduction: `combine(lhs, rhs)` with `identity(dtype)`; for a reduction
    over tuples (argmax: (index, value)), `combine` takes and returns tuples and
    `identity(*dtypes)` returns one."""
    name: str
    combine: Any
    identity: Any

    __hash__ = object.__hash__

    def _tuple(self, what, out, n, dtypes):
        if n == 1:
            out = (out,)
        elif not isinstance(out, (tuple, list)) or len(out) != n:
            raise TdslError(f"comm_reducer '{self.name}': {what} must return a tuple of {n} "
                            f"values (one per element of the reduced tuple), got {out!r}")
        return tuple(cast(convert(v), d) for v, d in zip(out, dtypes))

    def combine_values(self, lhs, rhs):
        """`combine` on tuples of expressions (1-tuples for plain reductions); a tuple."""
        dtypes = [x.dtype for x in lhs]
        out = self.combine(lhs[0], rhs[0]) if len(lhs) == 1 else \
            self.combine(tuple(lhs), tuple(rhs))
        return self._tuple("the combiner", out, len(lhs), dtypes)

    def identity_values(self, dtypes):
        """The identity element for values of `dtypes`, as a tuple."""
        out = self.identity(*dtypes)
        return self._tuple("the identity", out, len(dtypes), dtypes)


@ir_node
class Reduce(Expr):
    """One output of a reduction. A reduction over tuples (`argmax((i, v), axis=k)`)
    makes one Reduce per tuple element: `source` and `init` are then the whole tuples
    and `value_index` says which element this one is."""
    combiner: CommReducer
    source: Any  # Expr, or a tuple of Exprs
    axis: Tuple[Any, ...]  # IterVars
    condition: Expr
    init: Any  # Expr, a tuple (like source) or None
    value_index: int = 0

    @property
    def sources(self) -> tuple:
        return self.source if isinstance(self.source, tuple) else (self.source,)

    @property
    def inits(self):
        if self.init is None:
            return None
        return self.init if isinstance(self.init, tuple) else (self.init,)

    @property
    def dtype(self):
        return self.sources[self.value_index].dtype


# --------------------------------------------------------------------------------------
# construction helpers: conversion, promotion, light constant folding


def const(value, dtype=None) -> Expr:
    if isinstance(value, Expr):
        return value if dtype is None else cast(value, dtype)
    if dtype is None:
        if isinstance(value, bool):
            dtype = "bool"
        elif isinstance(value, int):
            dtype = "int32" if -2**31 <= value < 2**31 else "int64"
        else:
            dtype = "float32"
    dtype = dt.check(dtype)
    if dt.is_float(dtype):
        return FloatImm(float(value), dtype)
    return IntImm(int(bool(value)) if dtype == "bool" else int(value), dtype)


def convert(value) -> Expr:
    if isinstance(value, Expr):
        return value
    var = getattr(value, "var", None)  # an IterVar
    if isinstance(var, Var):
        return var
    if isinstance(value, (bool, int, float)):
        return const(value)
    try:
        import numpy as np
        if isinstance(value, np.generic):
            return const(value.item(), value.dtype.name)
    except ImportError:  # pragma: no cover
        pass
    incomplete = getattr(value, "incomplete", None)    # te.TensorSlice: A[i] of a 2-d A
    if callable(incomplete):
        incomplete()
    raise TdslError(f"cannot use {value!r} (a {type(value).__name__}) in a tensor expression")


def _is_python_number(x):
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def convert_operands(a, b):
    """Convert both operands; Python numbers take the dtype of the other side."""
    if _is_python_number(a) and not _is_python_number(b):
        b = convert(b)
        if isinstance(a, float) and not dt.is_float(b.dtype):
            return const(a), b
        return const(a, b.dtype if b.dtype != "bool" else None), b
    if _is_python_number(b) and not _is_python_number(a):
        a = convert(a)
        if isinstance(b, float) and not dt.is_float(a.dtype):
            return a, const(b)
        return a, const(b, a.dtype if a.dtype != "bool" else None)
    a, b = convert(a), convert(b)
    if a.dtype != b.dtype:
        t = dt.promote(a.dtype, b.dtype)
        a, b = cast(a, t), cast(b, t)
    return a, b


_FOLD = {
    "Add": lambda x, y: x + y, "Sub": lambda x, y: x - y, "Mul": lambda x, y: x * y,
    "FloorDiv": lambda x, y: x // y if y else None, "FloorMod": lambda x, y: x % y if y else None,
    "Min": min, "Max": max,
}


def _binary(cls, a, b):
    a, b = convert_operands(a, b)
    if cls in (FloorDiv, FloorMod) and dt.is_float(a.dtype):
        if cls is FloorDiv:
            return call("floor", Div(a, b))
        return Sub(a, Mul(b, call("floor", Div(a, b))))
    fold = _FOLD.get(cls.__name__)
    if fold and isinstance(a, IntImm) and isinstance(b, IntImm):
        v = fold(a.value, b.value)
        if v is not None:
            return IntImm(v, a.dtype)
    if isinstance(b, IntImm) and dt.is_int(a.dtype):
        if (cls in (Add, Sub) and b.value == 0) or (cls in (Mul, FloorDiv) and b.value == 1):
            return a
        if cls is FloorMod and b.value == 1:
            return IntImm(0, a.dtype)
    if isinstance(a, IntImm) and dt.is_int(b.dtype):
        if (cls is Add and a.value == 0) or (cls is Mul and a.value == 1):
            return b
    return cls(a, b)


def true_div(a, b):
    a, b = convert_operands(a, b)
    if not dt.is_float(a.dtype):
        raise TdslError(
            f"'/' on integers ({a} / {b}) is ambiguous; use '//' for floor division "
            "or cast to a float type first")
    return Div(a, b)


def cast(value, dtype) -> Expr:
    value = convert(value)
    dtype = dt.check(dtype)
    if value.dtype == dtype:
        return value
    if isinstance(value, (IntImm, FloatImm)):
        return const(value.value, dtype)
    return Cast(dtype, value)


def _as_bool(x):
    x = convert(x)
    if x.dtype != "bool":
        raise TdslError(f"logical operators need boolean operands, got {x} of type {x.dtype}")
    return x


def logical_and(a, b):
    return And(_as_bool(a), _as_bool(b))


def logical_or(a, b):
    return Or(_as_bool(a), _as_bool(b))


def logical_not(a):
    return Not(_as_bool(a))


_BIT_CALLS = {"&": "bitwise_and", "|": "bitwise_or", "^": "bitwise_xor", "<<": "shift_left",
              ">>": "shift_right"}
_LOGIC = {"&": lambda a, b: And(a, b), "|": lambda a, b: Or(a, b),
          "^": lambda a, b: NE(a, b)}


def _bitwise(op, a, b):
    """`a op b`: logic on two booleans, a bitwise operation on integers."""
    a, b = convert_operands(a, b)
    if a.dtype == "bool" and b.dtype == "bool" and op in _LOGIC:
        return _LOGIC[op](a, b)
    if not dt.is_int(a.dtype):
        what = "booleans or integers" if op in _LOGIC else "integers"
        raise TdslError(f"'{op}' needs {what}, got {a} ({a.dtype}) and {b} ({b.dtype})")
    return Call(_BIT_CALLS[op], (a, b), a.dtype)


def bitwise_not(a):
    """`~a`: logical not of a boolean, bitwise complement of an integer."""
    a = convert(a)
    if a.dtype == "bool":
        return Not(a)
    if not dt.is_int(a.dtype):
        raise TdslError(f"'~' needs a boolean or an integer, got {a} ({a.dtype})")
    return Call("bitwise_not", (a,), a.dtype)


def minimum(a, b):
    return _binary(Min, a, b)


def maximum(a, b):
    return _binary(Max, a, b)


def select(cond, t, f) -> Expr:
    cond = _as_bool(cond)
    t, f = convert_operands(t, f)
    return Select(cond, t, f)


FLOAT_INTRINSICS = ("exp", "exp2", "exp10", "log", "log2", "log10", "log1p", "expm1", "sqrt",
                    "rsqrt", "tanh", "sigmoid", "erf", "floor", "ceil", "round", "nearbyint",
                    "trunc", "power", "sin", "cos", "tan", "asin", "acos", "atan", "sinh",
                    "cosh", "asinh", "acosh", "atanh", "atan2", "hypot", "copysign", "ldexp")
# operands matched to one dtype (Python numbers take the other operand's)
BINARY_INTRINSICS = ("power", "atan2", "hypot", "copysign", "fmod")
INT_INTRINSICS = ("popcount", "clz")
# warp_shuffle_down(v, offset): v of the lane `offset` above in the warp (its own v past the
# warp's end); every lane of the warp must evaluate it. Emitted for CUDA only (cross-thread
# reductions), so only the CUDA dialect prints it.
WARP_SHUFFLE_DOWN = "warp_shuffle_down"


def call(name, *args) -> Expr:
    if name in BINARY_INTRINSICS:
        if len(args) != 2:
            raise TdslError(f"{name}() takes two arguments, got {len(args)}")
        args = convert_operands(*args)
    else:
        args = tuple(convert(a) for a in args)
    dtype = args[0].dtype
    if name in FLOAT_INTRINSICS and not dt.is_float(dtype):
        raise TdslError(f"{name}() needs a floating-point argument, got {args[0]} of type {dtype}")
    if name in INT_INTRINSICS and not dt.is_int(dtype):
        raise TdslError(f"{name}() needs an integer argument, got {args[0]} of type {dtype}")
    if name == "fmod" and dtype == "bool":
        raise TdslError(f"fmod() needs numbers, got {args[0]} of type bool")
    if name == "ldexp":
        if len(args) != 2 or not dt.is_int(args[1].dtype):
            raise TdslError(f"ldexp(x, e) needs an integer exponent e, got {args[1:]}")
        args = (args[0], cast(args[1], "int32"))
    if name == "clz":
        dtype = "int32"
    return Call(name, args, dtype)


def call_pure_extern(dtype, func_name, *args) -> Expr:
    """A call of the C function `func_name` (no side effects) returning `dtype`: TVM's
    `tir.call_pure_extern`. The function must exist on the target (`__expf` on CUDA,
    `expf` in libm)."""
    if not isinstance(func_name, str) or not func_name.isidentifier():
        raise TdslError(f"call_pure_extern: the function name must be a C identifier, got "
                        f"{func_name!r}")
    return Call(func_name, tuple(convert(a) for a in args), dt.check(dtype), True)


def classify(name, x) -> Expr:
    """isnan / isinf / isfinite: a boolean; on integers a constant (never NaN or inf)."""
    x = convert(x)
    if dt.is_float(x.dtype):
        return Call(name, (x,), "bool")
    return const(name == "isfinite", "bool")


def likely(cond) -> Expr:
    """Marks a guard that is almost always true; loop partitioning peels on it."""
    return Call("likely", (cond,), "bool")


def is_const_int(e, value=None) -> bool:
    return isinstance(e, IntImm) and (value is None or e.value == value)


@dataclass(frozen=True, eq=False, repr=False)
class Range:
    """The half-open interval [min, min + extent)."""
    min: Expr
    extent: Expr

    @staticmethod
    def from_min_extent(lo, extent):
        return Range(convert(lo), convert(extent))

    @staticmethod
    def from_bounds(lo, hi):
        """[lo, hi) from Python numbers or expressions."""
        lo, hi = convert(lo), convert(hi)
        return Range(lo, hi - lo)

    def __str__(self):
        return f"range(min={self.min}, ext={self.extent})"

    __repr__ = __str__
