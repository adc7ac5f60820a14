"""Tensors, operations and iteration variables of the tensor-expression layer (L0)."""
from __future__ import annotations

from typing import List, Optional, Tuple

from ..errors import TdslError
from ..ir import expr as E
from ..ir.expr import Expr, Range, Var


class IterVar:
    """A loop variable with its domain. `kind` is "data_par", "reduce" or "thread"."""

    def __init__(self, dom: Optional[Range], var: Var, kind: str = "data_par", thread_tag: str = ""):
        self.dom = dom
        self.var = var
        self.kind = kind
        self.thread_tag = thread_tag

    @property
    def name(self):
        return self.var.name

    def __repr__(self):
        dom = f", {self.dom.min}..{self.dom.min + self.dom.extent}" if self.dom is not None else ""
        return f"IterVar({self.var.name}{dom}, {self.kind})"

    __str__ = __repr__
    __hash__ = object.__hash__

    def __eq__(self, other):
        return self is other


def _delegate(name):
    def op(self, *args):
        return getattr(self.var, name)(*args)
    op.__name__ = name
    return op


# An IterVar can be used in index arithmetic directly: k + 1, i * 2, ...
for _name in ("__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__", "__floordiv__",
              "__rfloordiv__", "__mod__", "__rmod__", "__neg__", "__lt__", "__le__", "__gt__",
              "__ge__", "__truediv__", "__rtruediv__", "astype"):
    setattr(IterVar, _name, _delegate(_name))
IterVar.dtype = property(lambda self: self.var.dtype)


class Operation:
    name: str
    outputs: List["Tensor"]

    @property
    def output(self):
        return self.outputs[0]

    def input_tensors(self) -> List["Tensor"]:
        return []

    __hash__ = object.__hash__

    def __eq__(self, other):
        return self is other


class PlaceholderOp(Operation):
    def __init__(self, name, shape, dtype):
        self.name = name
        self.shape = shape
        self.dtype = dtype
        self.axis: List[IterVar] = []
        self.reduce_axis: List[IterVar] = []
        self.outputs = [Tensor(self, shape, dtype, name)]

    def __repr__(self):
        return f"PlaceholderOp({self.name})"


class ComputeOp(Operation):
    def __init__(self, name, tag, attrs, axis, body, shape=None):
        self.name = name
        self.tag = tag
        self.attrs = dict(attrs or {})
        self.axis: List[IterVar] = list(axis)
        self.body: Expr = body
        self.reduce_axis: List[IterVar] = list(body.axis) if isinstance(body, E.Reduce) else []
        self.dtype = body.dtype
        self.shape = tuple(shape) if shape is not None else tuple(iv.dom.extent for iv in self.axis)
        self.outputs = [Tensor(self, self.shape, self.dtype, name)]
        self._inputs = None

    def input_tensors(self):
        if self._inputs is None:
            found = []
            from ..ir.visitor import walk

            def f(n):
                if isinstance(n, E.ProducerLoad) and n.tensor not in found:
                    found.append(n.tensor)
            walk(self.body, f)
            self._inputs = found
        return self._inputs

    def __repr__(self):
        return f"ComputeOp({self.name})"


class Tensor:
    """The output of an operation; `T[i, j]` reads one element inside a compute lambda."""

    def __init__(self, op, shape, dtype, name):
        self.op = op
        self.shape = tuple(shape)
        self.dtype = dtype
        self.name = name
        self.value_index = 0

    @property
    def ndim(self):
        return len(self.shape)

    def __getitem__(self, indices):
        if not isinstance(indices, tuple):
            indices = (indices,)
        if len(indices) != len(self.shape):
            raise TdslError(
                f"tensor '{self.name}' has {len(self.shape)} dimensions but was indexed with "
                f"{len(indices)} indices")
        idx = []
        for x in indices:
            if isinstance(x, slice):
                raise TdslError(f"tensor '{self.name}': slices are not supported in a compute body")
            x = E.convert(x)
            if x.dtype not in ("int32", "int64", "int16", "int8", "uint8", "uint16", "uint32", "uint64"):
                raise TdslError(f"tensor '{self.name}' indexed with {x} of type {x.dtype}; indices must be integers")
            idx.append(x)
        return E.ProducerLoad(self, tuple(idx))

    __hash__ = object.__hash__

    def __eq__(self, other):
        return self is other

    def __bool__(self):
        return True

    def __repr__(self):
        shape = ", ".join(str(s) for s in self.shape)
        return f"Tensor(name={self.name}, shape=({shape}), dtype={self.dtype})"
