"""The adjoints of one stage's inputs, given the adjoints of its outputs.

`stage_adjoints(op, adjoints, prefix, wants)` is the unit the graph-level gradient can reuse
per operator: for a ComputeOp whose outputs have adjoint tensors (shape `prefix +
output.shape`), it returns one gather stage per (input tensor, distinct read) with the
adjoint that read contributes, shape `prefix + input.shape`.

Per body: the adjoint of each read comes from reverse mode over the body (`expr_grad`);
its index map is inverted (`index_map`). Reductions: a sum passes the adjoint to every
element (masked by `where`); max and min, and tuple reducers that select one of two
elements (argmax's value), pass it to the first element equal to the result (an extra
stage finds its position, so ties go to one element only); a product passes the product
of the other elements (counting zeros, so a zero element still gets its gradient)."""
from __future__ import annotations

import functools

from ... import arith
from ... import dtype as dt
from ...errors import TdslError
from ...ir import expr as E
from ...ir.expr import Range
from ...ir.visitor import Mutator, conjuncts, substitute, walk
from ..compute import compute, prod as te_prod, sum as te_sum, min as te_min
from ..tensor import ComputeOp, IterVar
from .expr_grad import load_adjoints
from .index_map import Unknown, invert


def reducer_kind(red, k):
    """How output `k` of the reduction `red` combines: "sum", "prod", "max", "min",
    "select" (picks one of the two values, like argmax's value), or None."""
    dtypes = [s.dtype for s in red.sources]
    xs = tuple(E.Var(f"x{j}", d) for j, d in enumerate(dtypes))
    ys = tuple(E.Var(f"y{j}", d) for j, d in enumerate(dtypes))
    out = red.combiner.combine_values(xs, ys)[k]
    pair = {id(xs[k]), id(ys[k])}
    if isinstance(out, E.Select) and {id(out.t), id(out.f)} == pair:
        return "select"
    for cls, kind in ((E.Add, "sum"), (E.Mul, "prod"), (E.Max, "max"), (E.Min, "min")):
        if isinstance(out, cls) and {id(out.a), id(out.b)} == pair:
            return kind
    return None


def _fresh_reduce(axes, suffix):
    return [IterVar(iv.dom, E.Var(iv.var.name + suffix, iv.var.dtype), "reduce") for iv in axes]


def _rebind(op, red, vs, suffix):
    """A map from op's axes to `vs` and from red's axes to fresh reduction axes."""
    rs = _fresh_reduce(red.axis, suffix)
    m = {iv.var: v for iv, v in zip(op.axis, vs)}
    m.update({iv.var: r.var for iv, r in zip(red.axis, rs)})
    return m, rs


def _linear_position(axes):
    """The position of a point of the reduction domain in row-major order."""
    pos = None
    for iv in axes:
        term = iv.var - iv.dom.min
        pos = term if pos is None else pos * iv.dom.extent + term
    return pos


def _first_match(op, k):
    """The position of the first element of output k's reduction equal to its result (the
    int max where none is: an `init` won)."""
    red, Y = op.bodies[k], op.outputs[k]

    def f(*vs):
        m, rs = _rebind(op, red, vs, "_m")
        src = substitute(red.sources[k], m)
        cond = E.logical_and(substitute(red.condition, m), E.EQ(src, Y[vs]))
        return te_min(substitute(_linear_position(red.axis), m), axis=rs, where=cond)
    return compute(op.shape, f, name=f"{Y.name}.argbest")


def _product_parts(op, k):
    """(number of zero elements, product of the nonzero ones) of output k's product."""
    red = op.bodies[k]
    src0 = red.sources[k]
    zero, one = E.const(0, src0.dtype), E.const(1, src0.dtype)
    init = red.inits[k] if red.inits is not None else None

    def zeros(*vs):
        m, rs = _rebind(op, red, vs, "_z")
        src = substitute(src0, m)
        ini = None if init is None else E.select(E.EQ(init, zero), 1, 0)
        return te_sum(E.select(E.EQ(src, zero), 1, 0), axis=rs,
                      where=substitute(red.condition, m), init=ini)

    def nonzero(*vs):
        m, rs = _rebind(op, red, vs, "_p")
        src = substitute(src0, m)
        ini = None if init is None else E.select(E.NE(init, zero), init, one)
        return te_prod(E.select(E.NE(src, zero), src, one), axis=rs,
                       where=substitute(red.condition, m), init=ini)
    name = op.outputs[k].name
    return (compute(op.shape, zeros, name=f"{name}.zeros"),
            compute(op.shape, nonzero, name=f"{name}.nonzero"))


def _reduction_seed(op, k, seed, where):
    """(adjoint of the reduced element, extra condition) for output k's reduction."""
    red = op.bodies[k]
    v = tuple(iv.var for iv in op.axis)
    kind = reducer_kind(red, k)
    if kind == "sum":
        return seed, None
    if kind in ("max", "min", "select"):
        pos = _first_match(op, k)
        return seed, E.EQ(_linear_position(red.axis), pos[v])
    if kind == "prod":
        nz, pnz = _product_parts(op, k)
        src = red.sources[k]
        zero = E.const(0, src.dtype)
        factor = E.select(E.NE(src, zero),
                          E.select(E.EQ(nz[v], E.const(0, nz.dtype)), pnz[v] / src, zero),
                          E.select(E.EQ(nz[v], E.const(1, nz.dtype)), pnz[v], zero))
        return seed * factor, None
    raise TdslError(f"{where}: the reduction '{red.combiner.name}' is neither a sum, a "
                    "product, a max/min nor a selection of one element; its gradient is not "
                    "defined here")


def _split_conds(conds):
    out = []
    for c in conds:
        if c is not None:
            out.extend(conjuncts(c))
    return out


class _Replace(Mutator):
    def __init__(self, node, by):
        self.node, self.by = node, by

    def visit(self, n):
        return self.by if n is self.node else super().visit(n)


_MAX_CASES = 16


def _index_cases(load, where):
    """[(condition, read)]: a read whose indices hold min, max or select (a clamped
    stencil: `A[max(i - 1, 0)]`) as affine reads, each under the condition that picks it."""
    found = []

    def f(n):
        if not found and isinstance(n, (E.Min, E.Max, E.Select)):
            found.append(n)
    for i in load.indices:
        walk(i, f)
    if not found:
        return [(None, load)]
    n = found[0]
    if isinstance(n, E.Select):
        branches = [(n.cond, n.t), (E.Not(n.cond), n.f)]
    else:
        a, b = n.a, n.b
        first = E.LE(a, b) if isinstance(n, E.Min) else E.GE(a, b)
        branches = [(first, a), (E.Not(first), b)]
    out = []
    for cond, by in branches:
        r = _Replace(n, by)
        case = E.ProducerLoad(load.tensor, tuple(r.visit(i) for i in load.indices))
        for c, sub in _index_cases(case, where):
            out.append((cond if c is None else E.logical_and(cond, c), sub))
    if len(out) > _MAX_CASES:
        raise TdslError(f"{where}: the read {load.tensor.name}"
                        f"[{', '.join(map(str, load.indices))}] has too many min/max/select "
                        "cases in its indices to differentiate")
    return out


def _tighten(unknown, conds):
    """`unknown`'s domain narrowed by the conditions that bound it by constants alone
    (the case `i - 1 < 0` of a clamped read: one point, not the whole axis)."""
    if not (isinstance(unknown.lo, E.IntImm) and isinstance(unknown.extent, E.IntImm)):
        return unknown
    lo, hi = unknown.lo.value, unknown.lo.value + unknown.extent.value      # [lo, hi)
    for c in conds:
        if not isinstance(c, (E.LT, E.LE, E.GT, E.GE)):
            continue
        small, big = (c.a, c.b) if isinstance(c, (E.LT, E.LE)) else (c.b, c.a)
        strict = isinstance(c, (E.LT, E.GT))
        lc = arith.linear_coeff(small - big, unknown.var)     # small - big < 0 (or <= 0)
        if lc is None or abs(lc[0]) != 1 or not isinstance(lc[1], E.IntImm):
            continue
        coeff, base = lc[0], lc[1].value            # coeff*u + base < 0 (or <= 0)
        if coeff == 1:
            hi = min(hi, -base if strict else -base + 1)
        else:
            lo = max(lo, base + 1 if strict else base)
    if (lo, hi) == (unknown.lo.value, unknown.lo.value + unknown.extent.value):
        return unknown
    return Unknown(unknown.var, E.const(lo, unknown.var.dtype),
                   E.const(max(hi - lo, 0), unknown.var.dtype), unknown.kind)


def _reads_memory(e):
    found = []
    walk(e, lambda n: found.append(n) if isinstance(n, E.ProducerLoad) else None)
    return bool(found)


def _contribution(op, load, adj, cond, prefix, pvars, name):
    """The gather stage holding what one read `load` of `op` contributes to its tensor's
    adjoint, given that read's adjoint `adj` (over op's variables) and the condition
    `cond` under which the read happens; None when it never does."""
    A = load.tensor
    where = f"gradient of stage '{op.name}'"
    stage_vars = [Unknown(iv.var, iv.dom.min, iv.dom.extent, "axis") for iv in op.axis]
    stage_vars += [Unknown(iv.var, iv.dom.min, iv.dom.extent, "reduce")
                   for iv in op.reduce_axis]
    ranges = {u.var: Range(u.lo, u.extent) for u in stage_vars}
    targets = [E.Var(f"a{k}", "int32") for k in range(len(A.shape))]
    inv = invert(load.indices, stage_vars, targets, ranges, A, where)
    pre = [substitute(c, inv.subst) for c in _split_conds([cond] + inv.conds)]
    inv.free = [_tighten(u, [arith.simplify(c) for c in pre]) for u in inv.free]
    if any(isinstance(u.extent, E.IntImm) and u.extent.value == 0 for u in inv.free):
        return None
    axes = [IterVar(Range(u.lo, u.extent), E.Var("r_" + u.var.name, u.var.dtype), "reduce")
            for u in inv.free]
    renamed = {u.var: iv.var for u, iv in zip(inv.free, axes)}
    m = {v: substitute(val, renamed) for v, val in inv.subst.items()}
    m.update(renamed)
    out_ranges = {a: Range(E.const(0, "int32"), s) for a, s in zip(targets, A.shape)}
    out_ranges.update({iv.var: iv.dom for iv in axes})
    kept = []
    for c in _split_conds([cond] + inv.conds):
        c = arith.simplify(substitute(c, m), out_ranges)
        if arith.can_prove(c, out_ranges):
            continue
        if arith.can_prove(E.Not(c), out_ranges):
            return None
        kept.append(c)
    # `and` evaluates its right side only where the left holds: the range conditions go
    # first so that a condition reading a tensor (max's argbest, a user's `where`) never
    # reads it at a point outside the solved variables' domains
    kept.sort(key=_reads_memory)
    body = arith.simplify(substitute(adj, m), out_ranges)
    guard = functools.reduce(E.logical_and, kept) if kept else None
    nprefix = len(pvars)

    def f(*idx):
        vm = dict(zip(pvars, idx[:nprefix]))
        vm.update(zip(targets, idx[nprefix:]))
        e = substitute(body, vm)
        g = None if guard is None else substitute(guard, vm)
        if axes:
            return te_sum(e, axis=axes, where=g)
        return e if g is None else E.select(g, e, E.const(0, e.dtype))
    return compute(tuple(prefix) + tuple(A.shape), f, name=name)


def stage_adjoints(op, adjoints, prefix, wants):
    """[(input tensor, contribution tensor)] for the reads in `op` of tensors with
    `wants(T)`, given `adjoints` {output tensor of op: its adjoint}; `prefix` is the shape
    the adjoints have in front of the outputs' shapes."""
    if not isinstance(op, ComputeOp):
        raise TdslError(f"gradient: stage '{op.name}' is a {type(op).__name__}, which has no "
                        "derivative; only compute stages differentiate")
    where = f"gradient of stage '{op.name}'"
    pvars = [E.Var(f"p{k}", "int32") for k in range(len(prefix))]
    v = tuple(iv.var for iv in op.axis)
    out = []
    for k, Y in enumerate(op.outputs):
        G = adjoints.get(Y)
        if G is None or not dt.is_float(Y.dtype):
            continue
        body = op.bodies[k]
        seed = E.cast(G[tuple(pvars) + v], Y.dtype)
        if isinstance(body, E.Reduce):
            seed, extra = _reduction_seed(op, k, seed, where)
            reads = load_adjoints(body.sources[k], seed, wants, where)
            cond = E.logical_and(body.condition, extra) if extra is not None \
                else body.condition
        else:
            reads = load_adjoints(body, seed, wants, where, value=Y[v])
            cond = None
        count = {}
        for read, adj in reads:
            for case_cond, load in _index_cases(read, where):
                n = count.get(load.tensor, 0)
                name = f"{load.tensor.name}.grad.{Y.name}" + (f".{n}" if n else "")
                both = case_cond if cond is None else (
                    cond if case_cond is None else E.logical_and(cond, case_cond))
                c = _contribution(op, load, adj, both, prefix, pvars, name)
                if c is not None:
                    out.append((load.tensor, c))
                    count[load.tensor] = n + 1
    return out
