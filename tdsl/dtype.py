"""Dtype names, their properties and the promotion rule for mixed operands.

`bfloat16` (the upper half of a float32) is a storage type: arithmetic on it is done in
float32 (`tdsl.passes.legalize_bf16`). On the numpy side it is `ml_dtypes.bfloat16` where
that package is installed; without it a bfloat16 array is a `uint16` array of the same bits,
made and read with `float32_to_bfloat16` / `bfloat16_to_float32` (modules accept both).
"""
from __future__ import annotations

import numpy as np

from .errors import TdslError

try:
    import ml_dtypes as _ml_dtypes
    BFLOAT16_NUMPY = np.dtype(_ml_dtypes.bfloat16)
except ImportError:     # pragma: no cover - ml_dtypes is in the test extra
    BFLOAT16_NUMPY = None

DTYPES = ("bfloat16", "float16", "float32", "float64", "int8", "int16", "int32", "int64",
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
    return dtype.startswith("float") or dtype == "bfloat16"


def is_int(dtype: str) -> bool:
    return dtype.startswith("int") or dtype.startswith("uint")


def is_signed(dtype: str) -> bool:
    return dtype.startswith("int") or is_float(dtype)


def bits(dtype: str) -> int:
    if dtype == "bool":
        return 1
    return int(dtype.lstrip("uintbfloat"))


def itemsize(dtype: str) -> int:
    return 1 if dtype == "bool" else bits(dtype) // 8


def to_numpy(dtype) -> np.dtype:
    """The numpy dtype of a tdsl dtype; bfloat16 is uint16 without ml_dtypes."""
    if isinstance(dtype, str) and dtype == "bfloat16":
        return BFLOAT16_NUMPY if BFLOAT16_NUMPY is not None else np.dtype("uint16")
    return np.dtype(dtype)


def accepts(dtype: str, np_dtype) -> bool:
    """Whether an array of `np_dtype` may be passed for a buffer of `dtype`: a bfloat16
    buffer also takes the uint16 view of its bits."""
    return np_dtype == to_numpy(dtype) or (dtype == "bfloat16" and np_dtype == np.uint16)


def float32_to_bfloat16(x) -> np.ndarray:
    """float32 values -> their bfloat16 bits as uint16, rounded to nearest even (NaN stays
    a quiet NaN): the rounding every backend uses."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    return np.where(np.isnan(u.view(np.float32)), ((u >> 16) | 0x40).astype(np.uint16), r)


def bfloat16_to_float32(x) -> np.ndarray:
    """bfloat16 values (ml_dtypes.bfloat16 or their uint16 bits) -> float32, exactly."""
    x = np.ascontiguousarray(x)
    return (x.view(np.uint16).astype(np.uint32) << 16).view(np.float32)


def promote(a: str, b: str) -> str:
    """The dtype of a binary operation on operands of dtypes a and b."""
    if a == b:
        return a
    if is_float(a) and is_float(b) and bits(a) == bits(b) == 16:
        return "float32"        # float16 with bfloat16: neither holds the other
    if is_float(a) or is_float(b):
        if "bfloat16" in (a, b) and not (is_float(a) and is_float(b)):
            return "bfloat16"
        fa = bits(a) if is_float(a) else 0
        fb = bits(b) if is_float(b) else 0
        return f"float{max(fa, fb)}"
    if a == "bool":
        return b
    if b == "bool":
        return a
    return np.promote_types(a, b).name
