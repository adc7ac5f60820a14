"""verify: what every well-formed loop-IR function satisfies, checked between passes.

A pass that breaks one of these rules fails here, naming the pass, instead of in a code
generator far from the cause (tinygrad's `spec.py`, TVM's `VerifySSA`/`VerifyMemory`):

- a variable is read only where it is defined: a parameter, a size of a parameter
  buffer, or the variable of a loop or let around the read; and no loop or let defines a
  variable again inside its own scope (sibling loops may share one);
- a buffer is accessed (load, store, prefetch, pointer, extern call) only where it is a
  parameter or allocated around the access, with as many indices as it has dimensions,
  or one (a flattened access);
- a barrier, or an asynchronous-copy commit, is only inside a GPU kernel (a loop bound
  to blockIdx or threadIdx);
- vectorized and unrolled loops, and loops bound to vthread, have constant extents; a
  loop with a thread tag is a thread binding and the other way round;
- loop bounds are integers, conditions booleans, a let value has its variable's type and
  a stored value its buffer's;
- no tensor-expression node (`ProducerLoad`, `Reduce`) is left in the loop IR;
- after `split_kernels`, each kernel uses only its own parameters and the buffers it
  allocates.

`lower` runs it after every pass when `TDSL_DEBUG` or `TDSL_VERIFY=1` is set (the test
suite sets the latter). A failure is an `IRVerifyError`, a bug of tdsl (or of IR a user
function made, such as a tensor intrinsic's statement or an ir_builder body): mistakes in a schedule are refused
before, or by the pass that can name them (a threadIdx loop of symbolic extent, by
`split_kernels`), so the rules here leave those alone.
"""
from __future__ import annotations

from .. import dtype as dt
from ..errors import InternalError
from ..ir import expr as E
from ..ir import stmt as S

KERNEL_TAGS = ("blockIdx", "threadIdx")
_CONST_EXTENT = (S.ForKind.VECTORIZED, S.ForKind.UNROLLED)
_MAX_NODE_TEXT = 600


class IRVerifyError(InternalError):
    """A loop-IR function broke a rule of `tdsl.passes.verify` (a bug of the pass named)."""


def _excerpt(node):
    try:
        text = str(node)
    except Exception as e:      # a node the printer cannot print is still worth naming
        text = f"<{type(node).__name__}: unprintable, {type(e).__name__}: {e}>"
    return text if len(text) <= _MAX_NODE_TEXT else text[:_MAX_NODE_TEXT] + "\n..."


class _Verifier:
    def __init__(self, func, after):
        self.func = func
        self.after = after
        self.vars = set()           # variables defined where the walk is
        self.bufs = set()           # buffers accessible where the walk is
        self.tags = []              # thread tags of the loops around
        self.kernel = None          # the kernel being checked, after split_kernels

    def fail(self, msg, node):
        where = f"function '{self.func.name}'"
        if self.kernel is not None:
            where += f", kernel '{self.kernel}'"
        when = f" after pass '{self.after}'" if self.after else ""
        raise IRVerifyError(f"IR verifier: {where}{when}: {msg}, in:\n{_excerpt(node)}\n"
                            "This is a bug in tdsl (or in IR handed to it, such as a tensor "
                            "intrinsic's statement or an ir_builder body); please report it with the code that "
                            "defines the schedule.")

    # scopes ------------------------------------------------------------------------
    def define(self, var, node):
        if var in self.vars:
            self.fail(f"variable '{var.name}' is defined again inside its own scope", node)
        self.vars.add(var)

    def in_kernel(self):
        return any(t.split(".")[0] in KERNEL_TAGS for t in self.tags)

    # expressions ---------------------------------------------------------------------
    def expr(self, e, stmt):
        """Checks expression `e` of statement `stmt` (named in failures)."""
        stack = [e]
        while stack:
            n = stack.pop()
            t = type(n)
            if t is E.Var:
                if n not in self.vars:
                    self.fail(f"variable '{n.name}' is used where it is not defined", stmt)
            elif t is E.IntImm or t is E.FloatImm:
                continue
            elif t is E.BufferLoad:
                self.access(n.buffer, n.indices, stmt)
                stack.extend(n.indices)
            elif t is E.ProducerLoad or t is E.Reduce:
                self.fail(f"a tensor-expression node ({t.__name__}) is left in the loop IR",
                          stmt)
            elif t is E.Call:
                stack.extend(n.args)
            elif t is E.Cast or t is E.Not:
                stack.append(n.value if t is E.Cast else n.a)
            elif t is E.Select:
                stack.extend((n.cond, n.t, n.f))
            elif isinstance(n, E.BinaryOp):
                stack.extend((n.a, n.b))
            else:
                self.fail(f"{t.__name__} is not an expression of the loop IR", stmt)

    def access(self, buf, indices, stmt):
        if not isinstance(buf, S.Buffer):
            self.fail(f"an access of {buf!r}, which is not a Buffer", stmt)
        if buf not in self.bufs:
            self.fail(f"buffer '{buf.name}' is accessed where it is neither a parameter nor "
                      "allocated", stmt)
        if indices is not None and len(indices) not in (1, len(buf.shape)):
            self.fail(f"buffer '{buf.name}' of {len(buf.shape)} dimensions is accessed with "
                      f"{len(indices)} indices", stmt)

    # statements ----------------------------------------------------------------------
    def stmt(self, s):
        t = type(s)
        if t is S.SeqStmt:
            for x in s.stmts:
                self.stmt(x)
        elif t is S.For:
            self.loop(s)
        elif t is S.LetStmt:
            self.expr(s.value, s)
            if s.value.dtype != s.var.dtype:
                self.fail(f"let '{s.var.name}' of type {s.var.dtype} is bound to a value of "
                          f"type {s.value.dtype}", s)
            self.define(s.var, s)
            self.stmt(s.body)
            self.vars.discard(s.var)
        elif t is S.IfThenElse:
            self.expr(s.cond, s)
            if s.cond.dtype != "bool":
                self.fail(f"the condition has type {s.cond.dtype}", s)
            self.stmt(s.then_case)
            if s.else_case is not None:
                self.stmt(s.else_case)
        elif t is S.BufferStore:
            self.access(s.buffer, s.indices, s)
            for i in s.indices:
                self.expr(i, s)
            self.expr(s.value, s)
            if s.value.dtype != s.buffer.dtype:
                self.fail(f"a value of type {s.value.dtype} is stored to buffer "
                          f"'{s.buffer.name}' of type {s.buffer.dtype}", s)
        elif t is S.Allocate:
            for d in s.buffer.shape:
                self.expr(d, s)
            had = s.buffer in self.bufs
            self.bufs.add(s.buffer)
            self.stmt(s.body)
            if not had:
                self.bufs.discard(s.buffer)
        elif t is S.Evaluate:
            self.expr(s.value, s)
        elif t is S.Barrier or t is S.AsyncCommit:
            if not self.in_kernel():
                self.fail(f"a {t.__name__} outside every GPU kernel (no loop bound to "
                          "blockIdx or threadIdx around it)", s)
        elif t is S.Prefetch:
            self.access(s.buffer, s.indices, s)
            for i in s.indices:
                self.expr(i, s)
            self.expr(s.extent, s)
        elif t is S.ExternCall:
            for a in s.args:
                if isinstance(a, S.Buffer):
                    self.access(a, None, s)
                else:
                    self.expr(a, s)
        else:
            self.fail(f"{t.__name__} is not a statement of the loop IR", s)

    def loop(self, f):
        self.expr(f.min, f)
        self.expr(f.extent, f)
        if not (dt.is_int(f.min.dtype) and dt.is_int(f.extent.dtype) and dt.is_int(f.var.dtype)):
            self.fail(f"loop '{f.var.name}' of type {f.var.dtype} runs from {f.min.dtype} "
                      f"{f.min} over {f.extent.dtype} {f.extent}: loops count in integers", f)
        tag = f.thread_tag
        if (f.kind is S.ForKind.THREAD_BINDING) != bool(tag):
            self.fail(f"loop '{f.var.name}' of kind {f.kind.value} has the thread tag "
                      f"{tag!r}", f)
        # (a threadIdx loop of any extent is the user's mistake, which split_kernels names)
        if (f.kind in _CONST_EXTENT or tag == "vthread") and not isinstance(f.extent, E.IntImm):
            what = f.kind.value if f.kind in _CONST_EXTENT else f"bound to {tag}"
            self.fail(f"loop '{f.var.name}' ({what}) has the non-constant extent {f.extent}",
                      f)
        self.define(f.var, f)
        self.tags.append(tag)
        self.stmt(f.body)
        self.tags.pop()
        self.vars.discard(f.var)


def _params(params):
    """The variables and buffers a list of parameters defines: scalar parameters, buffers
    and the variables in the buffers' shapes (their sizes)."""
    vars_, bufs = set(), set()
    for p in params:
        if isinstance(p, S.Buffer):
            bufs.add(p)
            for d in p.shape:
                _collect_vars(d, vars_)
        elif isinstance(p, E.Var):
            vars_.add(p)
    return vars_, bufs


def _collect_vars(e, out):
    stack = [e]
    while stack:
        n = stack.pop()
        if isinstance(n, E.Var):
            out.add(n)
        elif isinstance(n, E.BinaryOp):
            stack.extend((n.a, n.b))
        elif isinstance(n, E.Cast):
            stack.append(n.value)
        elif isinstance(n, E.Call):
            stack.extend(n.args)


def verify(func: S.PrimFunc, after: str = None) -> S.PrimFunc:
    """Raises IRVerifyError when `func` (and its kernels, once split) breaks a rule above;
    `after`: the pass that made it, for the message. Returns `func`."""
    if not isinstance(func, S.PrimFunc):
        raise IRVerifyError(f"IR verifier: pass '{after}' returned {type(func).__name__}, "
                            "not a PrimFunc")
    vars_, bufs = _params(func.params)
    v = _Verifier(func, after)
    v.vars, v.bufs = set(vars_), set(bufs)
    v.stmt(func.body)
    for k in func.attrs.get("kernels", ()):
        kv = _Verifier(func, after)
        kv.kernel = k.name
        kv.vars, kv.bufs = _params(k.params)
        kv.stmt(k.body)
    return func
