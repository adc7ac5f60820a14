"""Helpers TVM users reach for: `get_const_tuple(shape)`."""
from __future__ import annotations

import numbers

from .errors import TdslError


def get_const_tuple(shape) -> tuple:
    """The static `shape` (a tensor's `.shape`, or any sequence of constants and Python or
    numpy integers) as a tuple of Python ints.

    Raises `TdslError` naming the dimension when one is symbolic (a `tdsl.var` size or an
    expression of one): such a shape has no value before the module is called."""
    from .ir.expr import IntImm
    out = []
    for i, d in enumerate(shape):
        if isinstance(d, IntImm):
            out.append(int(d.value))
        elif isinstance(d, numbers.Integral):
            out.append(int(d))
        else:
            raise TdslError(f"get_const_tuple: dimension {i} of {_show(shape)} is {d}, not a "
                            "constant: a symbolic size has a value only when the module is called")
    return tuple(out)


def _show(shape):
    return "(" + ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"
