"""Tensor types of graph values: a static shape and a dtype (the operator registry infers them,
the IR's nodes carry them)."""
from __future__ import annotations

import numpy as np

from ...errors import GraphError

DTYPES = ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
          "float16", "float32", "float64")


class TensorType:
    __slots__ = ("shape", "dtype")

    def __init__(self, shape, dtype):
        try:
            self.shape = tuple(int(s) for s in shape)
        except (TypeError, ValueError):
            raise GraphError(f"a tensor shape must be a tuple of integers, got {shape!r}") from None
        if any(s < 0 for s in self.shape):
            raise GraphError(f"negative dimension in shape {self.shape}")
        dtype = str(np.dtype(dtype)) if not isinstance(dtype, str) else dtype
        if dtype not in DTYPES:
            raise GraphError(f"unsupported dtype {dtype!r}; supported: {', '.join(DTYPES)}")
        self.dtype = dtype

    @property
    def ndim(self):
        return len(self.shape)

    @property
    def size(self):
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def nbytes(self):
        return self.size * np.dtype(self.dtype).itemsize

    def __eq__(self, other):
        return isinstance(other, TensorType) and self.shape == other.shape and self.dtype == other.dtype

    def __hash__(self):
        return hash((self.shape, self.dtype))

    def __str__(self):
        return f"Tensor[({', '.join(map(str, self.shape))}), {self.dtype}]"

    __repr__ = __str__
