"""Readable text for expressions, statements and functions (Python-like, TVMScript in spirit).

Distinct variables that share a name get a numeric suffix, so the text is unambiguous.
"""
from __future__ import annotations

from . import expr as E
from . import stmt as S

_PREC = {E.Or: 1, E.And: 2, E.Not: 3, E.EQ: 4, E.NE: 4, E.LT: 4, E.LE: 4, E.GT: 4, E.GE: 4,
         E.Add: 5, E.Sub: 5, E.Mul: 6, E.Div: 6, E.FloorDiv: 6, E.FloorMod: 6}
_SYM = {E.Or: "or", E.And: "and", E.EQ: "==", E.NE: "!=", E.LT: "<", E.LE: "<=", E.GT: ">",
        E.GE: ">=", E.Add: "+", E.Sub: "-", E.Mul: "*", E.Div: "/", E.FloorDiv: "//",
        E.FloorMod: "%"}


_BIT_INFIX = {"bitwise_and": "&", "bitwise_or": "|", "bitwise_xor": "^", "shift_left": "<<",
              "shift_right": ">>"}


class Namer:
    """A unique printed name per object: `base`, then `base_1`, `base_2`, ... Code printers
    pass a `sanitize` for their identifier rules and the words they reserve."""

    def __init__(self, sanitize=None, reserved=()):
        self.names = {}
        self.taken = set(reserved)
        self.sanitize = sanitize

    def __call__(self, obj, base):
        n = self.names.get(obj)
        if n is None:
            if self.sanitize is not None:
                base = self.sanitize(base)
            n, k = base, 0
            while n in self.taken:
                k += 1
                n = f"{base}_{k}"
            self.names[obj] = n
            self.taken.add(n)
        return n


class Printer:
    def __init__(self):
        self.name = Namer()

    # expressions --------------------------------------------------------------------
    def expr(self, e, prec=0) -> str:
        t = type(e)
        if t is E.IntImm:
            if e.dtype == "bool":
                return "True" if e.value else "False"
            return str(e.value) if e.dtype in ("int32",) else f"{e.dtype}({e.value})"
        if t is E.FloatImm:
            suffix = {"float32": "f", "float16": "h"}.get(e.dtype, "")
            return f"{e.value!r}{suffix}"
        if t is E.Var:
            return self.name(e, e.name)
        if t is E.Not:      # before the binary operators: one operand, but a precedence
            s = f"not {self.expr(e.a, 3)}"
            return f"({s})" if 3 < prec else s
        if t in _PREC:
            p = _PREC[t]
            # left-assoc: the right operand of - // % / needs parens at equal precedence
            right_p = p + 1 if t in (E.Sub, E.Div, E.FloorDiv, E.FloorMod) or p == 4 else p
            s = f"{self.expr(e.a, p)} {_SYM[t]} {self.expr(e.b, right_p)}"
            return f"({s})" if p < prec else s
        if t in (E.Min, E.Max):
            return f"{t.__name__.lower()}({self.expr(e.a)}, {self.expr(e.b)})"
        if t is E.Select:
            return f"select({self.expr(e.cond)}, {self.expr(e.t)}, {self.expr(e.f)})"
        if t is E.Cast:
            return f"{e.dtype}({self.expr(e.value)})"
        if t is E.Call:
            if e.extern:
                args = "".join(", " + self.expr(a) for a in e.args)
                return f'call_pure_extern("{e.dtype}", "{e.name}"{args})'
            if e.name in _BIT_INFIX:       # always parenthesised: Python's precedence differs
                return f"({self.expr(e.args[0])} {_BIT_INFIX[e.name]} {self.expr(e.args[1])})"
            if e.name == "bitwise_not":
                return f"~{self.expr(e.args[0], 7)}"
            return f"{e.name}({', '.join(self.expr(a) for a in e.args)})"
        if t is E.ProducerLoad:
            return f"{e.tensor.name}[{', '.join(self.expr(i) for i in e.indices)}]"
        if t is E.BufferLoad:
            return f"{self.name(e.buffer, e.buffer.name)}[{', '.join(self.expr(i) for i in e.indices)}]"
        if t is E.Reduce:
            axes = ", ".join(self.name(iv.var, iv.var.name) for iv in e.axis)
            s = f"{e.combiner.name}({self.values(e.source)}, axis=[{axes}]"
            if not E.is_const_int(e.condition, 1):
                s += f", where={self.expr(e.condition)}"
            if e.init is not None:
                s += f", init={self.values(e.init)}"
            s += ")"
            return s + (f"[{e.value_index}]" if isinstance(e.source, tuple) else "")
        return repr(e)

    def values(self, v) -> str:
        """An expression, or a tuple of them (a reduction over tuples)."""
        if isinstance(v, tuple):
            return "(" + ", ".join(self.expr(x) for x in v) + ")"
        return self.expr(v)

    # statements ---------------------------------------------------------------------
    def stmt(self, s, ind=0, out=None) -> list:
        out = [] if out is None else out
        pad = "  " * ind
        t = type(s)
        if t is S.SeqStmt:
            for x in s.stmts:
                self.stmt(x, ind, out)
        elif t is S.For:
            v = self.expr(s.var)
            lo, ext = s.min, s.extent
            if s.kind is S.ForKind.SERIAL:
                rng = (f"range({self.expr(ext)})" if E.is_const_int(lo, 0)
                       else f"range({self.expr(lo)}, {self.expr(lo + ext)})")
            else:
                kind = {"unrolled": "unroll"}.get(s.kind.value, s.kind.value)
                args = self.expr(ext) if E.is_const_int(lo, 0) else f"{self.expr(lo)}, {self.expr(lo + ext)}"
                if s.kind is S.ForKind.THREAD_BINDING:
                    args += f', thread="{s.thread_tag}"'
                rng = f"{kind}({args})"
            prag = "".join(f"  # pragma {k}={v!r}" for k, v in s.pragmas)
            out.append(f"{pad}for {v} in {rng}:{prag}")
            self.stmt(s.body, ind + 1, out)
        elif t is S.LetStmt:
            out.append(f"{pad}{self.expr(s.var)} = {self.expr(s.value)}")
            self.stmt(s.body, ind, out)
        elif t is S.IfThenElse:
            out.append(f"{pad}if {self.expr(s.cond)}:")
            self.stmt(s.then_case, ind + 1, out)
            if s.else_case is not None:
                out.append(f"{pad}else:")
                self.stmt(s.else_case, ind + 1, out)
        elif t is S.BufferStore:
            idx = ", ".join(self.expr(i) for i in s.indices)
            eq = f" = atomic_{s.atomic}" if s.atomic else " ="
            out.append(f"{pad}{self.name(s.buffer, s.buffer.name)}[{idx}]{eq} {self.expr(s.value)}")
        elif t is S.Allocate:
            b = s.buffer
            shape = ", ".join(self.expr(x) for x in b.shape)
            out.append(f"{pad}{self.name(b, b.name)} = allocate(({shape}), {b.dtype}, \"{b.scope}\")")
            self.stmt(s.body, ind, out)
        elif t is S.Evaluate:
            out.append(f"{pad}{self.expr(s.value)}")
        elif t is S.Barrier:
            wait = "" if s.async_wait is None else f", async_wait={s.async_wait}"
            out.append(f"{pad}barrier(\"{s.scope}\"{wait})")
        elif t is S.AsyncCommit:
            out.append(f"{pad}async_commit()")
        elif t is S.Prefetch:
            idx = ", ".join(self.expr(i) for i in s.indices)
            out.append(f"{pad}prefetch({self.name(s.buffer, s.buffer.name)}[{idx}], "
                       f"{self.expr(s.extent)})")
        elif t is S.ExternCall:
            args = "".join(", " + (self.name(a, a.name) if isinstance(a, S.Buffer) else self.expr(a))
                           for a in s.args)
            out.append(f'{pad}call_packed("{s.name}"{args})')
        else:
            out.append(f"{pad}{s!r}")
        return out

    def func(self, f) -> str:
        params = []
        for p in f.params:
            if isinstance(p, S.Buffer):
                self.name(p, p.name)
        for p in f.params:
            if isinstance(p, S.Buffer):
                shape = ", ".join(self.expr(x) for x in p.shape)
                params.append(f"{self.name(p, p.name)}: Buffer(({shape}{',' if len(p.shape) == 1 else ''}), {p.dtype})")
            else:
                params.append(f"{self.expr(p)}: {p.dtype}")
        lines = [f"def {f.name}({', '.join(params)}):"]
        body = self.stmt(f.body, 1)
        return "\n".join(lines + body)


def expr_str(e) -> str:
    return Printer().expr(e)


def stmt_str(s) -> str:
    return "\n".join(Printer().stmt(s))


def func_str(f) -> str:
    return Printer().func(f)
