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
              "__ge__", "__truediv__", "__rtruediv__", "__and__", "__rand__", "__or__", "__ror__",
              "__xor__", "__rxor__", "__lshift__", "__rlshift__", "__rshift__", "__rrshift__",
              "__invert__", "equal", "astype"):
    setattr(IterVar, _name, _delegate(_name))
IterVar.dtype = property(lambda self: self.var.dtype)


class Operation:
    name: str
    outputs: List["Tensor"]

    def output(self, index: int = 0) -> "Tensor":
        """Output tensor `index` (a compute with a tuple-valued lambda has several)."""
        if not isinstance(index, int) or not 0 <= index < len(self.outputs):
            raise TdslError(f"operation '{self.name}' has {len(self.outputs)} output(s); "
                            f"output({index!r}) does not exist")
        return self.outputs[index]

    @property
    def num_outputs(self) -> int:
        return len(self.outputs)

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
    """A tensor (or several, one per element of `bodies`) defined over `axis`.

    `bodies` holds one expression per output; `body` is the first (the only one for a
    single-output compute). The outputs of one op share its loops: all reductions or none,
    and a reduction over a tuple gives one output per tuple element."""

    def __init__(self, name, tag, attrs, axis, body, shape=None):
        self.name = name
        self.tag = tag
        self.attrs = dict(attrs or {})
        self.axis: List[IterVar] = list(axis)
        self.bodies: Tuple[Expr, ...] = tuple(body) if isinstance(body, (tuple, list)) else (body,)
        self.body: Expr = self.bodies[0]
        first = self.body
        self.reduce_axis: List[IterVar] = list(first.axis) if isinstance(first, E.Reduce) else []
        self.dtype = first.dtype
        self.shape = tuple(shape) if shape is not None else tuple(iv.dom.extent for iv in self.axis)
        n = len(self.bodies)
        self.outputs = [Tensor(self, self.shape, b.dtype, name if n == 1 else f"{name}.v{k}", k)
                        for k, b in enumerate(self.bodies)]
        self._inputs = None

    def input_tensors(self):
        if self._inputs is None:
            self._inputs = tensors_read(self.bodies)
        return self._inputs

    def __repr__(self):
        return f"ComputeOp({self.name})"


class Tensor:
    """The output of an operation; `T[i, j]` (or `T(i, j)`, or `T[i][j]`) reads one element
    inside a compute lambda."""

    def __init__(self, op, shape, dtype, name, value_index=0):
        self.op = op
        self.shape = tuple(shape)
        self.dtype = dtype
        self.name = name
        self.value_index = value_index

    @property
    def ndim(self):
        return len(self.shape)

    def __call__(self, *indices):
        return self[indices]

    def __getitem__(self, indices):
        if not isinstance(indices, tuple):
            indices = (indices,)
        if 0 < len(indices) < len(self.shape):
            return TensorSlice(self, indices)   # A[i][k]: the rest comes next
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


class TensorSlice:
    """`A[i]` of a tensor with more dimensions: only useful indexed further (`A[i][k]`)."""

    def __init__(self, tensor, indices):
        self.tensor = tensor
        self.indices = tuple(indices)

    def __getitem__(self, more):
        more = more if isinstance(more, tuple) else (more,)
        return self.tensor[self.indices + more]

    def incomplete(self, *_):
        """Raises the error of a slice used as a value: the rest of its indices are
        missing (`tdsl.ir.expr.convert` asks too)."""
        t = self.tensor
        raise TdslError(f"tensor '{t.name}' has {len(t.shape)} dimensions but was indexed with "
                        f"{len(self.indices)}; index the rest too (e.g. {t.name}[i][k] or "
                        f"{t.name}[i, k])")

    # used as a value before it is complete: say so
    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = __truediv__ = incomplete
    __rtruediv__ = __floordiv__ = __mod__ = __neg__ = __lt__ = __le__ = __gt__ = incomplete
    __ge__ = __bool__ = astype = incomplete


def tensors_read(exprs, found=None) -> list:
    """The tensors that expressions `exprs` read, in first-read order (after `found`)."""
    from ..ir.visitor import walk
    found = list(found or [])

    def f(n):
        if isinstance(n, E.ProducerLoad) and n.tensor not in found:
            found.append(n.tensor)
    for e in exprs:
        walk(e, f)
    return found
