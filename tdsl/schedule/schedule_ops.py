"""Builds the loop IR of a schedule from scratch: one loop nest per stage, attached stages
inserted at their attach loops, inlined stages substituted, reductions split into an init
nest and an update nest, guards for non-divisible splits (marked `likely`, so loop
partitioning can peel them).

GPU: a reduction whose reduction loop is bound to threadIdx.* becomes a cross-thread
reduction (`_cross_thread_reduce`): each thread accumulates its share in a local
register, the partial results meet in a shared buffer and are combined by a tree, and one
thread writes the result. Loops bound to thread tags are THREAD_BINDING loops; on a GPU
every thread runs the kernel body, so nested loops with the same tag share the index."""
from __future__ import annotations

from typing import Dict, List

from .. import arith
from ..errors import LoweringError, ScheduleError
from ..ir import expr as E
from ..ir import stmt as S
from ..ir.visitor import Mutator, substitute, free_vars
from ..te.tensor import ComputeOp, PlaceholderOp, Tensor
from .bound import (StageBound, attach_leaf, _enclosing_ranges, leaf_values, effective_body, infer_bounds, pass_up_conditions,
                    pass_up_index)


class _LowerExpr(Mutator):
    """Tensor reads -> buffer reads (shifted by the region an attached stage holds)."""

    def __init__(self, ctx, vmap):
        self.ctx = ctx
        self.vmap = vmap

    def visit_Var(self, v):
        return self.vmap.get(v, v)

    def visit_ProducerLoad(self, e):
        idx = [self.visit(i) for i in e.indices]
        st = self.ctx.sched.stage_map[e.tensor.op]
        buf = self.ctx.buffer(st)
        off = self.ctx.offset(st)
        return E.BufferLoad(buf, tuple(i - o if not E.is_const_int(o, 0) else i for i, o in zip(idx, off)))


class ScheduleLowering:
    def __init__(self, sched, args, name):
        self.sched = sched
        self.name = name
        self.bounds: Dict[object, StageBound] = infer_bounds(sched)
        self.bodies = {}
        self.buffers = {}
        self.params = []
        self.arg_stages = {}
        self.scalar_args = []
        self._bind_args(args)
        self.size_ranges = {}
        for p in self.params:
            for d in getattr(p, "shape", ()):
                if isinstance(d, E.Var):
                    self.size_ranges[d] = E.Range(E.const(0), E.const(2**31 - 1))
        self.attach_map: Dict[tuple, List] = {}
        for st in sched.stages:
            if st.attach_type == "scope":
                self.attach_map.setdefault((st.attach_stage, attach_leaf(st)), []).append(st)

    # ------------------------------------------------------------------ buffers
    def _bind_args(self, args):
        for k, a in enumerate(args):
            if isinstance(a, Tensor):
                st = self.sched.stage_map.get(a.op)
                if st is None:
                    raise LoweringError(f"argument {k} '{a.name}' is not part of the schedule")
                if st.attach_type == "inline":
                    raise LoweringError(f"argument {k} '{a.name}' is inlined, so it has no buffer "
                                        "to pass; remove it from args or do not inline it")
                if st in self.arg_stages:
                    raise LoweringError(f"argument {k} '{a.name}' is passed twice")
                buf = S.Buffer(a.name, tuple(a.shape), a.dtype)
                self.buffers[st] = buf
                self.arg_stages[st] = k
                self.params.append(buf)
            elif isinstance(a, E.Var):
                self.params.append(a)
                self.scalar_args.append(a)
            else:
                raise LoweringError(f"argument {k}: expected a tensor or a tdsl.var, got {a!r}")
        for st in self.sched.stages:
            if st.is_output and st not in self.arg_stages:
                raise LoweringError(f"output '{st.name}' is not in the argument list")
            if isinstance(st.op, PlaceholderOp) and st not in self.arg_stages:
                if any(st in self.sched.producers(c) for c in self.sched.stages):
                    raise LoweringError(f"placeholder '{st.name}' is read but not in the argument list")

    def buffer(self, st) -> S.Buffer:
        buf = self.buffers.get(st)
        if buf is None:
            b = self.bounds[st]
            aligns = tuple(st.storage_aligns)
            buf = self.buffers[st] = S.Buffer(st.name, tuple(b.alloc_shape), st.op.dtype, st.scope, aligns)
        return buf

    def offset(self, st):
        if st in self.arg_stages or st.attach_type == "root" or isinstance(st.op, PlaceholderOp):
            return tuple(E.const(0) for _ in st.op.shape)
        return self.bounds[st].region_min

    # ------------------------------------------------------------------ nests
    def lower(self) -> S.Stmt:
        stmts = []
        allocs = []
        for st in self.sched.stages:
            if isinstance(st.op, PlaceholderOp) or st.attach_type != "root":
                continue
            stmts.append(self.make_nest(st))
            if st not in self.arg_stages:
                allocs.append(self.buffer(st))
        body = S.seq(*stmts)
        for buf in reversed(allocs):
            body = S.Allocate(buf, body)
        return body

    def _for(self, st, iv, body):
        rng = self.bounds[st].ranges[iv]
        attr = st.iter_var_attrs.get(iv)
        kind = attr.kind if attr is not None else S.ForKind.SERIAL
        ext = arith.simplify(rng.extent)
        if kind in (S.ForKind.VECTORIZED, S.ForKind.UNROLLED) and not isinstance(ext, E.IntImm):
            what = "vectorize" if kind is S.ForKind.VECTORIZED else "unroll"
            raise ScheduleError(f"{what}: stage '{st.name}': axis '{iv.var.name}' has the non-constant "
                                f"extent {ext}; split it by a constant factor and {what} the inner axis")
        tag = attr.thread.thread_tag if attr is not None and attr.thread is not None else ""
        pragmas = tuple(attr.pragmas) if attr is not None else ()
        return S.For(iv.var, E.const(0), ext, kind, body, tag, pragmas)

    def _wrap(self, st, leaves, body, with_attached=True):
        for iv in reversed(leaves):
            if with_attached:
                attached = self.attach_map.get((st, iv), [])
                if attached:
                    nests = [self.make_nest(a) for a in attached]
                    body = S.seq(*nests, body)
                    for a in reversed(attached):
                        body = S.Allocate(self.buffer(a), body)
            body = self._for(st, iv, body)
        return body

    def make_nest(self, st) -> S.Stmt:
        op = st.op
        if not isinstance(op, ComputeOp):
            raise LoweringError(f"stage '{st.name}' cannot be computed")
        b = self.bounds[st]
        leaves = st.leaf_iter_vars
        vals = pass_up_index(st, b.ranges, leaf_values(st, b.ranges))
        roots = list(op.axis) + list(op.reduce_axis)
        vmap = {iv.var: vals[iv] for iv in roots}
        conds = pass_up_conditions(st, b.ranges, vals)
        if st.attach_type == "scope":
            around = _enclosing_ranges(self.sched, st, self.bounds)
            around.update(self.size_ranges)
            for iv, x in zip(op.axis, (vals[iv] for iv in op.axis)):
                dom = iv.dom
                rng = b.ranges[iv]
                if not arith.can_prove(E.LE(dom.min, rng.min), around):
                    conds.append((E.likely(x >= dom.min), False))
                if not arith.can_prove(E.LE(rng.min + rng.extent, dom.min + dom.extent), around):
                    conds.append((E.likely(x < dom.min + dom.extent), False))
        spatial = [c for c, red in conds if not red]
        reduce_conds = [c for c, red in conds if red]
        buf = self.buffer(st)
        off = self.offset(st)
        idx = tuple(arith.simplify(vals[iv] - o) for iv, o in zip(op.axis, off))
        body = effective_body(self.sched, st, self.bodies)
        lower = _LowerExpr(self, vmap)
        if not isinstance(body, E.Reduce):
            store = _guard(spatial, S.BufferStore(buf, lower.visit(body), idx))
            return self._wrap(st, leaves, store)
        init = body.init if body.init is not None else body.combiner.identity(body.dtype)
        init = E.cast(lower.visit(init), body.dtype)
        src = lower.visit(body.source)
        update_val = E.convert(body.combiner.combine(E.BufferLoad(buf, idx), src))
        where = lower.visit(body.condition)
        rconds = reduce_conds + ([] if E.is_const_int(where, 1) else [where])
        update = _guard(spatial, _guard(rconds, S.BufferStore(buf, update_val, idx)))
        init_store = _guard(spatial, S.BufferStore(buf, init, idx))
        p = next((k for k, iv in enumerate(leaves) if iv.kind == "reduce"), len(leaves))
        threads = [iv for iv in leaves[p:] if iv.kind == "reduce" and _bound_tag(st, iv)]
        if threads:
            return self._cross_thread_reduce(st, leaves, p, threads, body, buf, idx, spatial,
                                             rconds, lower, src)
        init_nest = self._wrap(st, [iv for iv in leaves[p:] if iv.kind != "reduce"], init_store,
                               with_attached=False)
        update_nest = self._wrap(st, leaves[p:], update)
        return self._wrap(st, leaves[:p], S.seq(init_nest, update_nest))

    def _cross_thread_reduce(self, st, leaves, p, threads, body, buf, idx, spatial, rconds,
                             lower, src):
        """out[idx] = reduce over a threadIdx-bound reduction loop, through shared memory.

        Inside the spatial loops: each thread folds its serial reduction loops into a local
        accumulator and stores it to red[g*T + t] (g: the thread's group from the spatial
        threadIdx loops, t: its index on the reduction tag); then a tree over red, halving
        the active threads each step (any T: elements past T count as absent); thread 0 of
        the group writes the result. thread_sync inserts the barriers."""
        def err(msg):
            return ScheduleError(f"bind: stage '{st.name}': {msg}")
        if len(threads) > 1:
            names = ", ".join(iv.var.name for iv in threads)
            raise err(f"only one reduction axis may be bound to a thread index, got {names}; "
                      "fuse them first")
        tiv = threads[0]
        tag = _bound_tag(st, tiv)
        if not tag.startswith("threadIdx"):
            raise err(f"the reduction axis '{tiv.var.name}' is bound to {tag}; blocks cannot "
                      "combine partial results, bind it to a threadIdx tag (or rfactor the "
                      "reduction and bind the factored stage's spatial axis)")
        spatial_in = [iv for iv in leaves[p:] if iv.kind != "reduce"]
        if spatial_in:
            raise err(f"the spatial axis '{spatial_in[0].var.name}' is inside the reduction "
                      "loops of a cross-thread reduction; reorder it outside them")
        rng = self.bounds[st].ranges
        T = arith.simplify(rng[tiv].extent)
        if not isinstance(T, E.IntImm):
            raise err(f"the thread-bound reduction axis '{tiv.var.name}' needs a constant "
                      f"extent, got {T}")
        T = T.value
        group, G = E.const(0), 1
        for iv in leaves[:p]:
            t = _bound_tag(st, iv)
            if t.startswith("threadIdx"):
                ext = arith.simplify(rng[iv].extent)
                if not isinstance(ext, E.IntImm):
                    raise err(f"the thread-bound axis '{iv.var.name}' needs a constant extent")
                group = group * ext.value + iv.var if G > 1 else iv.var
                G *= ext.value
        dtype = body.dtype
        acc = S.Buffer(f"{st.name}.acc", (E.const(1),), dtype, "local")
        red = S.Buffer(f"{st.name}.red", (E.const(G * T),), dtype, "shared")
        zero = (E.const(0),)
        identity = E.cast(E.convert(body.combiner.identity(dtype)), dtype)
        comb = body.combiner.combine
        update = _guard(spatial, _guard(rconds, S.BufferStore(
            acc, E.convert(comb(E.BufferLoad(acc, zero), src)), zero)))
        others = [iv for iv in leaves[p:] if iv is not tiv]
        base = group * T if G > 1 else E.const(0)
        per_thread = S.Allocate(acc, S.seq(
            S.BufferStore(acc, identity, zero),
            self._wrap(st, others, update),
            S.BufferStore(red, E.BufferLoad(acc, zero), (base + tiv.var,))))
        parts = [self._wrap(st, [tiv], per_thread)]
        step = 1
        while step < T:
            step *= 2
        step //= 2

        def thread_loop(name, fn):
            v = E.Var(f"{tiv.var.name}.{name}", tiv.var.dtype)
            return S.For(v, E.const(0), E.const(T), S.ForKind.THREAD_BINDING, fn(v), tag)
        while step >= 1:
            s_ = step

            def tree(v, s_=s_):
                a = E.BufferLoad(red, (base + v,))
                b = E.BufferLoad(red, (base + v + s_,))
                cond = E.And(E.LT(v, E.const(s_)), E.LT(v + s_, E.const(T)))
                return S.IfThenElse(cond, S.BufferStore(red, E.convert(comb(a, b)), (base + v,)))
            parts.append(thread_loop(f"s{s_}", tree))
            step //= 2
        result = E.BufferLoad(red, (base,))
        if body.init is not None:
            result = E.convert(comb(E.cast(lower.visit(body.init), dtype), result))

        def write(v):
            return S.IfThenElse(E.EQ(v, E.const(0)), _guard(spatial, S.BufferStore(buf, result, idx)))
        parts.append(thread_loop("w", write))
        return self._wrap(st, leaves[:p], S.Allocate(red, S.seq(*parts)))


def _bound_tag(st, iv) -> str:
    attr = st.iter_var_attrs.get(iv)
    return attr.thread.thread_tag if attr is not None and attr.thread is not None else ""


def _guard(conds, stmt):
    if not conds:
        return stmt
    c = conds[0]
    for x in conds[1:]:
        c = E.And(c, x)
    return S.IfThenElse(c, stmt)


def schedule_to_func(sched, args, name) -> S.PrimFunc:
    low = ScheduleLowering(sched, args, name)
    body = low.lower()
    params = list(low.params)
    # Sizes that appear in argument shapes become trailing parameters bound from the arrays.
    size_vars = []
    for p in params:
        if isinstance(p, S.Buffer):
            for dim in p.shape:
                for v in sorted(free_vars(dim), key=lambda v: v.name):
                    if v not in params and v not in size_vars:
                        size_vars.append(v)
    defined = set(params) | set(size_vars)
    undefined = [v for v in _free_outside(body) if v not in defined]
    if undefined:
        names = ", ".join(sorted(v.name for v in undefined))
        raise LoweringError(f"variable(s) {names} are used but neither passed in args nor sizes of "
                            "an argument; add them to the argument list")
    func = S.PrimFunc(name, params + size_vars, body,
                      {"num_user_args": len(params), "schedule": sched, "bounds": low.bounds})
    return func


def _free_outside(body):
    """Variables read in `body` that no loop or let inside it defines."""
    used = free_vars(body)
    bound_vars = set()

    def f(n):
        if isinstance(n, (S.For, S.LetStmt)):
            bound_vars.add(n.var)
    from ..ir.visitor import walk
    walk(body, f)
    return [v for v in used if v not in bound_vars]
