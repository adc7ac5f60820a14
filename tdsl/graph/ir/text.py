"""The text form of graph modules (API.md section 4) and its parser.

    def @main(%input: Tensor[(1, 128), float32], ...) -> Tensor[(1, 64), float32] {
      %0 = nn.dense(%input, %weight, units=64);
      ...
      return %2;
    }

Fused groups are printed as functions of their own (``def @fused_...(...) { ... }``, marked
``primitive``) before ``@main``, which calls them like operators. Constants with at most
`INLINE_CONST` elements are printed inline as ``const(VALUES, (SHAPE), DTYPE)``; larger
ones as ``meta[i]``, numbered by first appearance; `Module.meta` lists their arrays in that
order and `parse(text, meta=...)` takes them back.
"""
from __future__ import annotations

import re
from typing import List

import numpy as np
import sympy

from ...errors import GraphError
from .dims import dim_str, parse_dim
from .nodes import Call, Const, Function, Module, Var
from .registry import get_op
from .types import TensorType

INLINE_CONST = 8


# ---------------------------------------------------------------------------- printing

def _fmt_scalar(v, dtype):
    if dtype == "bool":
        return "True" if v else "False"
    if dtype.startswith("float"):
        f = float(v)
        if f != f:
            return "nan"
        if f in (float("inf"), float("-inf")):
            return "inf" if f > 0 else "-inf"
        return repr(f)
    return str(int(v))


def fmt_attr(v):
    if isinstance(v, bool):
        return "True" if v else "False"
    if isinstance(v, (int, np.integer)):
        return str(int(v))
    if isinstance(v, (float, np.floating)):
        return _fmt_scalar(v, "float64")
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(fmt_attr(x) for x in v) + "]"
    if v is None:
        return "None"
    if isinstance(v, sympy.Expr):
        return dim_str(v)
    raise GraphError(f"attribute value {v!r} cannot be printed")


def _fmt_type(types):
    if len(types) == 1:
        return str(types[0])
    return "(" + ", ".join(map(str, types)) + ")"


class _Printer:
    def __init__(self):
        self.meta_ids = {}
        self.meta: List[np.ndarray] = []

    def const(self, c: Const):
        if c.type.size <= INLINE_CONST:
            flat = c.data.reshape(-1)
            vals = [_fmt_scalar(x, c.type.dtype) for x in flat]
            val = vals[0] if c.type.ndim == 0 else "[" + ", ".join(vals) + "]"
            return f"const({val}, ({', '.join(map(str, c.type.shape))}), {c.type.dtype})"
        i = self.meta_ids.get(c)
        if i is None:
            i = self.meta_ids[c] = len(self.meta)
            self.meta.append(c.data)
        return f"meta[{i}]"

    def function(self, fn: Function, lines):
        params = ", ".join(f"%{p.name}: {p.type}" for p in fn.params)
        attrs = "".join(f" {k}={fmt_attr(v)}" for k, v in fn.attrs.items())
        head = f"def @{fn.name}({params}) -> {_fmt_type(fn.ret_types)}"
        if attrs:
            head += " attrs" + attrs
        lines.append(head + " {")
        names = {}
        for p in fn.params:
            names[p] = "%" + p.name

        def ref(e):
            if isinstance(e, Const):
                return self.const(e)
            try:
                return names[e]
            except KeyError:
                raise GraphError(f"@{fn.name}: {e!r} is not defined in this function "
                                 "(a variable of another function?)") from None

        for k, n in enumerate(fn.nodes()):
            args = [ref(a) for a in n.args]
            args += [f"{key}={fmt_attr(v)}" for key, v in _shown_attrs(n)]
            names[n] = f"%{k}"
            lines.append(f"  %{k} = {n.op_name}({', '.join(args)});")
        outs = [ref(o) for o in fn.outputs]
        lines.append(f"  return {outs[0] if len(outs) == 1 else '(' + ', '.join(outs) + ')'};")
        lines.append("}")


def _shown_attrs(n):
    """Attributes that differ from the operator's defaults (required ones always)."""
    if isinstance(n.op, Function):
        return list(n.attrs.items())
    d = get_op(n.op).defaults
    return [(k, v) for k, v in n.attrs.items() if k not in d or _differs(v, d[k])]


def _differs(a, b):
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) != len(b) or any(_differs(x, y) for x, y in zip(a, b))
    return type(a) is not type(b) and not (isinstance(a, (int, float)) and isinstance(b, (int, float))) or a != b


def print_module(mod: Module) -> str:
    p = _Printer()
    lines: List[str] = []
    for name, fn in mod.functions.items():
        if name != "main":
            p.function(fn, lines)
    p.function(mod.main, lines)
    return "\n".join(lines)


def print_function(fn: Function) -> str:
    p = _Printer()
    lines: List[str] = []
    p.function(fn, lines)
    return "\n".join(lines)


def collect_meta(mod: Module):
    p = _Printer()
    for name, fn in mod.functions.items():
        if name != "main":
            p.function(fn, [])
    p.function(mod.main, [])
    return p.meta


# the nodes do not import their printer (it imports them): it attaches itself to Module here
def _meta(self) -> List[np.ndarray]:
    return collect_meta(self)


def astext(self):
    return print_module(self)


def __str__(self):
    return self.astext()


Module.meta = property(_meta)
Module.astext = astext
Module.__str__ = __str__


# ---------------------------------------------------------------------------- parsing

_TOKEN = re.compile(r"""
    (?P<ws>\s+|//[^\n]*) |
    (?P<arrow>->) |
    (?P<num>-?(?:\d+\.\d*(?:[eE][-+]?\d+)?|\d+[eE][-+]?\d+|\d+|inf)(?![\w.])) |
    (?P<str>"(?:[^"\\]|\\.)*") |
    (?P<gvar>@[A-Za-z_][\w.]*) |
    (?P<lvar>%[\w.]+) |
    (?P<name>[A-Za-z_][\w.]*) |
    (?P<dim>\{[\w*+\-/(),. ]*\}) |
    (?P<punct>[()\[\]{},;:=])
""", re.VERBOSE)


class _Parser:
    def __init__(self, text, meta):
        self.toks = []
        pos = 0
        line = 1
        while pos < len(text):
            m = _TOKEN.match(text, pos)
            if not m:
                raise GraphError(f"parse: unexpected character {text[pos]!r} on line {line}")
            kind = m.lastgroup
            if kind != "ws":
                self.toks.append((kind, m.group(), line))
            line += m.group().count("\n")
            pos = m.end()
        self.toks.append(("eof", "", line))
        self.i = 0
        self.meta = meta
        self.meta_consts = {}
        self.functions = {}

    def peek(self):
        return self.toks[self.i]

    def next(self):
        t = self.toks[self.i]
        self.i += 1
        return t

    def expect(self, value):
        t = self.next()
        if t[1] != value:
            raise GraphError(f"parse: expected '{value}' on line {t[2]}, got '{t[1] or 'end of text'}'")
        return t

    def accept(self, value):
        if self.peek()[1] == value:
            self.i += 1
            return True
        return False

    def err(self, msg):
        raise GraphError(f"parse: {msg} on line {self.peek()[2]}")

    def module(self):
        main = None
        while self.peek()[0] != "eof":
            fn = self.function()
            if fn.name in self.functions:
                self.err(f"function @{fn.name} defined twice")
            self.functions[fn.name] = fn
            if fn.name == "main":
                main = fn
        if main is None:
            raise GraphError("parse: the text defines no @main function")
        return Module(main)

    def ttype(self):
        t = self.next()
        if t[1] != "Tensor":
            raise GraphError(f"parse: expected a type 'Tensor[(...), dtype]' on line {t[2]}, got '{t[1]}'")
        self.expect("[")
        self.expect("(")
        shape = []
        while not self.accept(")"):
            t = self.next()
            if t[0] not in ("num", "name", "dim"):
                raise GraphError(f"parse: expected a dimension on line {t[2]}, got '{t[1]}'")
            shape.append(int(t[1]) if t[0] == "num" else parse_dim(t[1].strip("{}")))
            self.accept(",")
        self.expect(",")
        dt = self.next()
        self.expect("]")
        return TensorType(shape, dt[1])

    def rettype(self):
        if self.accept("("):
            types = [self.ttype()]
            while self.accept(","):
                types.append(self.ttype())
            self.expect(")")
            return types
        return [self.ttype()]

    def function(self):
        self.expect("def")
        t = self.next()
        if t[0] != "gvar":
            raise GraphError(f"parse: expected a function name '@...' on line {t[2]}")
        name = t[1][1:]
        self.expect("(")
        params = []
        env = {}
        while not self.accept(")"):
            v = self.next()
            if v[0] != "lvar":
                raise GraphError(f"parse: expected a parameter '%name' on line {v[2]}, got '{v[1]}'")
            self.expect(":")
            p = Var(v[1][1:], self.ttype())
            params.append(p)
            env[v[1]] = p
            self.accept(",")
        self.expect("->")
        rtypes = self.rettype()
        attrs = {}
        if self.accept("attrs"):
            while self.peek()[0] == "name":
                k = self.next()[1]
                self.expect("=")
                attrs[k] = self.attr_value()
        self.expect("{")
        while True:
            t = self.next()
            if t[1] == "return":
                if self.accept("("):
                    outs = [self.value(env)]
                    while self.accept(","):
                        outs.append(self.value(env))
                    self.expect(")")
                else:
                    outs = [self.value(env)]
                self.expect(";")
                self.expect("}")
                break
            if t[0] != "lvar":
                raise GraphError(f"parse: expected '%N = op(...);' or 'return' on line {t[2]}, got '{t[1]}'")
            if t[1] in env:
                raise GraphError(f"parse: {t[1]} is defined twice on line {t[2]}")
            self.expect("=")
            env[t[1]] = self.call(env)
            self.expect(";")
        fn = Function(name, params, outs, attrs)
        got = fn.ret_types
        if got != rtypes:
            raise GraphError(f"parse: @{name} declares return type {_fmt_type(rtypes)} but "
                             f"returns {_fmt_type(got)}")
        return fn

    def call(self, env):
        t = self.next()
        line = t[2]
        if t[0] == "gvar":
            fn = self.functions.get(t[1][1:])
            if fn is None:
                raise GraphError(f"parse: call of undefined function {t[1]} on line {line}")
            op = fn
        elif t[0] == "name":
            op = t[1]
        else:
            raise GraphError(f"parse: expected an operator name on line {line}, got '{t[1]}'")
        self.expect("(")
        args, attrs = [], {}
        while not self.accept(")"):
            if self.peek()[0] == "name" and self.toks[self.i + 1][1] == "=":
                k = self.next()[1]
                self.next()
                attrs[k] = self.attr_value()
            else:
                if attrs:
                    self.err("positional argument after attributes")
                args.append(self.value(env))
            if not self.accept(","):
                self.expect(")")
                break
        try:
            return Call(op, args, attrs)
        except GraphError as e:
            raise GraphError(f"line {line}: {e}") from None

    def value(self, env):
        t = self.next()
        if t[0] == "lvar":
            if t[1] not in env:
                raise GraphError(f"parse: {t[1]} is used before it is defined on line {t[2]}")
            return env[t[1]]
        if t[1] == "meta":
            self.expect("[")
            k = int(self.next()[1])
            self.expect("]")
            if k not in self.meta_consts:
                if self.meta is None or k >= len(self.meta):
                    raise GraphError(f"parse: meta[{k}] on line {t[2]} is not given; pass "
                                     "meta=mod.meta (the constant arrays) to parse")
                self.meta_consts[k] = Const(self.meta[k])
            return self.meta_consts[k]
        if t[1] == "const":
            self.expect("(")
            vals = self.attr_value()
            self.expect(",")
            self.expect("(")
            shape = []
            while not self.accept(")"):
                shape.append(int(self.next()[1]))
                self.accept(",")
            self.expect(",")
            dt = self.next()[1]
            self.expect(")")
            return Const(np.array(vals, dtype=dt).reshape(shape))
        raise GraphError(f"parse: expected a value (%name, meta[i] or const(...)) on line {t[2]}, got '{t[1]}'")

    def attr_value(self):
        t = self.next()
        if t[0] == "num":
            s = t[1]
            if s in ("inf", "-inf"):
                return float(s)
            return float(s) if any(c in s for c in ".eE") else int(s)
        if t[0] == "str":
            return re.sub(r"\\(.)", r"\1", t[1][1:-1])
        if t[1] == "[":
            out = []
            while not self.accept("]"):
                out.append(self.attr_value())
                self.accept(",")
            return out
        if t[1] in ("True", "False"):
            return t[1] == "True"
        if t[1] == "None":
            return None
        if t[1] == "nan":
            return float("nan")
        if t[0] in ("name", "dim"):       # a symbolic size
            return parse_dim(t[1].strip("{}"))
        raise GraphError(f"parse: expected an attribute value on line {t[2]}, got '{t[1]}'")


def parse(text: str, meta=None) -> Module:
    """Reads the text form back into a Module. `meta`: the arrays of ``meta[i]`` constants
    (`Module.meta` of the printed module)."""
    if not isinstance(text, str):
        raise GraphError(f"parse: expected text, got {type(text).__name__}")
    return _Parser(text, meta).module()
