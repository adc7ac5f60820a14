"""Symbolic sizes of graph tensors: a dimension is an int or a sympy expression of size
variables (positive integers named after the ONNX dim_params, "batch", "sequence"), so
that shape inference carries `batch*sequence`, `(L - 3)//2 + 1` or `2*sequence` through
a network the way it carries numbers.

A shape whose entries are all ints is static; everything below the graph layer that needs
a number reads a dimension through `evaluate` with the sizes of one call (the executor) or
of a representative call (a schedule's heuristics).
"""
from __future__ import annotations

import math
import re
from fractions import Fraction
from functools import lru_cache
from typing import Dict, Iterable, Mapping

import numpy as np
import sympy

from ...errors import GraphError


@lru_cache(maxsize=None)
def size_var(name: str) -> sympy.Symbol:
    """The size variable `name` (one object per name, so equal names compare equal)."""
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
        raise GraphError(f"a size variable's name must be an identifier, got {name!r}")
    return sympy.Symbol(name, integer=True, positive=True)


def legal_name(name: str) -> str:
    """An identifier for an ONNX dim_param ("batch_size", "seq-len" -> "seq_len")."""
    s = re.sub(r"\W", "_", str(name))
    return s if s and not s[0].isdigit() else "d_" + s


def is_dim(d) -> bool:
    return isinstance(d, (int, np.integer)) and not isinstance(d, bool) or \
        isinstance(d, sympy.Expr) and (d.is_integer is not False)


def as_dim(d):
    """`d` as a dimension: an int, or a sympy expression with size variables in it."""
    if isinstance(d, sympy.Expr):
        d = sympy.sympify(d)
        if d.is_Integer:
            return int(d)
        if not d.free_symbols or d.is_integer is False:
            raise GraphError(f"dimension {d} is not an integer")
        return d
    if isinstance(d, (int, np.integer)) and not isinstance(d, bool):
        return int(d)
    if isinstance(d, float) and d.is_integer():
        return int(d)
    raise TypeError(f"not a dimension: {d!r}")


def is_static(shape: Iterable) -> bool:
    return all(isinstance(d, int) for d in shape)


def free_vars(shapes: Iterable) -> set:
    """The size variables in dimensions or shapes (nested iterables of them)."""
    out = set()
    for d in shapes:
        if isinstance(d, sympy.Expr):
            out |= d.free_symbols
        elif isinstance(d, (tuple, list)):
            out |= free_vars(d)
        elif isinstance(d, np.ndarray) and d.dtype == object:
            out |= free_vars(d.reshape(-1).tolist())
    return out


def evaluate(d, sizes: Mapping):
    """The number dimension `d` is when the size variables have `sizes` ({name or
    symbol: int}); an unknown variable is a GraphError naming it."""
    if isinstance(d, int):
        return d
    compiled = _compiled(d)
    if compiled is not None:
        fn, names = compiled
        try:
            v = fn(*[int(sizes[n]) for n in names])
        except KeyError:        # keyed by symbol, or a size missing: the general path says which
            v = None
        if type(v) is int:
            return v
        if isinstance(v, Fraction) and v.denominator == 1:
            return int(v)
    return _substitute(d, sizes)


def _substitute(d, sizes: Mapping):
    subs = {}
    for s in d.free_symbols:
        v = sizes.get(s.name, sizes.get(s))
        if v is None:
            raise GraphError(f"no size for the symbolic dimension '{s.name}' (in {d})")
        subs[s] = sympy.Integer(int(v))
    v = d.xreplace(subs)
    if not v.is_Integer:
        raise GraphError(f"dimension {d} is not an integer at {', '.join(f'{k}={v}' for k, v in subs.items())}")
    return int(v)


class _Unknown(Exception):
    pass


_PY_FUNCS = {sympy.floor: "floor", sympy.ceiling: "ceil", sympy.Max: "max", sympy.Min: "min"}


def _py(e, args) -> str:
    """Python source computing sympy expression `e` exactly (ints and Fractions), its
    size variables read from the arguments `args` names ({name: argument})."""
    if e.is_Symbol:
        return args[e.name]
    if e.is_Integer:
        return str(int(e))
    if e.is_Rational:
        return f"Fraction({e.p}, {e.q})"
    if e.is_Add:
        return "(" + " + ".join(_py(a, args) for a in e.args) + ")"
    if e.is_Mul:
        return "(" + " * ".join(_py(a, args) for a in e.args) + ")"
    if e.is_Pow and e.exp.is_Integer:
        base = _py(e.base, args)
        return f"({base} ** {int(e.exp)})" if e.exp >= 0 else f"(Fraction(1) / ({base} ** {-int(e.exp)}))"
    if isinstance(e, sympy.Mod):
        return f"({_py(e.args[0], args)} % {_py(e.args[1], args)})"
    if e.func in _PY_FUNCS:
        return f"{_PY_FUNCS[e.func]}({', '.join(_py(a, args) for a in e.args)})"
    raise _Unknown(e)


@lru_cache(maxsize=4096)
def _compiled(d):
    """(function, names): dimension `d` as a Python function of its size variables' values
    (in `names`' order), or None where `d` has a function it does not know. The memory
    plan and run state of a new size evaluate every buffer's size: substituting into the
    sympy expression costs some 100x more."""
    names = sorted(s.name for s in d.free_symbols)
    args = {n: f"_{i}" for i, n in enumerate(names)}     # a size may be named `max`
    try:
        src = _py(d, args)
    except _Unknown:
        return None
    env = {"Fraction": Fraction, "floor": math.floor, "ceil": math.ceil, "max": max, "min": min}
    return eval(f"lambda {', '.join(args.values())}: {src}", env), names


def prepare(shapes: Iterable):
    """Turns every symbolic dimension of `shapes` into its Python function now (an
    executor's build), so that evaluating them at a call's new sizes builds nothing in
    sympy: the first call at a new size stays integer arithmetic."""
    for shape in shapes:
        for d in shape:
            if isinstance(d, sympy.Expr) and not d.is_Integer:
                _compiled(d)


def evaluate_shape(shape, sizes: Mapping) -> tuple:
    return tuple(evaluate(d, sizes) for d in shape)


def product(shape):
    """The number of elements of `shape` (an int, or a sympy expression)."""
    return _product(tuple(shape))


@lru_cache(maxsize=4096)
def _product(shape):
    # sympy builds a product in some 100 us: a network's buffers have few distinct shapes
    p = 1
    for d in shape:
        p = p * d
    return as_dim(p) if not isinstance(p, int) else p


def equal(a, b) -> bool:
    """Whether two dimensions are the same for every size (`2*(n + 1)` and `2*n + 2`)."""
    if isinstance(a, int) and isinstance(b, int):
        return a == b
    return a == b or sympy.expand(sympy.sympify(a) - b) == 0


def parse_dim(text: str, symbols: Dict[str, sympy.Symbol] = None):
    """A dimension from its printed form ("batch", "2*sequence + 1", "64")."""
    text = text.strip()
    if re.fullmatch(r"\d+", text):
        return int(text)
    names = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", text)) - {"floor", "ceiling", "Max", "Min", "Mod"}
    local = {n: size_var(n) for n in names}
    local.update({"floor": sympy.floor, "ceiling": sympy.ceiling, "Max": sympy.Max, "Min": sympy.Min,
                  "Mod": sympy.Mod})
    try:
        return as_dim(sympy.sympify(text, locals=local))
    except (sympy.SympifyError, TypeError, GraphError) as e:
        raise GraphError(f"cannot read the dimension {text!r}: {e}") from None


def dim_str(d) -> str:
    """A dimension as the text form writes it: `64`, `batch`, `{batch*sequence}`."""
    if isinstance(d, (int, np.integer)) or isinstance(d, sympy.Symbol):
        return str(d)
    return "{" + str(d).replace(" ", "") + "}"
