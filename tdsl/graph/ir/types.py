"""Tensor types of graph values: a shape and a dtype (the operator registry infers them, the
IR's nodes carry them). A dimension is an int or a symbolic size (dims.py)."""
from __future__ import annotations

import numpy as np

from ...errors import GraphError
from .dims import as_dim, dim_str, is_static, product

DTYPES = ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
          "float16", "float32", "float64")


class TensorType:
    __slots__ = ("shape", "dtype")

    def __init__(self, shape, dtype):
        try:
            self.shape = tuple(as_dim(s) for s in shape)
        except (TypeError, ValueError):
            raise GraphError(f"a tensor shape must be a tuple of integers or symbolic sizes, "
                             f"got {shape!r}") from None
        if any(isinstance(s, int) and s < 0 for s in self.shape):
            raise GraphError(f"negative dimension in shape {self.shape}")
        dtype = str(np.dtype(dtype)) if not isinstance(dtype, str) else dtype
        if dtype not in DTYPES:
            raise GraphError(f"unsupported dtype {dtype!r}; supported: {', '.join(DTYPES)}")
        self.dtype = dtype

    @property
    def ndim(self):
        return len(self.shape)

    @property
    def static(self) -> bool:
        """Whether every dimension is a number."""
        return is_static(self.shape)

    @property
    def size(self):
        """The number of elements: an int, or a sympy expression of the size variables."""
        if is_static(self.shape):
            return int(np.prod(self.shape, dtype=np.int64))
        return product(self.shape)

    @property
    def nbytes(self):
        return self.size * np.dtype(self.dtype).itemsize

    def __eq__(self, other):
        return isinstance(other, TensorType) and self.shape == other.shape and self.dtype == other.dtype

    def __hash__(self):
        return hash((self.shape, self.dtype))

    def __str__(self):
        return f"Tensor[({', '.join(map(dim_str, self.shape))}), {self.dtype}]"

    __repr__ = __str__
