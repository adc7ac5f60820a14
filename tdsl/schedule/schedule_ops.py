"""Builds the loop IR of a schedule from scratch: one loop nest per stage, attached stages
inserted at their attach loops, inlined stages substituted, reductions split into an init
nest and an update nest, guards for non-divisible splits (marked `likely`, so loop
partitioning can peel them).

A stage with several outputs (a tuple-valued compute, a reduction over tuples) has one
buffer per output and stores them all in one nest; a tuple reduction computes every new
element before storing any (`store_values`), since each reads all the old ones.

`set_store_predicate(cond)` guards a stage's stores; thread axes in `cond` stand for the
loops bound to their tags, and a tag no enclosing loop has gets a loop of its own around
the store (TVM's meaning: "only thread 0 of the block writes").

GPU: a reduction whose reduction loop is bound to threadIdx.* becomes a cross-thread
reduction (`cross_thread.py`): each thread accumulates its share in a local
register, the partial results meet in a shared buffer and are combined by a tree, and one
thread writes the result. Loops bound to thread tags are THREAD_BINDING loops; on a GPU
every thread runs the kernel body, so nested loops with the same tag share the index."""
from __future__ import annotations

from typing import Dict, List

from .. import arith
from ..errors import LoweringError, ScheduleError
from ..ir import expr as E
from ..ir import stmt as S
from ..ir.visitor import Mutator, replace_buffers, substitute, free_vars, walk
from ..te.compute import THREAD_TAGS
from ..te.extern import ExternOp
from ..te.scan import ScanOp, scan_roles
from ..te.tensor import ComputeOp, PlaceholderOp, Tensor
from .tensorize import tensorize_update
from .cross_thread import cross_thread_reduce
from .scan_gpu import scan_kernel
from .prefetch import check_prefetch_axes, prefetch_stmts
from .nest import bound_tag, combine_into, guarded, wrap_threads
from .store_with import check_store_with
from .update_nest import make_update
from .updates import chain_arg, check_chain_readers, update_chains
from .bound import (StageBound, root_bound, attach_leaf, enclosing_ranges, leaf_values, effective_bodies,
                    infer_bounds, pass_up_conditions, pass_up_index, size_facts)


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
        buf = self.ctx.buffer(st, e.tensor.value_index)
        off = self.ctx.offset(st)
        return E.BufferLoad(buf, tuple(i - o if not E.is_const_int(o, 0) else i for i, o in zip(idx, off)))


class ScheduleLowering:
    """The loop IR of one schedule. Besides `lower()`, its nest builder is what the
    lowering's extensions (`cross_thread.py`, `scan_gpu.py`, `prefetch.py`) build with, as
    TVM's `op_utils.h` serves its compute ops: `loop` (one leaf's For), `wrap` (the nest of
    several leaves, with what is attached or prefetched at them), `allocate` (a stage's
    storage), `predicate` (a store predicate as IR), `thread_groups`, `provide` (a loop
    already open) and `bodies_of`; `bounds`, `sched`, `attach_map` and `buffer()` are
    read as they are."""

    def __init__(self, sched, args, name, warp_size=0):
        self.sched = sched
        self.name = name
        self.warp_size = warp_size    # cross-thread reductions shuffle within such warps (0: never)
        self.roles = scan_roles([st.op for st in sched.stages])
        self.bounds: Dict[object, StageBound] = infer_bounds(sched)
        self._bodies = {}
        self.buffers = {}         # (stage, output index) -> Buffer
        self.params = []
        self.arg_stages = {}      # stage -> position of its first output among the args
        self.arg_keys = set()     # (stage, output index) passed as arguments
        self.scalar_args = []
        self.double_buffered = {}  # buffer -> stages of multi_buffer() stages, for that pass
        self._provided = {}       # leaf -> variable of an enclosing loop that stands for it
        self._axis_values = {}    # stage -> {output axis: value}: reduce bounds may use them
        self.thread_ivs = {a.thread for st in sched.stages for a in st.iter_var_attrs.values()
                           if a.thread is not None}
        self.chains = update_chains(sched)     # pure stage -> its update stages
        self.chain_of = {u: base for base, ups in self.chains.items() for u in ups}
        check_chain_readers(self.sched, self.chains, self.chain_of)
        self._bind_args(args)
        check_store_with(sched, self.bounds, self.arg_stages)
        self.size_ranges = size_facts(sched, self.bounds, self.params)
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
                if st.attach_type == "inline" and st not in self.bounds:
                    # TVM leaves such an argument unwritten; the caller would read stale data,
                    # so it is computed at root as well as inlined into its readers
                    self.bounds[st] = root_bound(st)
                st = chain_arg(self.chains, self.chain_of, k, a, st)
                role = self.roles.get(a.op)
                if role is not None:
                    raise LoweringError(f"argument {k} '{a.name}' is the {role[2]} of scan "
                                        f"'{role[0].name}', which lives in the scan's output; "
                                        "pass the scan's output instead")
                key = (st, a.value_index)
                if key in self.arg_keys:
                    raise LoweringError(f"argument {k} '{a.name}' is passed twice")
                buf = S.Buffer(a.name, tuple(a.shape), a.dtype)
                self.buffers[key] = buf
                self.arg_keys.add(key)
                self.arg_stages.setdefault(st, k)
                self.params.append(buf)
            elif isinstance(a, E.Var):
                self.params.append(a)
                self.scalar_args.append(a)
            else:
                raise LoweringError(f"argument {k}: expected a tensor or a tdsl.var, got {a!r}")
        for st in self.sched.stages:
            if st.is_output and st not in self.arg_stages and st not in self.chain_of:
                raise LoweringError(f"output '{st.name}' is not in the argument list")
            if isinstance(st.op, PlaceholderOp) and st not in self.arg_stages \
                    and st.op not in self.roles:
                if any(st in self.sched.producers(c) for c in self.sched.stages):
                    raise LoweringError(f"placeholder '{st.name}' is read but not in the argument list")

    def lowerer(self, vmap):
        """The mutator that turns tensor reads into buffer reads, with loop variables
        replaced by `vmap` (the nests of `update_nest.py` build with it)."""
        return _LowerExpr(self, vmap)

    def buffer(self, st, k=0) -> S.Buffer:
        """The buffer of output `k` of stage `st`."""
        if st in self.chain_of:      # an update writes its pure stage's buffer
            return self.buffer(self.chain_of[st])
        role = self.roles.get(st.op)
        if role is not None:     # a scan's init, update and state are rows of its output
            return self.buffer(self.sched.stage_map[role[0]], role[1])
        if st.stored_with is not None:
            return self.buffer(st.stored_with)
        buf = self.buffers.get((st, k))
        if buf is None:
            b = self.bounds[st]
            t = st.op.output(k)
            if st.storage_swizzle_bytes and st.scope != "shared":
                raise ScheduleError(f"storage_swizzle: stage '{st.name}' is in scope "
                                    f"'{st.scope}'; the swizzle lays out GPU shared memory "
                                    "(a cache_read or cache_write in scope 'shared')")
            buf = S.Buffer(t.name, tuple(b.alloc_shape), t.dtype, st.scope,
                           tuple(st.storage_aligns), st.storage_swizzle_bytes)
            self.buffers[(st, k)] = buf
            if st.double_buffered:
                self.double_buffered[buf] = st.double_buffered
        return buf

    def stage_buffers(self, st):
        return [self.buffer(st, k) for k in range(st.op.num_outputs)]

    def allocate(self, st, body):
        """`body` with storage for the outputs of `st` that are not arguments."""
        for k in reversed(range(st.op.num_outputs)):
            if (st, k) not in self.arg_keys and st.stored_with is None:
                body = S.Allocate(self.buffer(st, k), body)
        return body

    def offset(self, st):
        if st in self.chain_of:
            return self.offset(self.chain_of[st])
        if st in self.arg_stages or st.attach_type == "root" or isinstance(st.op, PlaceholderOp) \
                or st.stored_with is not None:
            return tuple(E.const(0) for _ in st.op.shape)
        return self.bounds[st].region_min

    # ------------------------------------------------------------------ nests
    def lower(self) -> S.Stmt:
        stmts = []
        roots = []
        for st in self.sched.stages:
            if isinstance(st.op, PlaceholderOp):
                continue
            check_prefetch_axes(st)
            if st.store_predicate is not None and st.attach_type == "inline":
                raise ScheduleError(f"set_store_predicate: stage '{st.name}' is inlined: it "
                                    "stores nothing for the predicate to guard")
            if st.double_buffered and st.attach_type != "scope":
                where = "inlined" if st.attach_type == "inline" else "computed at root"
                raise ScheduleError(
                    f"double_buffer: stage '{st.name}' is {where}; attach it (compute_at) "
                    "inside the loop over whose iterations it alternates")
            if isinstance(st.op, ExternOp) and st.attach_type != "root":
                raise ScheduleError(f"extern stage '{st.name}' is a call on whole arrays: it "
                                    "runs at root and cannot be inlined or attached")
            if st in self.chain_of:
                # at root each update runs at its place in the dataflow (after an rfactor's
                # partial results); attached, with its pure stage
                if self.chain_of[st].attach_type == "root":
                    stmts.append(make_update(self, st))
                continue
            if st.op in self.roles:
                continue        # emitted with its scan
            if st.attach_type != "root" and not (st.attach_type == "inline" and st in self.arg_stages):
                continue
            make = self.make_scan if isinstance(st.op, ScanOp) else \
                self.make_extern if isinstance(st.op, ExternOp) else self.make_nest
            stmts.append(make(st))
            roots.append(st)
        body = S.seq(*stmts)
        for st in reversed(roots):
            body = self.allocate(st, body)
        return body

    def make_scan(self, st) -> S.Stmt:
        """The init nests, then the serial loop over the steps with each update's nest (one
        row per step) inside; on the GPU all of it inside the grid loops (`scan_gpu.py`)."""
        op = st.op
        for t in op.init + op.update:
            m = self.sched.stage_map[t.op]
            if m.attach_type != "root":
                raise ScheduleError(f"scan '{op.name}': '{m.name}' is part of the scan and is "
                                    "computed by it; it cannot be inlined or attached elsewhere")
        self._check_state_readers(op)

        def emit():
            inits = [self.make_nest(self.sched.stage_map[t.op]) for t in op.init]
            updates = [self.make_nest(self.sched.stage_map[t.op]) for t in op.update]
            ax = op.scan_axis
            loop = S.For(ax.var, ax.dom.min, ax.dom.extent, S.ForKind.SERIAL, S.seq(*updates))
            return S.seq(*inits, loop)
        return scan_kernel(self, op, emit)

    def _whole_buffer(self, st, t, callee):
        """The buffer of tensor `t`, which extern stage `st` reads or writes whole."""
        src = self.sched.stage_map[t.op]
        if src.attach_type != "root" and src not in self.arg_stages \
                and not isinstance(src.op, PlaceholderOp):
            raise ScheduleError(f"extern stage '{st.name}' passes '{t.name}' whole to "
                                f"{callee}; compute '{src.name}' at root "
                                "(it is inlined or attached)")
        return self.buffer(src, t.value_index)

    def make_extern(self, st) -> S.Stmt:
        """The call on the whole buffers of its tensors, or its loop-IR body addressing
        them."""
        op = st.op
        if op.body is not None:
            tensors = op.inputs + op.outputs
            return replace_buffers(op.body, {
                b: self._whole_buffer(st, t, "its ir_builder body")
                for t, b in zip(tensors, op.stage_buffers)})
        args, shapes, writes = [], [], []
        for k, a in enumerate(st.op.call.args):
            if isinstance(a, Tensor):
                args.append(self._whole_buffer(st, a, f"'{st.op.call.name}'"))
                shapes.append(tuple(a.shape))
                if a.op is st.op:
                    writes.append(k)
            else:
                args.append(a)
                shapes.append(None)
        return S.ExternCall(st.op.call.name, tuple(args), tuple(shapes), tuple(writes))

    def _check_state_readers(self, op):
        """A compute that reads the state needs the step it runs in: it must be inside the
        update (attached or inlined), or be the update."""
        states = {t.op for t in op.state_placeholder}
        for st in self.sched.stages:
            if st.attach_type != "root" or not isinstance(st.op, ComputeOp) or st.op in self.roles:
                continue
            if _reads_any(self.bodies_of(st), states):
                raise ScheduleError(f"scan '{op.name}': stage '{st.name}' reads the scan state at "
                                    "root, before the steps exist; compute_at it inside the "
                                    "update or compute_inline it")

    def loop(self, st, iv, body):
        """The For of leaf `iv` of `st` around `body`: its bound extent, its kind, thread
        tag and pragmas from the schedule, checked (constant extents where vectorize,
        unroll or vthread need them, a thread axis's declared domain)."""
        rng = self.bounds[st].ranges[iv]
        attr = st.iter_var_attrs.get(iv)
        kind = attr.kind if attr is not None else S.ForKind.SERIAL
        ext = arith.simplify(substitute(rng.extent, self._axis_values.get(st) or {}))
        vthread = attr is not None and attr.thread is not None and \
            attr.thread.thread_tag == "vthread"
        if (vthread or kind in (S.ForKind.VECTORIZED, S.ForKind.UNROLLED)) \
                and not isinstance(ext, E.IntImm):
            prim = "bind" if vthread else "vectorize" if kind is S.ForKind.VECTORIZED else "unroll"
            what = "bind the inner axis to vthread" if vthread else f"{prim} the inner axis"
            raise ScheduleError(f"{prim}: stage '{st.name}': axis '{iv.var.name}' has the non-constant "
                                f"extent {ext}; split it by a constant factor and {what}")
        thread = attr.thread if attr is not None else None
        tag = thread.thread_tag if thread is not None else ""
        if thread is not None and thread.dom is not None \
                and not arith.equal(ext, thread.dom.extent):
            raise ScheduleError(
                f"bind: stage '{st.name}': axis '{iv.var.name}' has {ext} iterations but the "
                f"thread axis {tag} was declared with the domain [0, {thread.dom.extent}); "
                f"split it with nparts={thread.dom.extent} (or factor=...) to match")
        pragmas = tuple(attr.pragmas) if attr is not None else ()
        return S.For(iv.var, E.const(0), ext, kind, body, tag, pragmas)

    def wrap(self, st, leaves, body, with_attached=True):
        """`body` inside the loops of `leaves` of `st` (outermost first), with the stages
        attached at each loop computed (and allocated) before the body and its prefetches
        issued at its top, unless `with_attached` is False (an init nest, which shares the
        loops of its update). A leaf given to `provide` gets no loop: its variable stands
        for it."""
        for iv in reversed(leaves):
            if with_attached:
                attached = self.attach_map.get((st, iv), [])
                if attached:
                    self._check_double_buffer(st, iv, attached)
                    nests = [self.make_nest(a) for a in attached]
                    body = S.seq(*nests, body)
                    for a in reversed(attached if iv not in self._provided else ()):
                        body = self.allocate(a, body)
                body = S.seq(*prefetch_stmts(self, st, iv), body)
            if iv in self._provided:     # its loop is open already (a scan's grid loops)
                v = self._provided[iv]
                body = body if v is iv.var else substitute(body, {iv.var: v})
                continue
            body = self.loop(st, iv, body)
        return body

    def provide(self, leaf, var):
        """The loop of `leaf` is open already around the nests about to be built (a scan's
        grid loops, hoisted out of init and update): `wrap` uses `var` for it."""
        self._provided[leaf] = var

    def bodies_of(self, st):
        """The bodies of `st` with its inlined producers substituted."""
        return effective_bodies(self.sched, st, self._bodies)

    def make_nest(self, st) -> S.Stmt:
        """The loop nest of `st`; for a stage with updates, then one per update."""
        nest = self.make_pure_nest(st)
        ups = self.chains.get(st)
        if not ups or st.attach_type == "root":
            return nest
        return S.seq(nest, *[make_update(self, u) for u in ups])

    def make_pure_nest(self, st) -> S.Stmt:
        op = st.op
        if not isinstance(op, ComputeOp):
            raise LoweringError(f"stage '{st.name}' cannot be computed")
        b = self.bounds[st]
        leaves = st.leaf_iter_vars
        vals = pass_up_index(st, b.ranges, leaf_values(st, b.ranges))
        roots = list(op.axis) + list(op.reduce_axis)
        # (a loop of one iteration may be inside the reduction: its variable is 0)
        one = {iv.var: E.const(0) for iv in leaves if E.is_const_int(b.ranges[iv].extent, 1)}
        self._axis_values[st] = at = {iv.var: substitute(vals[iv], one) for iv in op.axis}
        vmap = {iv.var: substitute(vals[iv], at) if iv.kind == "reduce" else vals[iv] for iv in roots}
        conds = pass_up_conditions(st, b.ranges, vals)
        if st.attach_type == "scope":
            around = enclosing_ranges(self.sched, st, self.bounds)
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
        bufs = self.stage_buffers(st)
        off = self.offset(st)
        idx = tuple(arith.simplify(vals[iv] - o) for iv, o in zip(op.axis, off))
        bodies = self.bodies_of(st)
        lower = _LowerExpr(self, vmap)
        pred, wraps = self.predicate(st, lower)
        guard = spatial + pred
        tz = self._tensorized(st, leaves, guard, reduce_conds + wraps)
        if tz is not None:
            call, init_call = tensorize_update(self, st, leaves, tz, vals, off, bufs,
                                               lambda m: _LowerExpr(self, m), bodies[0])
            call = guarded(guard, call)
        if not isinstance(bodies[0], E.Reduce):
            if tz is not None:
                return self.wrap(st, leaves[:tz], call)
            store = S.seq(*[S.BufferStore(b, lower.visit(x), idx) for b, x in zip(bufs, bodies)])
            return self.wrap(st, leaves, wrap_threads(wraps, guarded(guard, store)))
        red = bodies[0]
        dtypes = [x.dtype for x in red.sources]
        inits = red.inits if red.inits is not None else red.combiner.identity_values(dtypes)
        inits = [E.cast(lower.visit(v), d) for v, d in zip(inits, dtypes)]
        srcs = tuple(lower.visit(x) for x in red.sources)
        where = lower.visit(red.condition)
        rconds = reduce_conds + ([] if E.is_const_int(where, 1) else [where])
        update = wrap_threads(wraps, guarded(guard, guarded(rconds, combine_into(
            red.combiner, bufs, idx, srcs))))
        init_store = wrap_threads(wraps, guarded(guard, S.seq(*[
            S.BufferStore(b, v, idx) for b, v in zip(bufs, inits)])))
        p = next((k for k, iv in enumerate(leaves) if iv.kind == "reduce"), len(leaves))
        if tz is not None:      # the intrinsic is the update; its reduce_init, else tdsl's
            q = min(p, tz)      # own loops, initialise
            if init_call is not None:
                init_nest = self.wrap(st, [iv for iv in leaves[q:tz] if iv.kind != "reduce"],
                                      guarded(guard, init_call), with_attached=False)
            else:
                init_nest = self.wrap(st, [iv for iv in leaves[q:] if iv.kind != "reduce"],
                                      init_store, with_attached=False)
            return self.wrap(st, leaves[:q], S.seq(init_nest, self.wrap(st, leaves[q:tz], call)))
        threads = [iv for iv in leaves[p:] if iv.kind == "reduce" and bound_tag(st, iv)]
        if threads:
            return cross_thread_reduce(self, st, leaves, p, threads, red, bufs, idx, spatial,
                                             rconds, lower, srcs)
        init_nest = self.wrap(st, [iv for iv in leaves[p:] if iv.kind != "reduce"], init_store,
                              with_attached=False)
        update_nest = self.wrap(st, leaves[p:], update)
        return self.wrap(st, leaves[:p], S.seq(init_nest, update_nest))

    def _tensorized(self, st, leaves, guards, other):
        """The position of the tensorized leaf of `st`, or None; the block must run whole:
        `guards` may only test loops outside it (a ragged tile of rows around a block of
        columns: each call runs whole or not at all), and there may be no `other`
        conditions, thread bindings or stages attached inside it."""
        tz = next((k for k, iv in enumerate(leaves) if st.iter_var_attrs.get(iv) is not None
                   and st.iter_var_attrs[iv].tensor_intrin is not None), None)
        if tz is None:
            return None
        iv = leaves[tz]
        where = f"tensorize: stage '{st.name}': axis '{iv.var.name}': "
        inner = {x.var for x in leaves[tz:]}
        if other or any(free_vars(g) & inner for g in guards):
            raise ScheduleError(where + "the block has guards (a split that does not divide "
                                "its axis, a store predicate, a condition): each call must "
                                "compute a whole block")
        for x in leaves[tz:]:
            attr = st.iter_var_attrs.get(x)
            if attr is not None and x is not iv and (attr.kind is not S.ForKind.SERIAL
                                                     or attr.tensor_intrin is not None):
                raise ScheduleError(where + f"loop '{x.var.name}' inside the block is marked "
                                    f"{attr.kind.value}; the intrinsic replaces it")
            if self.attach_map.get((st, x)):
                raise ScheduleError(where + f"a stage is computed at '{x.var.name}', inside "
                                    "the block the intrinsic replaces")
        if st.iter_var_attrs[iv].tensor_intrin.warp:
            self._check_warp(st, leaves[:tz], where)
        return tz

    def _check_warp(self, st, outer, where):
        """A warp intrinsic's call must be reached by the 32 lanes of each warp with the
        same blocks: threadIdx.x is the lanes (extent 32, so a warp is one value of the
        other thread indices) and binds no loop around the call."""
        ext = self._tag_extent("threadIdx.x")
        if ext is None or not E.is_const_int(ext, 32):
            raise ScheduleError(where + f"a warp intrinsic needs threadIdx.x bound with "
                                f"extent 32 (the warp's lanes) in the kernel, found {ext}")
        for s, x in self._loops_outward(st, outer):
            if bound_tag(s, x) == "threadIdx.x":
                raise ScheduleError(where + f"loop '{x.var.name}' of stage '{s.name}' around "
                                    "the warp intrinsic is bound to threadIdx.x: every lane "
                                    "of the warp must make the same call; bind warps to "
                                    "threadIdx.y/z")

    # ------------------------------------------------------------------ predicates
    @staticmethod
    def _loops_outward(st, leaves):
        """(stage, leaf) of `leaves` of `st`, then of the loops around its attach point in
        the stages it is attached in, innermost stage first."""
        s = st
        while True:
            for iv in leaves:
                yield s, iv
            if s.attach_type != "scope":
                return
            parent = s.attach_stage
            leaves = parent.leaf_iter_vars[:parent.leaf_iter_vars.index(attach_leaf(s)) + 1]
            s = parent

    def _thread_loops(self, st):
        """tag -> the variable of the loop bound to it around the stores of `st`."""
        out = {}
        for s, iv in self._loops_outward(st, st.leaf_iter_vars):
            tag = bound_tag(s, iv)
            if tag and tag != "vthread":
                out.setdefault(tag, iv.var)
        return out

    def thread_groups(self, st, outer, tag):
        """The loops bound to threadIdx tags other than `tag` around a cross-thread
        reduction of `st` (`outer`: its own loops outside the reduction), one per tag, with
        their extents: each combination of their indices reduces in its own part of the
        shared buffer."""
        out, seen = [], {tag}
        for s, iv in self._loops_outward(st, outer):
            t = bound_tag(s, iv)
            if t.startswith("threadIdx") and t not in seen:
                seen.add(t)
                out.append((iv, arith.simplify(self.bounds[s].ranges[iv].extent)))
        return out

    def _tag_extent(self, tag):
        for st in self.sched.stages:
            for iv, attr in st.iter_var_attrs.items():
                if attr.thread is not None and attr.thread.thread_tag == tag and st in self.bounds:
                    return arith.simplify(self.bounds[st].ranges[iv].extent)
        return None

    def predicate(self, st, lower, at=None):
        """The store predicate of `st` as loop IR ([] or [cond]) and the thread loops to put
        around the guarded stores ([(var, extent, tag)]). `at` overrides tag -> variable
        (the write-back loop of a cross-thread reduction)."""
        pred = st.store_predicate
        if pred is None:
            return [], []
        loops = self._thread_loops(st)
        loops.update(at or {})
        vmap, wraps = {}, []
        for v in free_vars(pred):
            tiv = next((t for t in self.thread_ivs if t.var is v), None)
            tag = tiv.thread_tag if tiv is not None else v.name
            if tag not in THREAD_TAGS:
                continue
            if tag in loops:
                vmap[v] = loops[tag]
                continue
            ext = self._tag_extent(tag)
            if ext is None or tag == "vthread":
                raise ScheduleError(f"set_store_predicate: stage '{st.name}': the predicate "
                                    f"reads {tag}, which no loop of the schedule is bound to")
            nv = E.Var(f"{st.name}.{tag}", v.dtype)
            vmap[v] = nv
            wraps.append((nv, ext, tag))
        return [lower.visit(substitute(pred, vmap))], wraps

    def _check_double_buffer(self, st, iv, attached):
        for a in attached:
            if not a.double_buffered:
                continue
            attr = st.iter_var_attrs.get(iv)
            kind = attr.kind if attr is not None else S.ForKind.SERIAL
            if kind is not S.ForKind.SERIAL:
                what = attr.thread.thread_tag if attr.thread is not None else kind.value
                raise ScheduleError(f"double_buffer: stage '{a.name}' is attached at loop "
                                    f"'{iv.var.name}' of '{st.name}', which is {what}; attach it "
                                    "at a serial loop (e.g. the outer reduction loop)")


def _reads_any(bodies, ops) -> bool:
    found = []

    def f(n):
        if isinstance(n, E.ProducerLoad) and n.tensor.op in ops:
            found.append(n)
    for b in bodies:
        walk(b, f)
    return bool(found)


def schedule_to_func(sched, args, name, warp_size=0) -> S.PrimFunc:
    low = ScheduleLowering(sched, args, name, warp_size)
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
                      {"num_user_args": len(params), "schedule": sched, "bounds": low.bounds,
                       "args": list(args), "double_buffer": dict(low.double_buffered)})
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
