"""Statements of the loop IR (L2), a Buffer and the PrimFunc that holds them."""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Dict, List, Optional, Tuple

from .expr import Expr, Var, ir_node


class ForKind(Enum):
    SERIAL = "serial"
    PARALLEL = "parallel"
    VECTORIZED = "vectorized"
    UNROLLED = "unrolled"
    THREAD_BINDING = "thread_binding"


@ir_node
class Buffer:
    """A named, typed n-d array. `scope` is global, local or shared; identity is the name
    object, so two buffers with the same name stay distinct."""
    name: str
    shape: Tuple[Expr, ...]
    dtype: str
    scope: str = "global"
    align: Tuple[Tuple[int, int, int], ...] = ()  # storage_align: (axis, factor, offset)
    swizzle: int = 0    # storage_swizzle: the width in bytes (32, 64, 128) of its XOR pattern

    __hash__ = object.__hash__

    def __eq__(self, other):
        return self is other

    def __str__(self):
        return self.name

    __repr__ = __str__


class Stmt:
    __hash__ = object.__hash__

    # __str__ and __repr__ (the text of `tdsl.ir.printer`) are attached by the package
    # tdsl.ir: the printer imports this module, so this module cannot import it


@ir_node
class For(Stmt):
    var: Var
    min: Expr
    extent: Expr
    kind: ForKind
    body: Stmt
    thread_tag: str = ""
    pragmas: Tuple[Tuple[str, Any], ...] = ()


@ir_node
class LetStmt(Stmt):
    var: Var
    value: Expr
    body: Stmt


@ir_node
class IfThenElse(Stmt):
    cond: Expr
    then_case: Stmt
    else_case: Optional[Stmt] = None


@ir_node
class BufferStore(Stmt):
    """`buffer[indices] = value`. With `atomic` ("add", "mul", "min" or "max": an update's
    `atomic()`) the value is `buffer[indices] <op> e` and the read-modify-write is one
    indivisible operation, so that threads or lanes may update one element at once; code
    generators find `e` in the value (`atomic_operand`)."""
    buffer: Buffer
    value: Expr
    indices: Tuple[Expr, ...]
    atomic: str = ""


@ir_node
class Allocate(Stmt):
    """Storage for `buffer` over `body`; freed when the body ends."""
    buffer: Buffer
    body: Stmt


@ir_node
class SeqStmt(Stmt):
    stmts: Tuple[Stmt, ...]


@ir_node
class Evaluate(Stmt):
    value: Expr


@ir_node
class Barrier(Stmt):
    """Synchronise the threads of a GPU block over `scope` memory. Asynchronous copies
    into shared memory (cp.async) complete before it: all of them when `async_wait` is
    None, else all but the `async_wait` groups (`AsyncCommit`) committed last, which stay
    in flight across it (a pipeline of `multi_buffer` stages)."""
    scope: str = "shared"
    async_wait: Optional[int] = None


@ir_node
class AsyncCommit(Stmt):
    """Closes the group of asynchronous copies this thread issued since the last one, the
    unit a `Barrier`'s `async_wait` counts. Nothing where copies are synchronous."""


@ir_node
class Prefetch(Stmt):
    """A hint: the `extent` consecutive elements of `buffer` from `indices` on will be read
    soon, so their cache lines are fetched now (`Stage.prefetch`). It changes no value;
    the elements are inside the buffer (lowering clips the region to it)."""
    buffer: Buffer
    indices: Tuple[Expr, ...]
    extent: Expr


@ir_node
class ExternCall(Stmt):
    """A call of the function registered as `name` (`tdsl.register_func`) on whole buffers
    and scalars: the body of a `tdsl.extern` stage. `shapes` holds each buffer argument's
    shape as the stage saw it (None for scalars): storage_flatten makes the buffers flat,
    but the callee is handed n-d arrays. `writes` holds the indices of the arguments the
    call writes (the stage's outputs); the others are only read."""
    name: str
    args: Tuple[Any, ...]       # Buffer | Expr
    shapes: Tuple[Any, ...]     # Tuple[Expr, ...] per Buffer argument, None per scalar
    writes: Tuple[int, ...] = ()


def seq(*stmts) -> Stmt:
    """A sequence without nesting or empty parts."""
    flat: List[Stmt] = []
    for s in stmts:
        if s is None:
            continue
        if isinstance(s, SeqStmt):
            flat.extend(s.stmts)
        else:
            flat.append(s)
    if len(flat) == 1:
        return flat[0]
    return SeqStmt(tuple(flat))


@dataclass(eq=False)
class PrimFunc:
    """A lowered kernel: parameters (buffers and scalar vars) and a body."""
    name: str
    params: List[Any]  # Buffer | Var
    body: Stmt
    attrs: Dict[str, Any] = field(default_factory=dict)

    @property
    def buffers(self):
        return [p for p in self.params if isinstance(p, Buffer)]

    def with_body(self, body):
        return PrimFunc(self.name, self.params, body, dict(self.attrs))

    # script(), the function as text (`tdsl.ir.printer.func_str`), is attached by tdsl.ir

    def __str__(self):
        return self.script()

    __repr__ = __str__

    def _repr_markdown_(self):
        return "```python\n" + self.script() + "\n```"

    def _repr_html_(self):
        from .html import func_html
        return func_html(self)
