"""Dtype names, their properties and the promotion rule for mixed operands."""
from __future__ import annotations

import numpy as np

from .errors import TdslError

DTYPES = ("float16", "float32", "float64", "int8", "int16", "int32", "int64",
          "uint8", "uint16", "uint32", "uint64", "bool")


def check(dtype) -> str:
    """Normalise a dtype given as a string or numpy dtype; raise on unknown names."""
    if not isinstance(dtype, str):
        try:
            dtype = np.dtype(dtype).name
        except TypeError:
            raise TdslError(f"unknown dtype {dtype!r}; use one of {', '.join(DTYPES)}") from None
    if dtype not in DTYPES:
        raise TdslError(f"unknown dtype {dtype!r}; use one of {', '.join(DTYPES)}")
    return dtype


def is_float(dtype: str) -> bool:
    return dtype.startswith("float")


def is_int(dtype: str) -> bool:
    return dtype.startswith("int") or dtype.startswith("uint")


def is_signed(dtype: str) -> bool:
    return dtype.startswith("int") or is_float(dtype)


def is_bool(dtype: str) -> bool:
    return dtype == "bool"


def bits(dtype: str) -> int:
    if dtype == "bool":
        return 1
    return int(dtype.lstrip("uintfloat"))


def itemsize(dtype: str) -> int:
    return 1 if dtype == "bool" else bits(dtype) // 8


def to_numpy(dtype: str) -> np.dtype:
    return np.dtype(dtype)


def promote(a: str, b: str) -> str:
    """The dtype of a binary operation on operands of dtypes a and b."""
    if a == b:
        return a
    if is_float(a) or is_float(b):
        fa = bits(a) if is_float(a) else 0
        fb = bits(b) if is_float(b) else 0
        return f"float{max(fa, fb)}"
    if a == "bool":
        return b
    if b == "bool":
        return a
    return np.promote_types(a, b).name
