"""`extern(shape, inputs, fcompute)`: TVM's `te.extern`, a stage computed by a call or
by loop IR of the user's.

`fcompute(ins, outs)` gets the input tensors and the stage's output tensors and returns
either

- `call_packed("name", *args)`: the function registered under that name
  (`tdsl.register_func`) is called once with whole arrays (the tensors among `args`) and
  scalars (numbers and scalar expressions). Lowering makes it one `ExternCall` statement;
- a loop-IR statement, the `get()` of a `tdsl.tir.ir_builder` (TVM's imperative path):
  it is the stage's body, compiled like any other loop nest on every target. While
  `fcompute` runs, `buffer_ptr(t)` of an input or output `t` addresses the buffer the
  stage holds for it (`stage_buffer`); lowering puts the real buffers in their place.

Either way tdsl does not schedule inside the stage: it runs at root, after its inputs
are complete, and its outputs are ordinary tensors for the stages that read them.
"""
from __future__ import annotations

from typing import List

from ..errors import TdslError
from ..ir import expr as E
from ..ir import stmt as S
from ..ir.visitor import free_vars, walk
from .tensor import Operation, Tensor

# {tensor: Buffer} of the extern stages whose fcompute is running, innermost last
_ACTIVE: List[dict] = []


def stage_buffer(tensor):
    """The buffer through which the body of the extern stage being defined addresses
    `tensor` (an input or output of it); None outside an extern's fcompute. Raises for a
    tensor the stage does not list."""
    if not _ACTIVE:
        return None
    buf = _ACTIVE[-1].get(tensor)
    if buf is None:
        raise TdslError(f"ir_builder: tensor '{tensor.name}' is neither an input nor an output "
                        "of the extern stage being defined; list it in its inputs")
    return buf


class PackedCall:
    """What `call_packed` returns: the registered name and its arguments, as given."""

    def __init__(self, name, args):
        self.name = name
        self.args = args

    def __repr__(self):
        return f"call_packed({self.name!r}, {', '.join(map(repr, self.args))})"


def call_packed(name, *args) -> PackedCall:
    """A call of the function registered as `name` (TVM's `tir.call_packed`): tensors are
    passed as arrays, numbers, bools and scalar expressions as scalars."""
    if not isinstance(name, str) or not name:
        raise TdslError(f"call_packed: the first argument must be the registered function's "
                        f"name, got {name!r}")
    out = []
    for k, a in enumerate(args):
        if isinstance(a, Tensor):
            out.append(a)
            continue
        try:
            e = E.convert(a)
        except TdslError:
            e = None
        if not isinstance(e, E.Expr):
            raise TdslError(f"call_packed('{name}'): argument {k} is {a!r}; pass tensors, "
                            "numbers, bools or scalar expressions")
        out.append(e)
    return PackedCall(name, tuple(out))


class ExternOp(Operation):
    """The outputs of one `call_packed` (`call`) or of a loop-IR `body` (the other is
    None). `stage_buffers` holds the buffers the body addresses the inputs, then the
    outputs, through."""

    def __init__(self, name, tag, attrs, inputs, shapes, dtypes, fcompute):
        self.name = name
        self.tag = tag
        self.attrs = dict(attrs or {})
        self.inputs: List[Tensor] = list(inputs)
        self.axis = []
        self.reduce_axis = []
        self.bodies = ()
        n = len(shapes)
        self.outputs = [Tensor(self, s, d, name if n == 1 else f"{name}.v{k}", k)
                        for k, (s, d) in enumerate(zip(shapes, dtypes))]
        self.shape = self.outputs[0].shape
        self.dtype = self.outputs[0].dtype
        self.call = None
        self.body = None
        tensors = self.inputs + self.outputs
        self.stage_buffers = [S.Buffer(t.name, tuple(t.shape), t.dtype) for t in tensors]
        _ACTIVE.append(dict(zip(tensors, self.stage_buffers)))
        try:
            call = fcompute(list(self.inputs), list(self.outputs))
        finally:
            _ACTIVE.pop()
        if isinstance(call, S.Stmt):
            self.body = call
            self._check_body()
            return
        if not isinstance(call, PackedCall):
            raise TdslError(f"extern '{name}': fcompute(ins, outs) must return "
                            f"tdsl.call_packed(name, ...) or an ir_builder's get(), got {call!r}")
        for a in call.args:
            if isinstance(a, Tensor) and a not in self.inputs and a not in self.outputs:
                raise TdslError(f"extern '{name}': the call passes tensor '{a.name}', which is "
                                "neither an input nor an output of the stage; list it in inputs")
        if not any(a in self.outputs for a in call.args if isinstance(a, Tensor)):
            raise TdslError(f"extern '{name}': the call never receives an output (outs[0]), so "
                            "nothing would write the stage's result")
        self.call = call

    def _check_body(self):
        """Every buffer the body accesses is the stage's or allocated in it; it writes each
        output and no input (another stage may read the input after it)."""
        ins = dict(zip(self.stage_buffers, self.inputs))
        outs = set(self.stage_buffers[len(self.inputs):])
        allocated, stored, bad = set(), set(), []

        def f(n):
            if isinstance(n, S.Allocate):
                allocated.add(n.buffer)
            elif isinstance(n, (E.BufferLoad, S.BufferStore, S.Prefetch)):
                if n.buffer not in ins and n.buffer not in outs:
                    bad.append(n.buffer)
                if isinstance(n, S.BufferStore):
                    stored.add(n.buffer)
        walk(self.body, f)
        foreign = [b for b in bad if b not in allocated]
        if foreign:
            raise TdslError(f"extern '{self.name}': the body accesses buffer '{foreign[0].name}', "
                            "which is neither an input, an output nor allocated by the body")
        written = [ins[b].name for b in stored if b in ins]
        if written:
            raise TdslError(f"extern '{self.name}': the body stores into its input "
                            f"'{written[0]}'; inputs are read-only (other stages read them "
                            "too): copy it into an output and update that")
        unwritten = [b.name for b in self.stage_buffers[len(self.inputs):] if b not in stored]
        if unwritten:
            raise TdslError(f"extern '{self.name}': the body never stores into output "
                            f"'{unwritten[0]}'")
        stray = _out_of_scope(self.body)
        if stray is not None:
            raise TdslError(f"extern '{self.name}': the body uses the variable '{stray.name}' "
                            "outside the loop (for_range, scope_attr) or let that defines it")

    @property
    def binds_threads(self) -> bool:
        """Whether its body binds loops to GPU blocks or threads."""
        found = []
        if self.body is not None:
            walk(self.body, lambda n: found.append(n) if isinstance(n, S.For) and
                 n.kind is S.ForKind.THREAD_BINDING and n.thread_tag != "vthread" else None)
        return bool(found)

    def input_tensors(self):
        return list(self.inputs)

    def __repr__(self):
        return f"ExternOp({self.name})"


def _out_of_scope(body):
    """A variable that a loop or let of `body` defines, read outside that scope, or None."""
    defined = set()
    walk(body, lambda n: defined.add(n.var) if isinstance(n, (S.For, S.LetStmt)) else None)
    if not defined:
        return None
    found = []

    def check(node, scope):
        found.extend((free_vars(node) & defined) - scope)

    def visit(s, scope):
        if isinstance(s, (S.For, S.LetStmt)):
            for e in ((s.min, s.extent) if isinstance(s, S.For) else (s.value,)):
                check(e, scope)
            visit(s.body, scope | {s.var})
        elif isinstance(s, S.SeqStmt):
            for x in s.stmts:
                visit(x, scope)
        elif isinstance(s, S.IfThenElse):
            check(s.cond, scope)
            visit(s.then_case, scope)
            if s.else_case is not None:
                visit(s.else_case, scope)
        elif isinstance(s, S.Allocate):
            for d in s.buffer.shape:
                check(d, scope)
            visit(s.body, scope)
        else:
            check(s, scope)
    visit(body, frozenset())
    return found[0] if found else None


def _shape(s, name):
    if not isinstance(s, (list, tuple)) or not s:
        raise TdslError(f"extern '{name}': a shape must be a non-empty tuple of sizes, got {s!r}")
    out = []
    for x in s:
        e = E.convert(x) if not isinstance(x, E.Expr) else x
        if not isinstance(e, E.Expr) or not e.dtype.startswith(("int", "uint")):
            raise TdslError(f"extern '{name}': shape {s!r} has the size {x!r}; sizes are integers "
                            "or integer variables")
        out.append(e)
    return tuple(out)


def extern(shape, inputs, fcompute, name="extern", dtype=None, tag="", attrs=None):
    """A stage whose outputs are written by `fcompute(ins, outs)`, which returns
    `call_packed(...)` or a loop-IR statement (`tdsl.tir.ir_builder`). `shape` is one shape or a list of shapes (one output each); `dtype`
    one dtype or a list (default: the first input's, else float32). Returns a tensor, or
    a list for several shapes."""
    from .. import dtype as dt
    if not isinstance(name, str) or not name.isidentifier():
        raise TdslError(f"extern: the name must be an identifier, got {name!r}")
    if not callable(fcompute):
        raise TdslError(f"extern '{name}': fcompute must be a function (ins, outs) -> "
                        f"call_packed(...) or loop IR, got {fcompute!r}")
    if not isinstance(inputs, (list, tuple)) or not all(isinstance(t, Tensor) for t in inputs):
        raise TdslError(f"extern '{name}': inputs must be a list of tensors, got {inputs!r}")
    single = isinstance(shape, (list, tuple)) and not any(isinstance(s, (list, tuple)) for s in shape)
    shapes = [_shape(shape, name)] if single else [_shape(s, name) for s in (shape or [None])]
    if dtype is None:
        dtype = inputs[0].dtype if inputs else "float32"
    dtypes = list(dtype) if isinstance(dtype, (list, tuple)) else [dtype] * len(shapes)
    if len(dtypes) != len(shapes):
        raise TdslError(f"extern '{name}': {len(shapes)} shapes but {len(dtypes)} dtypes")
    dtypes = [dt.check(d) for d in dtypes]
    op = ExternOp(name, tag, attrs, inputs, shapes, dtypes, fcompute)
    return op.outputs[0] if single else op.outputs
