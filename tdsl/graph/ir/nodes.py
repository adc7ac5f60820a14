"""Graph IR: a module of functions over typed tensor values.

* `TensorType(shape, dtype)`: static shapes only (ONNX symbolic dims are bound at import).
* `Var`: a function parameter. `Const`: a numpy array. `Call`: an operator (`op` is a
  registered name such as ``"nn.conv2d"``) or a call of a fused group (`op` is a `Function`).
* `Function`: parameters, one or more outputs. A `Module` holds ``@main`` and the fused
  group functions (``primitive=True``) that ``@main`` calls.

Expressions are immutable and shared (a DAG); passes build new ones. A `Call` infers its
type when it is made, so a shape or dtype mismatch raises `GraphError` at the node that
causes it, naming the operator and the ONNX node it came from.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence

import numpy as np

from ...errors import GraphError
from .registry import get_op
from .types import TensorType


class Expr:
    """Base of graph values."""
    __slots__ = ("type", "__weakref__")

    @property
    def checked_type(self) -> TensorType:
        return self.type


class Var(Expr):
    __slots__ = ("name",)

    def __init__(self, name: str, type_: TensorType):
        self.name = name
        self.type = type_

    def __repr__(self):
        return f"Var(%{self.name}: {self.type})"


class Const(Expr):
    __slots__ = ("data",)

    def __init__(self, data):
        # any strides (a folded weight transpose stays a view: copying ViT's weights twice
        # cost a third of its build); kernels get contiguous copies or packed layouts
        arr = np.asarray(data)
        if arr.flags.writeable and arr.flags.owndata:
            arr.setflags(write=False)
        elif arr.flags.writeable:
            arr = arr.view()
            arr.setflags(write=False)
        self.data = arr
        self.type = TensorType(self.data.shape, str(self.data.dtype))

    def __repr__(self):
        return f"Const({self.type})"


class DimValues(Expr):
    """An integer tensor whose values are symbolic sizes: what ONNX's Shape returns for a
    tensor with symbolic dimensions, while the importer folds the shape arithmetic that
    exporters write (Shape -> Gather -> Concat -> Reshape). `data` is a numpy object array
    of ints and sympy expressions. It exists only during import: a value that a kernel
    reads is then computed from the sizes of the call (the `size_values` operator)."""
    __slots__ = ("data",)

    def __init__(self, data, dtype="int64"):
        self.data = np.asarray(data, dtype=object)
        self.type = TensorType(self.data.shape, dtype)

    def __repr__(self):
        return f"DimValues({self.data.tolist()})"


class Call(Expr):
    __slots__ = ("op", "args", "attrs", "span")

    def __init__(self, op, args: Sequence[Expr], attrs: Optional[dict] = None, span: str = ""):
        self.op = op
        self.args = tuple(args)
        self.attrs = dict(attrs or {})
        self.span = span
        for a in self.args:
            if not isinstance(a, Expr):
                raise GraphError(f"{self.op_name}: argument {a!r} is not a graph value")
        if isinstance(op, Function):
            if len(self.args) != len(op.params):
                raise GraphError(f"call of @{op.name}: {len(op.params)} arguments expected, got {len(self.args)}")
            for i, (a, p) in enumerate(zip(self.args, op.params)):
                if a.type != p.type:
                    raise GraphError(f"call of @{op.name}: argument {i} has type {a.type}, "
                                     f"parameter %{p.name} is {p.type}")
            if len(op.outputs) != 1:
                raise GraphError(f"call of @{op.name}: a fused group has exactly one output")
            self.type = op.outputs[0].type
        else:
            opdef = get_op(op, span)
            self.attrs = opdef.normalize_attrs(self.attrs, self)
            try:
                self.type = opdef.infer([a.type for a in self.args], self.attrs)
            except GraphError as e:
                raise GraphError(f"{op}{self._where()}: {e}") from None

    @property
    def op_name(self):
        return "@" + self.op.name if isinstance(self.op, Function) else str(self.op)

    def _where(self):
        return f" (node '{self.span}')" if self.span else ""

    def __repr__(self):
        return f"Call({self.op_name}, {len(self.args)} args) -> {self.type}"


class Function:
    def __init__(self, name: str, params: List[Var], outputs: List[Expr], attrs: Optional[dict] = None):
        self.name = name
        self.params = list(params)
        self.outputs = list(outputs)
        self.attrs = dict(attrs or {})
        names = [p.name for p in self.params]
        if len(set(names)) != len(names):
            raise GraphError(f"@{name}: duplicate parameter names in {names}")

    @property
    def ret_types(self):
        return [o.type for o in self.outputs]

    @property
    def primitive(self):
        return bool(self.attrs.get("primitive"))

    def nodes(self) -> List[Call]:
        """Calls in topological order (arguments before users, first use first)."""
        return topo_order(self.outputs)

    def __repr__(self):
        return f"<Function @{self.name}({len(self.params)} params)>"


def topo_order(outputs: Sequence[Expr]) -> List[Call]:
    order: List[Call] = []
    seen = set()
    for out in outputs:
        stack = [(out, False)]
        while stack:
            e, done = stack.pop()
            if not isinstance(e, Call):
                continue
            if done:
                if e not in seen:
                    seen.add(e)
                    order.append(e)
                continue
            if e in seen:
                continue
            stack.append((e, True))
            for a in reversed(e.args):
                if isinstance(a, Call) and a not in seen:
                    stack.append((a, False))
    return order


class Module:
    """A graph module: ``@main`` plus fused group functions. `str(mod)` prints the text
    form; `tdsl.graph.parse(str(mod), meta=mod.meta)` reads it back.

    `astext`, `__str__` and `meta` come from text.py, `visualize` and `_repr_html_` from
    visualize.py: the printers import the nodes, so they attach themselves on import."""

    def __init__(self, main: Function, meta_info: Optional[dict] = None):
        self.main = main
        self.info = dict(meta_info or {})

    @property
    def functions(self) -> Dict[str, Function]:
        fns = {}
        for n in self.main.nodes():
            if isinstance(n.op, Function):
                fns.setdefault(n.op.name, n.op)
        fns["main"] = self.main
        return fns

    def __repr__(self):
        return f"<tdsl.graph.Module: {len(self.main.nodes())} nodes>"

    @property
    def input_types(self):
        return {p.name: p.type for p in self.main.params}
