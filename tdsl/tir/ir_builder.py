"""TVM's `tir.ir_builder`: loop IR written imperatively, the body of an extern stage.

    ib = tdsl.tir.ir_builder.create()
    x, y = ib.buffer_ptr(ins[0]), ib.buffer_ptr(outs[0])
    acc = ib.allocate("float32", (1,), name="acc", scope="local")
    acc[0] = 0.0
    with ib.for_range(0, n, name="i") as i:
        acc[0] = acc[0] + x[i]
        y[i] = acc[0]
    return ib.get()

Statements are collected scope by scope; `with` blocks (`for_range`, `if_scope`,
`else_scope`, `new_scope`) close theirs, and `allocate`, `let` and `scope_attr` wrap
what follows them in the current scope (TVM's `emit(lambda body: ...)`). The result is
tdsl's loop IR (`tdsl.ir.stmt`), which `tdsl.extern` makes a stage's body.
"""
from __future__ import annotations

from contextlib import contextmanager

from .. import arith
from .. import dtype as dt
from ..errors import TdslError
from ..ir import expr as E
from ..ir import stmt as S
from ..te.compute import THREAD_TAGS
from ..te.extern import stage_buffer
from ..te.tensor import IterVar, Tensor

KINDS = {"serial": S.ForKind.SERIAL, "parallel": S.ForKind.PARALLEL,
         "vectorize": S.ForKind.VECTORIZED, "vectorized": S.ForKind.VECTORIZED,
         "unroll": S.ForKind.UNROLLED, "unrolled": S.ForKind.UNROLLED}
SCOPES = ("global", "local", "shared")
THREAD_ATTRS = ("thread_extent", "virtual_thread")


def _expr(x, what):
    if isinstance(x, IterVar):
        return x.var
    if isinstance(x, BufferVar):
        raise TdslError(f"ir_builder: {what} is the buffer '{x.name}'; index it (ptr[i]) "
                        "to read an element")
    try:
        return E.convert(x)
    except TdslError:
        raise
    except Exception:
        raise TdslError(f"ir_builder: {what} is {x!r}, not an expression") from None


def _int_expr(x, what):
    e = _expr(x, what)
    if not dt.is_int(e.dtype):
        raise TdslError(f"ir_builder: {what} is {x!r} of type {e.dtype}; it must be an integer")
    return e


class BufferVar:
    """A buffer seen through the builder (TVM's `BufferVar`): `ptr[i, j]` reads an
    element, `ptr[i, j] = v` stores one. A single index into a buffer of several
    dimensions is a flat (row-major) index, as TVM's builder allows."""

    def __init__(self, builder, buffer, shape=None):
        self._builder = builder
        self.buffer = buffer
        self.shape = tuple(buffer.shape) if shape is None else shape

    @property
    def dtype(self):
        return self.buffer.dtype

    @property
    def name(self):
        return self.buffer.name

    def asobject(self):
        return self.buffer

    def __repr__(self):
        return f"BufferVar({self.buffer.name}, {self.dtype}, {list(self.shape)})"

    def _indices(self, index):
        idx = list(index) if isinstance(index, (tuple, list)) else [index]
        idx = [_int_expr(i, f"an index of '{self.name}'") for i in idx]
        view, real = self.shape, tuple(self.buffer.shape)
        if len(idx) == len(view) and view == real:
            return tuple(idx)
        if len(idx) == len(view):
            flat = _ravel(idx, view)
        elif len(idx) == 1:
            flat = idx[0]
        else:
            raise TdslError(f"ir_builder: '{self.name}' has {len(view)} dimension(s) "
                            f"{list(view)}; it is indexed with {len(idx)} indices")
        return _unravel(flat, real)

    def __getitem__(self, index):
        return E.BufferLoad(self.buffer, self._indices(index))

    def __setitem__(self, index, value):
        value = _expr(value, f"the value stored into '{self.name}'")
        if isinstance(value, (E.IntImm, E.FloatImm)) and value.dtype != self.dtype:
            value = E.const(value.value, self.dtype)
        if value.dtype != self.dtype:
            raise TdslError(f"ir_builder: a value of type {value.dtype} is stored into "
                            f"'{self.name}' of type {self.dtype}; cast it (.astype(...))")
        self._builder.emit(S.BufferStore(self.buffer, value, self._indices(index)))


def _ravel(idx, shape):
    flat = idx[0]
    for i, d in zip(idx[1:], shape[1:]):
        flat = flat * d + i
    return flat


def _unravel(flat, shape):
    if len(shape) == 1:
        return (flat,)
    out = []
    for d in reversed(shape[1:]):
        out.append(arith.simplify(flat % d))
        flat = flat // d
    out.append(arith.simplify(flat))
    return tuple(reversed(out))


class IRBuilder:
    """TVM's `tir.ir_builder.IRBuilder`; `create()` makes one."""

    def __init__(self):
        self._seq_stack = [[]]
        self._loops = 0

    # ------------------------------------------------------------------ statements
    def emit(self, stmt):
        """Appends a statement (an expression is evaluated for its effect); a function
        `body -> Stmt` wraps everything emitted after it in the current scope."""
        if isinstance(stmt, E.Expr):
            stmt = S.Evaluate(stmt)
        if not (isinstance(stmt, S.Stmt) or callable(stmt)):
            raise TdslError(f"ir_builder.emit: expected a statement, an expression or a "
                            f"function body -> statement, got {stmt!r}")
        self._seq_stack[-1].append(stmt)

    def _pop_seq(self):
        items = self._seq_stack.pop()
        body = None
        for item in reversed(items):
            if isinstance(item, S.Stmt):
                body = item if body is None else S.seq(item, body)
            else:
                body = item(body if body is not None else S.seq())
        return body if body is not None else S.seq()

    @contextmanager
    def _scope(self, close):
        self._seq_stack.append([])
        try:
            yield
        except BaseException:
            self._seq_stack.pop()
            raise
        self.emit(close(self._pop_seq()))

    def new_scope(self):
        """A `with` block whose statements form one statement (what `allocate` or
        `scope_attr` inside it wrap ends with the block)."""
        return self._scope(lambda body: body)

    def for_range(self, begin, end, name="i", dtype=None, kind="serial"):
        """A `with` block over `begin <= var < end`; yields the loop variable. `kind`:
        "serial", "parallel", "vectorize" or "unroll" (the last two need a constant
        number of iterations)."""
        lo = _int_expr(begin, "for_range's begin")
        hi = _int_expr(end, "for_range's end")
        if kind not in KINDS:
            raise TdslError(f"ir_builder.for_range: kind {kind!r} is not one of "
                            f"{', '.join(repr(k) for k in ('serial', 'parallel', 'vectorize', 'unroll'))}")
        fk = KINDS[kind]
        if dtype is None:
            dtype = "int64" if "int64" in (lo.dtype, hi.dtype) else "int32"
        dtype = dt.check(dtype)
        if not dt.is_int(dtype):
            raise TdslError(f"ir_builder.for_range: the loop variable's dtype must be an "
                            f"integer type, got {dtype}")
        extent = arith.simplify(E.cast(hi, dtype) - E.cast(lo, dtype))
        if fk in (S.ForKind.VECTORIZED, S.ForKind.UNROLLED) and not isinstance(extent, E.IntImm):
            raise TdslError(f"ir_builder.for_range: a loop of kind {kind!r} needs a constant "
                            f"number of iterations, got {extent}")
        if name == "i":     # TVM's naming of nested default loops: i, j, k, i_3, ...
            name = "ijk"[self._loops] if self._loops < 3 else f"i_{self._loops}"
        var = E.Var(name, dtype)
        return self._loop(var, E.cast(lo, dtype) if lo.dtype != dtype else lo, extent, fk)

    @contextmanager
    def _loop(self, var, lo, extent, kind):
        self._loops += 1
        try:
            with self._scope(lambda body: S.For(var, lo, extent, kind, body)):
                yield var
        finally:
            self._loops -= 1

    def if_scope(self, cond):
        """A `with` block run when `cond` (a boolean) holds; `else_scope` may follow."""
        if isinstance(cond, bool):
            raise TdslError(f"ir_builder.if_scope: the condition is the Python bool {cond}, "
                            "not an expression; a thread axis compared with == gives one "
                            "(tdsl's IterVars compare by identity): write tx.var == 0")
        c = _expr(cond, "if_scope's condition")
        if c.dtype != "bool":
            raise TdslError(f"ir_builder.if_scope: the condition {c} has type {c.dtype}; "
                            "compare it (x != 0) to make a boolean")
        return self._scope(lambda body: S.IfThenElse(c, body))

    def else_scope(self):
        """A `with` block run when the condition of the `if_scope` just closed fails."""
        seq = self._seq_stack[-1]
        last = seq[-1] if seq else None
        if not isinstance(last, S.IfThenElse) or last.else_case is not None:
            raise TdslError("ir_builder.else_scope: it must directly follow an if_scope block")
        seq.pop()
        return self._scope(lambda body: S.IfThenElse(last.cond, last.then_case, body))

    def let(self, var_name, value):
        """A variable bound to `value` for what follows in the current scope."""
        v = _expr(value, "let's value")
        var = E.Var(var_name, v.dtype)
        self.emit(lambda body: S.LetStmt(var, v, body))
        return var

    def scope_attr(self, node, attr_key, value):
        """TVM's attribute scope over what follows: `thread_extent` (or
        `virtual_thread`) binds the thread axis `node` (`tdsl.thread_axis(tag)`) with
        `value` threads, which makes what follows a GPU kernel's body."""
        if attr_key not in THREAD_ATTRS:
            raise TdslError(f"ir_builder.scope_attr: attribute {attr_key!r} is not supported; "
                            f"tdsl's builder knows {', '.join(repr(a) for a in THREAD_ATTRS)}")
        if not isinstance(node, IterVar) or node.thread_tag not in THREAD_TAGS:
            raise TdslError(f"ir_builder.scope_attr(..., {attr_key!r}): the node must be a "
                            f"thread axis (tdsl.thread_axis('threadIdx.x')), got {node!r}")
        tag = node.thread_tag
        if (attr_key == "virtual_thread") != (tag == "vthread"):
            raise TdslError(f"ir_builder.scope_attr: '{attr_key}' does not go with the thread "
                            f"tag '{tag}' ('virtual_thread' is for 'vthread' axes)")
        extent = _int_expr(value, f"the {attr_key} of {tag}")
        if node.dom is not None and not arith.equal(node.dom.extent, extent):
            raise TdslError(f"ir_builder.scope_attr: {tag} was declared with the domain "
                            f"[0, {node.dom.extent}) but is given the extent {extent}")
        if extent.dtype != node.var.dtype:
            extent = E.cast(extent, node.var.dtype)
        self.emit(lambda body: S.For(node.var, E.const(0, node.var.dtype), extent,
                                     S.ForKind.THREAD_BINDING, body, tag))

    # ------------------------------------------------------------------ buffers
    def allocate(self, dtype, shape, name="buf", axis_separators=None, scope=""):
        """Storage for the rest of the current scope; returns its `BufferVar`. `scope`:
        "global" (the default), "local" (registers, per GPU thread) or "shared"."""
        dtype = dt.check(dtype)
        if axis_separators:
            raise TdslError("ir_builder.allocate: axis_separators are not supported")
        scope = scope or "global"
        if scope not in SCOPES:
            raise TdslError(f"ir_builder.allocate: scope {scope!r} is not one of {SCOPES}")
        if not isinstance(name, str) or not name.isidentifier():
            raise TdslError(f"ir_builder.allocate: the name must be an identifier, got {name!r}")
        dims = shape if isinstance(shape, (tuple, list)) else (shape,)
        dims = tuple(_int_expr(d, f"a size of '{name}'") for d in dims)
        buf = S.Buffer(name, dims, dtype, scope)
        self.emit(lambda body: S.Allocate(buf, body))
        return BufferVar(self, buf)

    def buffer_ptr(self, buf, shape=None):
        """The `BufferVar` of `buf`: an input or output tensor of the extern stage being
        defined, an allocated buffer, or a loop-IR Buffer. `shape` views it with another
        shape of the same row-major elements."""
        if isinstance(buf, BufferVar):
            buf = buf.buffer
        if isinstance(buf, Tensor):
            b = stage_buffer(buf)
            if b is None:
                raise TdslError(f"ir_builder.buffer_ptr: tensor '{buf.name}' is addressed "
                                "only inside the fcompute of the tdsl.extern stage that "
                                "lists it as an input or output")
            buf = b
        if not isinstance(buf, S.Buffer):
            raise TdslError(f"ir_builder.buffer_ptr: expected a tensor of the extern stage or "
                            f"a buffer, got {buf!r}")
        if shape is not None:
            dims = shape if isinstance(shape, (tuple, list)) else (shape,)
            shape = tuple(_int_expr(d, f"a size of the view of '{buf.name}'") for d in dims)
        return BufferVar(self, buf, shape)

    def likely(self, expr):
        """`expr` marked as almost always true."""
        return E.likely(_expr(expr, "likely's condition"))

    def get(self):
        """The statement built; every `with` block must be closed."""
        if len(self._seq_stack) != 1:
            raise TdslError("ir_builder.get: a with-block (for_range, if_scope, ...) is still "
                            "open")
        body = self._pop_seq()
        self._seq_stack.append([])
        return body


def create() -> IRBuilder:
    """A new IRBuilder."""
    return IRBuilder()
