"""Reverse mode over one scalar expression: the adjoint of every tensor read in it.

The body of a compute is a DAG of expression nodes (a sub-expression may be used twice);
adjoints are accumulated per node in one reverse topological sweep, so shared
sub-expressions are differentiated once. Only floating-point nodes carry a gradient:
integer and boolean sub-expressions (indices, conditions, casts from integers) are
constants to it."""
from __future__ import annotations

from ... import dtype as dt
from ...errors import TdslError
from ...ir import expr as E
from .intrinsics import RULES


def _is_zero(e):
    return isinstance(e, E.FloatImm) and e.value == 0.0


def _is_one(e):
    return isinstance(e, E.FloatImm) and e.value == 1.0


def mul(a, b):
    """a * b with the float constants 0 and 1 folded."""
    if _is_one(a):
        return b
    if _is_one(b):
        return a
    return a * b


def add(a, b):
    if a is None or _is_zero(a):
        return b
    if b is None or _is_zero(b):
        return a
    return a + b


def _float(e):
    return isinstance(e, E.Expr) and dt.is_float(e.dtype)


def _children(n):
    """The float operands a gradient flows into."""
    if isinstance(n, (E.Add, E.Sub, E.Mul, E.Div, E.Min, E.Max)):
        return (n.a, n.b)
    if isinstance(n, E.Select):
        return (n.t, n.f)
    if isinstance(n, E.Cast):
        return (n.value,) if _float(n.value) else ()
    if isinstance(n, E.Call):
        return tuple(a for a in n.args if _float(a))
    return ()


def _postorder(root):
    seen, order, stack = set(), [], [(root, False)]
    while stack:
        n, done = stack.pop()
        if done:
            order.append(n)
            continue
        if id(n) in seen:
            continue
        seen.add(id(n))
        stack.append((n, True))
        for c in _children(n):
            if _float(c) and id(c) not in seen:
                stack.append((c, False))
    return order


def _local(n, y, g, where):
    """[(operand, adjoint)] of node `n` given its adjoint `g`; `y` is n's value."""
    z = E.const(0, n.dtype)
    if isinstance(n, E.Add):
        return [(n.a, g), (n.b, g)]
    if isinstance(n, E.Sub):
        return [(n.a, g), (n.b, -g)]
    if isinstance(n, E.Mul):
        return [(n.a, mul(g, n.b)), (n.b, mul(g, n.a))]
    if isinstance(n, E.Div):
        return [(n.a, g / n.b), (n.b, -(mul(g, y) / n.b))]
    if isinstance(n, (E.Max, E.Min)):
        # ties go to the first operand, as numpy's maximum picks it
        first = n.a >= n.b if isinstance(n, E.Max) else n.a <= n.b
        return [(n.a, E.select(first, g, z)), (n.b, E.select(first, z, g))]
    if isinstance(n, E.Select):
        return [(n.t, E.select(n.cond, g, z)), (n.f, E.select(n.cond, z, g))]
    if isinstance(n, E.Cast):
        return [(n.value, E.cast(g, n.value.dtype))]
    if isinstance(n, E.Call):
        rule = None if n.extern else RULES.get(n.name)
        if rule is None:
            raise TdslError(f"{where}: {'the C function' if n.extern else 'the intrinsic'} "
                            f"'{n.name}' has no derivative ({n}); compute it in a stage the "
                            "gradient does not go through, or write its adjoint by hand")
        grads = rule(list(n.args), y, g)
        return [(a, d) for a, d in zip(n.args, grads) if d is not None and _float(a)]
    raise TdslError(f"{where}: cannot differentiate {type(n).__name__} node {n}")


def load_adjoints(body, seed, wants, where, value=None):
    """The adjoint of each read `T[idx]` of a tensor with `wants(T)` in `body`, given the
    adjoint `seed` of `body`: a list of (ProducerLoad, adjoint expression). Reads of one
    tensor at the same indices are merged. `value` may stand for the value of `body`
    itself (the forward tensor's element), which the derivative of exp, tanh, sqrt, ...
    reuse instead of recomputing it. `where` names the stage in errors."""
    if not _float(body):
        return []
    order = _postorder(body)
    live = set()        # nodes that lead to a wanted read
    for n in order:
        if isinstance(n, E.ProducerLoad):
            if wants(n.tensor):
                live.add(id(n))
        elif any(id(c) in live for c in _children(n)):
            live.add(id(n))
    if id(body) not in live:
        return []
    adj = {id(body): seed}
    found = {}
    for n in reversed(order):
        g = adj.get(id(n))
        if g is None or id(n) not in live:
            continue
        if isinstance(n, E.ProducerLoad):
            key = (id(n.tensor), tuple(str(i) for i in n.indices))
            load, prev = found.get(key, (n, None))
            found[key] = (load, add(prev, g))
            continue
        y = value if (n is body and value is not None) else n
        for c, d in _local(n, y, g, where):
            if id(c) in live:
                adj[id(c)] = add(adj.get(id(c)), d)
    return list(found.values())
