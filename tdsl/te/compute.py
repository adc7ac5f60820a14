"""User-facing constructors: var, placeholder, compute, reduce_axis, thread_axis."""
from __future__ import annotations

import builtins
import functools
import inspect

from .. import dtype as dt
from ..errors import TdslError
from ..ir import expr as E
from ..ir.expr import Range, Var
from ..ir.visitor import walk
from .tensor import ComputeOp, IterVar, PlaceholderOp

_INT_DTYPES = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")


def var(name="v", dtype="int32", multiple_of=1):
    """A symbolic scalar: a size bound at call time, or a scalar argument."""
    dtype = dt.check(dtype)
    return Var(name, dtype, False, int(multiple_of))


def size_var(name="n", dtype="int32", multiple_of=1):
    """A symbolic size known to be non-negative."""
    return Var(name, dt.check(dtype), True, int(multiple_of))


def _shape(shape, what):
    if isinstance(shape, (int, E.Expr)):
        shape = (shape,)
    out = []
    for k, s in enumerate(shape):
        s = _integral_float(s, k, what)
        if isinstance(s, bool) or not isinstance(s, (int, E.Expr)) and not hasattr(s, "item"):
            raise TdslError(f"{what}: shape entries must be integers or tdsl.var sizes, got {s!r}")
        s = E.convert(s)
        if s.dtype not in _INT_DTYPES:
            raise TdslError(f"{what}: shape entry {s} has type {s.dtype}; sizes must be integers")
        if isinstance(s, E.IntImm) and s.value < 0:
            raise TdslError(f"{what}: negative size {s.value} in shape")
        out.append(s)
    return tuple(out)


def _integral_float(s, k, what):
    """`N / bn` in Python 3 is a float even when bn divides N (TVM users write shapes that
    way): an integral float is that integer; any other float is a mistake worth naming."""
    if isinstance(s, float) or (hasattr(s, "dtype") and getattr(s.dtype, "kind", "") == "f"):
        v = float(s)
        if not v.is_integer():
            raise TdslError(f"{what}: shape entry {k} is {v!r}, not a whole number; "
                            "sizes must be integers (use // for an integer division)")
        return int(v)
    return s


def placeholder(shape, dtype="float32", name="placeholder"):
    """An input tensor."""
    return PlaceholderOp(name, _shape(shape, f"placeholder '{name}'"), dt.check(dtype)).output(0)


def _range(dom, what):
    if isinstance(dom, Range):
        return dom
    if isinstance(dom, (int, E.Expr)):
        return Range.from_bounds(0, dom)
    if isinstance(dom, (tuple, list)) and len(dom) == 2:
        return Range.from_bounds(*dom)
    raise TdslError(f"{what}: a domain is (lo, hi), got {dom!r}")


def reduce_axis(dom, name="rv"):
    """A reduction iteration variable over [lo, hi)."""
    return IterVar(_range(dom, f"reduce_axis '{name}'"), Var(name), "reduce")


THREAD_TAGS = tuple(f"{a}.{d}" for a in ("blockIdx", "threadIdx") for d in "xyz") + ("vthread",)


def thread_axis(dom=None, tag="", name=None):
    """A GPU grid dimension: `thread_axis("threadIdx.x")`, or with a domain that fixes the
    extent of the loop bound to it, `thread_axis((0, 32), "threadIdx.x")`. "vthread" is a
    virtual thread: its iterations run interleaved within each thread."""
    if isinstance(dom, str):        # thread_axis("threadIdx.x"[, name])
        if tag and name is None and tag not in THREAD_TAGS:
            name = tag
        dom, tag = None, dom
    if tag not in THREAD_TAGS:
        raise TdslError(f"thread_axis: unknown tag {tag!r}; use one of {', '.join(THREAD_TAGS)}")
    if dom is not None:
        dom = _range(dom, f"thread_axis '{tag}'")
        if not (isinstance(dom.min, E.IntImm) and isinstance(dom.extent, E.IntImm)
                and dom.min.value == 0 and dom.extent.value > 0):
            raise TdslError(f"thread_axis '{tag}': the domain must be (0, n) with a constant "
                            f"n > 0, got [{dom.min}, {dom.min + dom.extent})")
    return IterVar(dom, Var(name or tag), "thread", tag)


def _param_names(fcompute, ndim):
    try:
        params = list(inspect.signature(fcompute).parameters.values())
    except (TypeError, ValueError):
        params = []
    if builtins.any(p.kind is p.VAR_POSITIONAL for p in params):
        return [f"i{d}" for d in range(ndim)]
    names = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if len(names) != ndim:
        raise TdslError(f"compute: the lambda takes {len(names)} indices ({', '.join(names)}) "
                        f"but the shape has {ndim} dimensions")
    return names


def compute(shape, fcompute, name="compute", tag="", attrs=None):
    """A tensor defined element-wise by `fcompute(*indices)`. A lambda returning a tuple
    defines several tensors over the same loops and returns them as a list
    (`T0, T1 = compute((m,), lambda i: argmax((idx[i, k], val[i, k]), axis=k))`)."""
    shape = _shape(shape, f"compute '{name}'")
    names = _param_names(fcompute, len(shape))
    axis = [IterVar(Range(E.IntImm(0), s), Var(n), "data_par") for n, s in zip(names, shape)]
    body = fcompute(*[iv.var for iv in axis])
    if isinstance(body, (list, tuple)):
        if not body:
            raise TdslError(f"compute '{name}': the lambda returned an empty tuple")
        bodies = tuple(E.convert(b) for b in body)
        for b in bodies:
            _check_body(b, name)
        _check_outputs(bodies, name)
        return list(ComputeOp(name, tag, attrs, axis, bodies, shape).outputs)
    body = E.convert(body)
    _check_body(body, name)
    if isinstance(body, E.Reduce) and isinstance(body.source, tuple):
        raise TdslError(f"compute '{name}': the reduction '{body.combiner.name}' is over a tuple "
                        "of values; return all of its outputs from the lambda "
                        f"(lambda i: {body.combiner.name}((a, b), axis=k)) and unpack the tensors")
    return ComputeOp(name, tag, attrs, axis, body, shape).output(0)


def _check_body(body, name):
    def f(n):
        if isinstance(n, E.Reduce) and n is not body:
            raise TdslError(
                f"compute '{name}': a reduction must be the whole body of a compute "
                "(e.g. compute(..., lambda i: sum(A[i, k], axis=k))); put surrounding math in "
                "a second compute")
    walk(body, f)


def _check_outputs(bodies, name):
    """The outputs of one compute share its loops: reductions must be the elements of one
    tuple reduction, in order."""
    reds = [isinstance(b, E.Reduce) for b in bodies]
    if not builtins.any(reds):
        return
    first = bodies[0]
    if not builtins.all(reds):
        raise TdslError(f"compute '{name}': either every output is a reduction or none is; "
                        "define the reduction in a compute of its own")
    for k, b in enumerate(bodies):
        same = (b.combiner is first.combiner and b.source is first.source
                and b.axis == first.axis and b.condition is first.condition
                and b.init is first.init)
        if not same or not isinstance(b.source, tuple) or b.value_index != k \
                or len(bodies) != len(b.source):
            raise TdslError(f"compute '{name}': several reductions in one compute must be the "
                            "outputs of one reduction over a tuple, in order (e.g. lambda i: "
                            "argmax((idx[i, k], val[i, k]), axis=k)); use one compute per "
                            "reduction otherwise")


# --------------------------------------------------------------------------------------
# reductions


def _axes(axis, what):
    axes = list(axis) if isinstance(axis, (list, tuple)) else [axis]
    for a in axes:
        if not isinstance(a, IterVar) or a.kind != "reduce":
            raise TdslError(f"{what}: axis must be reduce_axis iteration variables, got {a!r}")
    if not axes:
        raise TdslError(f"{what}: at least one reduction axis is needed")
    return tuple(axes)


def comm_reducer(combine, identity, name="reduce"):
    """A commutative reducer from `combine(x, y)` and `identity(dtype)`.

    Reducers over tuples: `combine(x, y)` takes and returns tuples and `identity(*dtypes)`
    returns one; called with a tuple, the reducer gives one reduction per element, to be
    returned together from a compute lambda (argmax over (index, value) pairs)."""

    def reducer(expr, axis, where=None, init=None):
        axes = _axes(axis, name)
        cond = E.const(True) if where is None else E.convert(where)
        if cond.dtype != "bool":
            raise TdslError(f"{name}: where= must be a condition, got {cond}")
        comb = E.CommReducer(name, combine, identity)
        if not isinstance(expr, (tuple, list)):
            expr = E.convert(expr)
            if init is not None:
                init = E.cast(init, expr.dtype)
            return E.Reduce(comb, expr, axes, cond, init)
        source = tuple(E.convert(x) for x in expr)
        if not source:
            raise TdslError(f"{name}: the reduced tuple is empty")
        if init is not None:
            if not isinstance(init, (tuple, list)) or len(init) != len(source):
                raise TdslError(f"{name}: init= must be a tuple of {len(source)} values, like "
                                f"the reduced tuple, got {init!r}")
            init = tuple(E.cast(v, x.dtype) for v, x in zip(init, source))
        return tuple(E.Reduce(comb, source, axes, cond, init, k) for k in range(len(source)))

    reducer.__name__ = name
    reducer.__doc__ = f"The {name} reduction of `expr` over `axis`."
    return reducer


def _lowest(dtype):
    if dt.is_float(dtype):
        return E.const(float("-inf"), dtype)
    if dtype == "bool":
        return E.const(0, dtype)
    import numpy as np
    return E.const(int(np.iinfo(dtype).min), dtype)


def _highest(dtype):
    if dt.is_float(dtype):
        return E.const(float("inf"), dtype)
    if dtype == "bool":
        return E.const(1, dtype)
    import numpy as np
    return E.const(int(np.iinfo(dtype).max), dtype)


sum = comm_reducer(lambda x, y: x + y, lambda t: E.const(0, t), "sum")  # noqa: A001
prod = comm_reducer(lambda x, y: x * y, lambda t: E.const(1, t), "prod")
_max = comm_reducer(E.maximum, _lowest, "max")
_min = comm_reducer(E.minimum, _highest, "min")


def _is_axis_arg(x):
    return isinstance(x, IterVar) or (isinstance(x, (list, tuple)) and len(x) > 0 and builtins.all(isinstance(a, IterVar) for a in x))


def max(expr, axis=None, where=None, init=None):  # noqa: A001
    """`max(expr, axis=k)` reduces; `max(a, b)` is the element-wise maximum."""
    if axis is not None and not _is_axis_arg(axis):
        return E.maximum(expr, axis)
    if axis is None:
        raise TdslError("max: give a reduction axis (max(expr, axis=k)) or two values (max(a, b))")
    return _max(expr, axis, where, init)


def min(expr, axis=None, where=None, init=None):  # noqa: A001
    """`min(expr, axis=k)` reduces; `min(a, b)` is the element-wise minimum."""
    if axis is not None and not _is_axis_arg(axis):
        return E.minimum(expr, axis)
    if axis is None:
        raise TdslError("min: give a reduction axis (min(expr, axis=k)) or two values (min(a, b))")
    return _min(expr, axis, where, init)


def all(*conds):  # noqa: A001
    conds = [E.convert(c) for c in (conds[0] if len(conds) == 1 and isinstance(conds[0], (list, tuple)) else conds)]
    if not conds:
        return E.const(True)
    return functools.reduce(E.logical_and, conds)


def any(*conds):  # noqa: A001
    conds = [E.convert(c) for c in (conds[0] if len(conds) == 1 and isinstance(conds[0], (list, tuple)) else conds)]
    if not conds:
        return E.const(False)
    return functools.reduce(E.logical_or, conds)


# --------------------------------------------------------------------------------------
# math intrinsics


def _unary(name):
    def f(x):
        return E.call(name, x)
    f.__name__ = name
    f.__doc__ = f"Element-wise {name}."
    return f


def _binary(name, doc):
    def f(x, y):
        return E.call(name, x, y)
    f.__name__ = name
    f.__doc__ = doc
    return f


def _classify(name):
    def f(x):
        return E.classify(name, x)
    f.__name__ = name
    f.__doc__ = f"Element-wise {name} (a boolean; constant on integers)."
    return f


exp, log, sqrt, rsqrt, tanh, sigmoid, erf, floor, ceil, round, sin, cos, exp2, log2, trunc = (  # noqa: A001
    _unary(n) for n in ("exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "erf", "floor", "ceil",
                        "round", "sin", "cos", "exp2", "log2", "trunc"))
(exp10, log10, log1p, expm1, tan, asin, acos, atan, sinh, cosh, asinh, acosh, atanh,
 nearbyint) = (_unary(n) for n in ("exp10", "log10", "log1p", "expm1", "tan", "asin", "acos",
                                   "atan", "sinh", "cosh", "asinh", "acosh", "atanh",
                                   "nearbyint"))
atan2 = _binary("atan2", "numpy's arctan2(x, y): the angle of the point (y, x), the first "
                          "argument the ordinate.")
hypot = _binary("hypot", "Element-wise sqrt(x*x + y*y), without overflow in between.")
copysign = _binary("copysign", "Element-wise |x| with the sign of y.")
fmod = _binary("fmod", "Element-wise C fmod: x - trunc(x / y) * y, the sign of x (numpy.fmod); "
                       "on integers the truncating remainder (0 when y is 0).")
isnan, isinf, isfinite = (_classify(n) for n in ("isnan", "isinf", "isfinite"))


def ldexp(x, e):
    """Element-wise x * 2**e for a float x and an integer e."""
    return E.call("ldexp", x, e)


def popcount(x):
    """The number of one bits of an integer (same dtype as x)."""
    return E.call("popcount", x)


def clz(x):
    """The number of leading zero bits of an integer in its width (int32; the width for 0)."""
    return E.call("clz", x)


def bitwise_and(x, y):
    """`x & y` on integers (logical and on booleans)."""
    return E.convert(x) & y


def bitwise_or(x, y):
    """`x | y` on integers (logical or on booleans)."""
    return E.convert(x) | y


def bitwise_xor(x, y):
    """`x ^ y` on integers (logical xor on booleans)."""
    return E.convert(x) ^ y


def bitwise_not(x):
    """`~x` on integers (logical not on booleans)."""
    return E.bitwise_not(x)


def shift_left(x, y):
    """`x << y` on integers; y must be in [0, bits of x) (else the result is unspecified,
    as in C)."""
    return E.convert(x) << y


def shift_right(x, y):
    """`x >> y` on integers: arithmetic for signed x, logical for unsigned; y in
    [0, bits of x)."""
    return E.convert(x) >> y


def min_value(dtype):
    """The smallest finite value of `dtype` as a constant (the most negative float)."""
    import numpy as np
    dtype = dt.check(dtype)
    if dt.is_float(dtype):
        return E.const(-float(np.finfo(dtype).max), dtype)
    if dtype == "bool":
        return E.const(False, "bool")
    return E.const(int(np.iinfo(dtype).min), dtype)


def max_value(dtype):
    """The largest finite value of `dtype` as a constant."""
    import numpy as np
    dtype = dt.check(dtype)
    if dt.is_float(dtype):
        return E.const(float(np.finfo(dtype).max), dtype)
    if dtype == "bool":
        return E.const(True, "bool")
    return E.const(int(np.iinfo(dtype).max), dtype)


def abs(x):  # noqa: A001
    """Element-wise absolute value (integers and floats)."""
    x = E.convert(x)
    if x.dtype.startswith("uint") or x.dtype == "bool":
        return x
    return E.Call("abs", (x,), x.dtype)


def power(x, y):
    """x ** y for floating-point values."""
    return E.call("power", x, y)


def if_then_else(cond, t, f):
    """`t` where `cond` holds, else `f`; only the chosen side is evaluated."""
    return E.select(cond, t, f)


select = if_then_else
const = E.const
cast = E.cast
