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
