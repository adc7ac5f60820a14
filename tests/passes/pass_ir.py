"""Helpers of the one-pass tests: the IR a pass receives, made by lowering a tiny schedule
up to just before it, and small hand-built IR."""
import dataclasses
import importlib
from unittest import mock

import tdsl
from tdsl.ir import expr as E
from tdsl.ir import stmt as S

LOWER = importlib.import_module("tdsl.lower")     # `tdsl.lower` is the function


def before(pass_name, sched, args, target=None, nth=0):
    """What `tdsl.lower(sched, args, target=target)` makes, stopped just before the `nth`
    pass of PASSES named `pass_name` (the passes of other phases skipped as lower skips
    them)."""
    at = [k for k, p in enumerate(LOWER.PASSES) if p.name == pass_name][nth]
    with mock.patch.object(LOWER, "PASSES", LOWER.PASSES[:at]):
        return tdsl.lower(sched, args, target=target)


def loop(var, extent, body, kind=S.ForKind.SERIAL, tag="", lo=0, pragmas=()):
    return S.For(var, E.convert(lo), E.convert(extent), kind, body, tag, pragmas)


def func(params, body, name="f", **attrs):
    return S.PrimFunc(name, list(params), body, dict(attrs))


def nodes(node, cls):
    """The nodes of type `cls` under `node`, parents before children, in program order."""
    out, stack = [], [node]
    while stack:
        n = stack.pop()
        if isinstance(n, cls):
            out.append(n)
        if isinstance(n, (E.Var, S.Buffer)) or not dataclasses.is_dataclass(n):
            continue
        kids = []
        for f in dataclasses.fields(n):
            v = getattr(n, f.name)
            if isinstance(v, (E.Expr, S.Stmt)):
                kids.append(v)
            elif isinstance(v, tuple):
                kids.extend(x for x in v if isinstance(x, (E.Expr, S.Stmt)))
        stack.extend(reversed(kids))
    return out


def gpu_reverse_rows(at="block"):
    """C[i, j] = A[i, 7 - j] * 2 + 1 on an 8 x 8 grid (blockIdx.x = i, threadIdx.x = j),
    through a stage B = A * 2 computed at the block (threads exchange data through it) or
    at the thread (`at="thread"`, then B[i, j] is read in place), or at root."""
    A = tdsl.placeholder((8, 8), name="A")
    B = tdsl.compute((8, 8), lambda i, j: A[i, j] * 2.0, name="B")
    read = (lambda i, j: B[i, 7 - j] + 1.0) if at == "block" else (lambda i, j: B[i, j] + 1.0)
    C = tdsl.compute((8, 8), read, name="C")
    s = tdsl.create_schedule(C)
    for t in ((B, C) if at == "root" else (C,)):
        i, j = t.op.axis
        s[t].bind(i, tdsl.thread_axis("blockIdx.x"))
        s[t].bind(j, tdsl.thread_axis("threadIdx.x"))
    if at == "block":
        s[B].compute_at(s[C], C.op.axis[0])
        s[B].bind(B.op.axis[1], tdsl.thread_axis("threadIdx.x"))
    elif at == "thread":
        s[B].compute_at(s[C], C.op.axis[1])
    return s, [A, C]
